package ledger_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// reconItemsAnswerMaxWant is the most items a run's answer may carry
// (app's reconItemsAnswerMax, restated: the test's own figure).
const reconItemsAnswerMaxWant = 1000

// A run's answer carries at most a bounded page of its items, however many
// it holds, and a token to read the rest from
// GET /v1/reconciliations/{id}/items a page at a time; every item is read
// exactly once, in the run's order. POST /v1/reconciliations without
// summary_only and GET /v1/reconciliations/{id} answered every item in one
// answer (~141 B an item: 30 000 items outgrew a 4 MiB gRPC limit, and a
// finance client got tens of MB).
func TestReconciliationAnswersBoundTheirItems(t *testing.T) {
	t.Parallel()
	f, c := financeREST(t)
	const lines = 2500 // no line known to the ledger: every one unmatched in bank
	var b strings.Builder
	b.WriteString("date,reference,amount,balance\n")
	for i := range lines {
		fmt.Fprintf(&b, "2026-11-30,unknown-%05d,1.00,%d.00\n", i, i+1)
	}
	importCSV(t, f, "st-big", b.String())

	type item struct {
		StatementID string `json:"statement_id"`
		LineNo      int    `json:"line_no"`
		Reference   string `json:"reference"`
		Status      string `json:"status"`
	}
	type run struct {
		ID                 string `json:"reconciliation_id"`
		UnmatchedInBankN   int    `json:"unmatched_in_bank_count"`
		Matched            []item `json:"matched"`
		UnmatchedInBank    []item `json:"unmatched_in_bank"`
		UnmatchedInLedger  []item `json:"unmatched_in_ledger"`
		ItemsNextPageToken string `json:"items_next_page_token"`
	}
	bounded := func(name string, code int, body string, r run) {
		t.Helper()
		if code != 200 {
			t.Fatalf("%s: %d %s", name, code, body)
		}
		n := len(r.Matched) + len(r.UnmatchedInBank) + len(r.UnmatchedInLedger)
		if n > reconItemsAnswerMaxWant || r.ItemsNextPageToken == "" {
			t.Fatalf("%s answered %d items in %d B (next token %q) of a run of %d: want at most %d and a token for the rest",
				name, n, len(body), r.ItemsNextPageToken, r.UnmatchedInBankN, reconItemsAnswerMaxWant)
		}
		t.Logf("%s: %d of %d items in %d B", name, n, r.UnmatchedInBankN, len(body))
	}

	code, body := c.do("POST", "/v1/reconciliations", `{"currency":"CNY"}`)
	var ran struct {
		Reconciliations []run `json:"reconciliations"`
	}
	if code == 200 && (json.Unmarshal([]byte(body), &ran) != nil || len(ran.Reconciliations) != 1) {
		t.Fatalf("POST /v1/reconciliations: %s", body[:min(len(body), 500)])
	}
	r := ran.Reconciliations[0]
	bounded("POST /v1/reconciliations", code, body, r)
	if r.UnmatchedInBankN != lines {
		t.Fatalf("run counts %d unmatched in bank, want %d", r.UnmatchedInBankN, lines)
	}

	code, body = c.do("GET", "/v1/reconciliations/"+r.ID, "")
	var got run
	if code == 200 && json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("GET /v1/reconciliations/%s: %s", r.ID, body[:min(len(body), 500)])
	}
	bounded("GET /v1/reconciliations/{id}", code, body, got)
	if got.ItemsNextPageToken != r.ItemsNextPageToken || len(got.UnmatchedInBank) != len(r.UnmatchedInBank) {
		t.Fatalf("GET answered %d items, next %q; the run's answer %d, next %q", len(got.UnmatchedInBank), got.ItemsNextPageToken,
			len(r.UnmatchedInBank), r.ItemsNextPageToken)
	}

	// The answer's items, then the pages after them: each line once, in
	// line order.
	seen := make([]int, 0, lines)
	for _, it := range r.UnmatchedInBank {
		seen = append(seen, it.LineNo)
	}
	pages := 0
	for token := r.ItemsNextPageToken; token != ""; pages++ {
		if pages > lines {
			t.Fatal("the items' pages never end")
		}
		code, body := c.do("GET", "/v1/reconciliations/"+r.ID+"/items?page_size=700&page_token="+url.QueryEscape(token), "")
		var page struct {
			Items         []item `json:"items"`
			NextPageToken string `json:"next_page_token"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &page) != nil {
			t.Fatalf("items page %d: %d %s", pages, code, body[:min(len(body), 500)])
		}
		if len(page.Items) > 700 {
			t.Fatalf("items page %d holds %d items, asked for 700", pages, len(page.Items))
		}
		for _, it := range page.Items {
			if it.Status != "unmatched_in_bank" || it.StatementID != "st-big" || it.Reference != fmt.Sprintf("unknown-%05d", it.LineNo-1) {
				t.Fatalf("items page %d: %+v; want st-big's line %d unmatched in bank", pages, it, it.LineNo)
			}
			seen = append(seen, it.LineNo)
		}
		token = page.NextPageToken
	}
	if len(seen) != lines {
		t.Fatalf("read %d items over the answer and %d pages, want %d", len(seen), pages, lines)
	}
	for i, no := range seen {
		if no != i+1 {
			t.Fatalf("item %d is line %d, want line %d (each once, in order)", i, no, i+1)
		}
	}

	// A token of another run's items, a malformed one, a run that is not.
	code, body = c.do("GET", "/v1/reconciliations/rec-nobody/items?page_token="+url.QueryEscape(r.ItemsNextPageToken), "")
	if code != 400 {
		t.Fatalf("another run's token: %d %s; want 400", code, body)
	}
	if code, body = c.do("GET", "/v1/reconciliations/rec-nobody/items", ""); code != 404 {
		t.Fatalf("items of no run: %d %s; want 404", code, body)
	}
	if code, body = c.do("GET", "/v1/reconciliations/"+r.ID+"/items?page_size=5000", ""); code != 400 {
		t.Fatalf("a page of 5000: %d %s; want 400", code, body)
	}
}
