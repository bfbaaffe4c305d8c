package ledger_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// reconResolutionItemsAnswerMaxWant is the most items a resolution may
// carry in any answer (app's reconResolutionItemsAnswerMax, restated: the
// test's own figure).
const reconResolutionItemsAnswerMaxWant = 10

// A resolution in any answer (a run's, a page of a run's resolutions, the
// resolve and void answers) carries at most a bounded page of its items,
// its item_count and a token for the rest, which
// GET /v1/reconciliations/{id}/resolutions/{resolution_id}/items pages in
// the resolution's order, each item once. Each resolution carried every
// item (up to 100), and a run's answer of 50 such weighed 1.6 MB.
func TestReconciliationResolutionItemsArePaged(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	tok := func(role, sub string) restClient {
		s, err := auth.Issue(secret, role, sub, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return restClient{t: t, base: base, token: s}
	}
	fin, aud := tok(auth.RoleFinance, ""), tok(auth.RoleAuditor, "")
	const big, small = 100, 25
	var b strings.Builder
	b.WriteString("date,reference,amount,balance\n")
	for i := range big + small + 3 {
		fmt.Fprintf(&b, "2026-11-30,REF-%05d,1.00,%d.00\n", i, i+1)
	}
	importCSV(t, f, "st-ri", b.String())
	rec := f.svc.Reconciliations()
	runs, err := rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance:alice")
	if err != nil || len(runs) != 1 {
		t.Fatalf("run: %v %v", runs, err)
	}
	runID := runs[0].ID
	refs := func(from, n int) []domain.LineRef {
		out := make([]domain.LineRef, 0, n)
		for i := range n {
			out = append(out, domain.LineRef{StatementID: "st-ri", LineNo: from + i})
		}
		return out
	}
	if _, err := rec.ResolveItems(f.ctx, runID, domain.ResolveWriteOff, "bank error", "finance:alice", refs(1, big), nil); err != nil {
		t.Fatal(err)
	}

	type item struct {
		StatementID string `json:"statement_id"`
		LineNo      int    `json:"line_no"`
		Reference   string `json:"reference"`
	}
	type resolution struct {
		ID        string `json:"resolution_id"`
		RunID     string `json:"reconciliation_id"`
		Items     []item `json:"items"`
		ItemCount int    `json:"item_count"`
		ItemsNext string `json:"items_next_page_token"`
	}
	bounded := func(name string, r resolution, want int) {
		t.Helper()
		if len(r.Items) > reconResolutionItemsAnswerMaxWant || r.ItemCount != want || (want > len(r.Items)) != (r.ItemsNext != "") {
			t.Fatalf("%s: a resolution of %d items answered %d, item_count %d, next token %q: want at most %d, the count and a token for the rest",
				name, want, len(r.Items), r.ItemCount, r.ItemsNext, reconResolutionItemsAnswerMaxWant)
		}
	}

	// A resolution answered by hand, over REST: bounded too.
	lines := make([]string, 0, small)
	for _, l := range refs(big+1, small) {
		lines = append(lines, fmt.Sprintf(`{"statement_id":%q,"line_no":%d}`, l.StatementID, l.LineNo))
	}
	code, body := fin.do("POST", "/v1/reconciliations/"+runID+"/resolutions",
		`{"action":"write_off","reason":"fees","lines":[`+strings.Join(lines, ",")+`]}`)
	var resolved struct {
		Resolution resolution `json:"resolution"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &resolved) != nil {
		t.Fatalf("resolve: %d %s", code, body[:min(len(body), 500)])
	}
	bounded("POST .../resolutions", resolved.Resolution, small)
	// A resolution under the bound answers whole, with no token.
	code, body = fin.do("POST", "/v1/reconciliations/"+runID+"/resolutions",
		`{"action":"write_off","reason":"fee","lines":[{"statement_id":"st-ri","line_no":`+fmt.Sprint(big+small+1)+`}]}`)
	var one struct {
		Resolution resolution `json:"resolution"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &one) != nil {
		t.Fatalf("resolve one: %d %s", code, body)
	}
	bounded("POST .../resolutions of one line", one.Resolution, 1)

	code, body = aud.do("GET", "/v1/reconciliations/"+runID, "")
	var run struct {
		Resolutions []resolution `json:"resolutions"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &run) != nil || len(run.Resolutions) != 3 {
		t.Fatalf("GET run: %d %s", code, body[:min(len(body), 500)])
	}
	want := []int{big, small, 1}
	for i, r := range run.Resolutions {
		bounded(fmt.Sprintf("GET /v1/reconciliations/{id}: resolution %d", i), r, want[i])
	}
	code, body = aud.do("GET", "/v1/reconciliations/"+runID+"/resolutions?page_size=2", "")
	var listed struct {
		Resolutions   []resolution `json:"resolutions"`
		NextPageToken string       `json:"next_page_token"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &listed) != nil || len(listed.Resolutions) != 2 || listed.NextPageToken == "" {
		t.Fatalf("GET resolutions: %d %s", code, body[:min(len(body), 500)])
	}
	for i, r := range listed.Resolutions {
		bounded(fmt.Sprintf("GET .../resolutions: resolution %d", i), r, want[i])
	}

	// Each resolution's answer, then its pages: each line once, in order.
	path := func(r resolution) string {
		return "/v1/reconciliations/" + r.RunID + "/resolutions/" + r.ID + "/items"
	}
	for i, r := range run.Resolutions {
		from := []int{1, big + 1, big + small + 1}[i]
		seen := make([]int, 0, r.ItemCount)
		for _, it := range r.Items {
			seen = append(seen, it.LineNo)
		}
		pages := 0
		for token := r.ItemsNext; token != ""; pages++ {
			if pages > big {
				t.Fatal("a resolution's item pages never end")
			}
			code, body := aud.do("GET", path(r)+"?page_size=7&page_token="+url.QueryEscape(token), "")
			var page struct {
				Items         []item `json:"items"`
				NextPageToken string `json:"next_page_token"`
			}
			if code != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Items) > 7 {
				t.Fatalf("resolution %d, page %d: %d %s", i, pages, code, body[:min(len(body), 500)])
			}
			for _, it := range page.Items {
				if it.StatementID != "st-ri" || it.Reference != fmt.Sprintf("REF-%05d", it.LineNo-1) {
					t.Fatalf("resolution %d, page %d: %+v; want st-ri's line %d", i, pages, it, it.LineNo)
				}
				seen = append(seen, it.LineNo)
			}
			token = page.NextPageToken
		}
		if len(seen) != want[i] {
			t.Fatalf("resolution %d: read %d items over its answer and %d pages, want %d", i, len(seen), pages, want[i])
		}
		for j, no := range seen {
			if no != from+j {
				t.Fatalf("resolution %d: item %d is line %d, want line %d (each once, in order)", i, j, no, from+j)
			}
		}
		// From the start, the default page: every item.
		code, body := fin.do("GET", path(r), "")
		var all struct {
			Items         []item `json:"items"`
			NextPageToken string `json:"next_page_token"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &all) != nil || len(all.Items) != want[i] || all.NextPageToken != "" ||
			all.Items[0].LineNo != from {
			t.Fatalf("resolution %d from the start: %d %s", i, code, body[:min(len(body), 300)])
		}
	}

	// Hostile tokens and sizes, unknown runs and resolutions, other roles.
	r0, r1 := run.Resolutions[0], run.Resolutions[1]
	for _, x := range []struct {
		name, path string
		want       int
	}{
		{"another resolution's token", path(r1) + "?page_token=" + url.QueryEscape(r0.ItemsNext), 400},
		{"a token of the run's resolutions", path(r0) + "?page_token=" + url.QueryEscape(listed.NextPageToken), 400},
		{"a truncated token", path(r0) + "?page_token=" + url.QueryEscape(r0.ItemsNext[:len(r0.ItemsNext)/2]), 400},
		{"a malformed token", path(r0) + "?page_token=not-a-token", 400},
		{"a page of 5000", path(r0) + "?page_size=5000", 400},
		{"a negative page", path(r0) + "?page_size=-1", 400},
		{"a resolution that is not", "/v1/reconciliations/" + runID + "/resolutions/res-nobody/items", 404},
		{"a run that is not", "/v1/reconciliations/rec-nobody/resolutions/" + r0.ID + "/items", 404},
	} {
		if code, body := fin.do("GET", x.path, ""); code != x.want {
			t.Fatalf("%s: %d %s; want %d", x.name, code, body, x.want)
		}
	}
	for _, who := range [][2]string{{auth.RoleProvider, "p-1"}, {auth.RoleRenter, "r-1"}, {auth.RoleAdmin, ""}} {
		if code, body := tok(who[0], who[1]).do("GET", path(r0), ""); code != 403 {
			t.Fatalf("a %s token: %d %s; want 403", who[0], code, body)
		}
	}
}
