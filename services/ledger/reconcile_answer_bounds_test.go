package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// The most statement breaks, cash differences, resolutions and reopened
// resolutions a run's answer may carry (app's reconFindingsAnswerMax and
// reconResolutionsAnswerMax, restated: the test's own figures).
const (
	reconFindingsAnswerMaxWant    = 100
	reconResolutionsAnswerMaxWant = 50
)

// importDailyStatements imports n one-line statements of CN-CLIENT-1, one a
// day from from, none following on the one before (each opens at 0.00 and
// closes at 1.00, its line unknown to the ledger): every statement after
// the first is a statement break, and the proof of cash fails at its close.
func importDailyStatements(t *testing.T, f *fixture, prefix string, from time.Time, n int) {
	t.Helper()
	for i := range n {
		importCSV(t, f, fmt.Sprintf("%s-%03d", prefix, i),
			fmt.Sprintf("date,reference,amount,balance\n%s,%s-line-%03d,1.00,1.00\n", from.AddDate(0, 0, i).Format(time.DateOnly), prefix, i))
	}
}

// A run's answer carries at most a bounded page of its statement breaks,
// its cash differences, its resolutions and its reopened resolutions, with
// their counts and a token for each list's rest, read from the list's own
// route a page at a time, each once, in order. They were answered whole:
// a statement of a year of daily closes (or a year's exceptions resolved
// one by one) made answers of megabytes, whatever the item bound.
func TestReconciliationAnswersBoundTheirOtherLists(t *testing.T) {
	t.Parallel()
	f, c := financeREST(t)
	const days = 400 // 399 breaks, 399 cash differences, 400 unmatched lines
	importDailyStatements(t, f, "st-y", time.Date(2025, 10, 1, 0, 0, 0, 0, time.UTC), days)

	type run struct {
		ID                    string            `json:"reconciliation_id"`
		PreviousID            string            `json:"previous_reconciliation_id"`
		BreakN                int               `json:"statement_break_count"`
		CashN                 int               `json:"cash_difference_count"`
		ResolutionN           int               `json:"resolution_count"`
		ReopenedN             int               `json:"reopened_resolution_count"`
		Breaks                []json.RawMessage `json:"statement_breaks"`
		Cash                  []json.RawMessage `json:"cash_differences"`
		Resolutions           []json.RawMessage `json:"resolutions"`
		Reopened              []json.RawMessage `json:"reopened_resolutions"`
		BreaksNext            string            `json:"statement_breaks_next_page_token"`
		CashNext              string            `json:"cash_differences_next_page_token"`
		ResolutionsNext       string            `json:"resolutions_next_page_token"`
		ReopenedNext          string            `json:"reopened_resolutions_next_page_token"`
		UnmatchedInBankCount  int               `json:"unmatched_in_bank_count"`
		UnmatchedInBankAnswer []struct {
			StatementID string `json:"statement_id"`
			LineNo      int    `json:"line_no"`
		} `json:"unmatched_in_bank"`
	}
	get := func(id string) (run, int) {
		t.Helper()
		code, body := c.do("GET", "/v1/reconciliations/"+id, "")
		var r run
		if code != 200 || json.Unmarshal([]byte(body), &r) != nil {
			t.Fatalf("GET /v1/reconciliations/%s: %d %s", id, code, body[:min(len(body), 500)])
		}
		return r, len(body)
	}
	// list walks a list's pages from the answer's token: every entry's
	// key, in order.
	list := func(name, path, field, token string, key func(json.RawMessage) string) []string {
		t.Helper()
		var keys []string
		for pages := 0; token != ""; pages++ {
			if pages > days {
				t.Fatalf("%s: the pages never end", name)
			}
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			code, body := c.do("GET", path+sep+"page_size=70&page_token="+url.QueryEscape(token), "")
			var page map[string]json.RawMessage
			var entries []json.RawMessage
			if code != 200 || json.Unmarshal([]byte(body), &page) != nil || json.Unmarshal(page[field], &entries) != nil {
				t.Fatalf("%s page %d: %d %s", name, pages, code, body[:min(len(body), 500)])
			}
			if len(entries) > 70 {
				t.Fatalf("%s page %d holds %d, asked for 70", name, pages, len(entries))
			}
			for _, e := range entries {
				keys = append(keys, key(e))
			}
			token = ""
			if raw, ok := page["next_page_token"]; ok {
				if err := json.Unmarshal(raw, &token); err != nil {
					t.Fatalf("%s page %d: next_page_token %s: %v", name, pages, raw, err)
				}
			}
		}
		return keys
	}
	field := func(name string) func(json.RawMessage) string {
		return func(e json.RawMessage) string {
			var m map[string]any
			if err := json.Unmarshal(e, &m); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprint(m[name])
		}
	}
	// whole checks an answer's first entries and the pages after them make
	// want, each once, in order.
	whole := func(name string, first []json.RawMessage, firstMax, count int, token string, rest []string, key func(json.RawMessage) string, want []string) {
		t.Helper()
		if len(first) > firstMax || (count > firstMax && token == "") || count != len(want) {
			t.Fatalf("%s: answered %d of %d (next token %q); want at most %d, a token for the rest, %d in all", name, len(first), count, token,
				firstMax, len(want))
		}
		var got []string
		for _, e := range first {
			got = append(got, key(e))
		}
		got = append(got, rest...)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: read %d over the answer and its pages: %v…; want %d, each once, in order: %v…", name, len(got),
				got[:min(len(got), 5)], len(want), want[:min(len(want), 5)])
		}
	}
	stID := func(i int) string { return fmt.Sprintf("st-y-%03d", i) }

	// The run's own answer, and GET of it.
	code, body := c.do("POST", "/v1/reconciliations", `{"currency":"CNY"}`)
	var ran struct {
		Reconciliations []run `json:"reconciliations"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &ran) != nil || len(ran.Reconciliations) != 1 {
		t.Fatalf("POST /v1/reconciliations: %d %s", code, body[:min(len(body), 500)])
	}
	r1 := ran.Reconciliations[0]
	t.Logf("POST /v1/reconciliations: %d breaks, %d cash differences of %d and %d in %d B", len(r1.Breaks), len(r1.Cash), r1.BreakN, r1.CashN, len(body))
	got, size := get(r1.ID)
	t.Logf("GET /v1/reconciliations/{id}: %d breaks, %d cash differences of %d and %d in %d B", len(got.Breaks), len(got.Cash), got.BreakN, got.CashN, size)
	var wantBreaks, wantCash []string
	for i := 1; i < days; i++ {
		wantBreaks = append(wantBreaks, stID(i))
		wantCash = append(wantCash, stID(i))
	}
	for _, a := range []run{r1, got} {
		whole("statement breaks", a.Breaks, reconFindingsAnswerMaxWant, a.BreakN, a.BreaksNext,
			list("statement breaks", "/v1/reconciliations/"+a.ID+"/statement_breaks", "statement_breaks", a.BreaksNext, field("statement_id")),
			field("statement_id"), wantBreaks)
		whole("cash differences", a.Cash, reconFindingsAnswerMaxWant, a.CashN, a.CashNext,
			list("cash differences", "/v1/reconciliations/"+a.ID+"/cash_differences", "cash_differences", a.CashNext, field("statement_id")),
			field("statement_id"), wantCash)
	}

	// Finance writes every line off, one by one: 400 resolutions.
	rec := f.svc.Reconciliations()
	var wantRes []string
	for i := range days {
		res, err := rec.ResolveItems(f.ctx, r1.ID, domain.ResolveWriteOff, "bank error", "finance:alice",
			[]domain.LineRef{{StatementID: stID(i), LineNo: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantRes = append(wantRes, res.ID)
	}
	got, size = get(r1.ID)
	t.Logf("GET /v1/reconciliations/{id} resolved: %d resolutions of %d in %d B", len(got.Resolutions), got.ResolutionN, size)
	whole("resolutions", got.Resolutions, reconResolutionsAnswerMaxWant, got.ResolutionN, got.ResolutionsNext,
		list("resolutions", "/v1/reconciliations/"+r1.ID+"/resolutions", "resolutions", got.ResolutionsNext, field("resolution_id")),
		field("resolution_id"), wantRes)

	// Voided, they are the next run's reopened resolutions.
	for _, id := range wantRes {
		if _, err := rec.VoidResolution(f.ctx, r1.ID, id, "written off by mistake", "finance:alice"); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance:alice")
	if err != nil || len(runs) != 1 {
		t.Fatalf("second run: %v %v", runs, err)
	}
	got2, size := get(runs[0].ID)
	t.Logf("GET /v1/reconciliations/{id} of the run after the voids: %d reopened of %d in %d B", len(got2.Reopened), got2.ReopenedN, size)
	// The run's own answer carries the same bounded page (the token names
	// its last) as GET.
	if r := runs[0]; len(r.Reopened) != len(got2.Reopened) || r.ReopenedN != got2.ReopenedN || r.ReopenedNext != got2.ReopenedNext {
		t.Fatalf("second run's own answer: %d reopened of %d, next %q; GET: %d of %d, next %q", len(r.Reopened), r.ReopenedN, r.ReopenedNext,
			len(got2.Reopened), got2.ReopenedN, got2.ReopenedNext)
	}
	whole("reopened resolutions", got2.Reopened, reconResolutionsAnswerMaxWant, got2.ReopenedN, got2.ReopenedNext,
		list("reopened resolutions", "/v1/reconciliations/"+got2.ID+"/resolutions?reopened=true", "resolutions", got2.ReopenedNext,
			field("resolution_id")), field("resolution_id"), wantRes)
	if got2.ResolutionN != 0 || got2.ResolutionsNext != "" {
		t.Fatalf("second run: %d resolutions, next %q; want none", got2.ResolutionN, got2.ResolutionsNext)
	}

	// A token of another list, or of another run, is refused.
	for _, x := range []struct{ path, token string }{
		{"/v1/reconciliations/" + r1.ID + "/cash_differences", r1.BreaksNext},
		{"/v1/reconciliations/" + got2.ID + "/statement_breaks", r1.BreaksNext},
		{"/v1/reconciliations/" + r1.ID + "/resolutions?reopened=true", got.ResolutionsNext},
		{"/v1/reconciliations/" + got2.ID + "/resolutions", got.ResolutionsNext},
	} {
		sep := "?"
		if strings.Contains(x.path, "?") {
			sep = "&"
		}
		if code, body := c.do("GET", x.path+sep+"page_token="+url.QueryEscape(x.token), ""); code != 400 {
			t.Fatalf("GET %s with another list's token: %d %s; want 400", x.path, code, body)
		}
	}
	for _, p := range []string{"statement_breaks", "cash_differences", "resolutions"} {
		if code, body := c.do("GET", "/v1/reconciliations/rec-nobody/"+p, ""); code != 404 {
			t.Fatalf("%s of no run: %d %s; want 404", p, code, body)
		}
		if code, body := c.do("GET", "/v1/reconciliations/"+r1.ID+"/"+p+"?page_size=5000", ""); code != 400 {
			t.Fatalf("%s, a page of 5000: %d %s; want 400", p, code, body)
		}
	}
}

// rowCounter counts the rows the database answered to queries naming
// ledger.reconciliation_items or ledger.reconciliation_resolution_items,
// while on.
type rowCounter struct {
	on   atomic.Bool
	rows atomic.Int64
}

type traced struct{}

func (rc *rowCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "reconciliation_items") || strings.Contains(d.SQL, "reconciliation_resolution_items") {
		return context.WithValue(ctx, traced{}, true)
	}
	return ctx
}

func (rc *rowCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if rc.on.Load() && ctx.Value(traced{}) != nil && strings.HasPrefix(d.CommandTag.String(), "SELECT") {
		rc.rows.Add(d.CommandTag.RowsAffected())
	}
}

// A keyed replay reads no more of its run than it answers: it read every
// item of the run (a year's statement: tens of thousands) to cut them to
// the answer's 1 000.
func TestReconciliationKeyedReplayReadsOnlyItsAnswer(t *testing.T) {
	t.Parallel()
	_, dsn := testkit.NewPool(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	rc := &rowCounter{}
	cfg.ConnConfig.Tracer = rc
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f := newFixtureOn(t, pool, nil, clock.System{})
	const lines = 3000 // each unmatched in bank
	var b strings.Builder
	b.WriteString("date,reference,amount,balance\n")
	for i := range lines {
		fmt.Fprintf(&b, "2026-11-30,unknown-%05d,1.00,%d.00\n", i, i+1)
	}
	importCSV(t, f, "st-big", b.String())
	rec := f.svc.Reconciliations()
	first, err := rec.RunKeyed(f.ctx, "CNY", domain.ReconByRequest, "finance:", "k-big")
	if err != nil || len(first) != 1 {
		t.Fatalf("keyed run: %v %v", first, err)
	}

	rc.on.Store(true)
	again, err := rec.RunKeyed(f.ctx, "CNY", domain.ReconByRequest, "finance:", "k-big")
	rc.on.Store(false)
	if err != nil || len(again) != 1 || again[0].ID != first[0].ID {
		t.Fatalf("replay: %v %v; want %s again", again, err, first[0].ID)
	}
	r := again[0]
	answered := len(r.Result.Matched) + len(r.Result.UnmatchedBank) + len(r.Result.UnmatchedLedger) + len(r.Result.Breaks) +
		len(r.Result.CashDifferences)
	if read := rc.rows.Load(); read > int64(answered)+1 || r.ItemsNext == "" {
		t.Fatalf("the replay read %d item rows of the run's %d to answer %d (next token %q); want at most %d", read, lines, answered,
			r.ItemsNext, answered+1)
	}
	t.Logf("replay read %d item rows, answered %d of %d", rc.rows.Load(), answered, lines)
}

// tracedREST is a finance REST client of a ledger on a pool whose reads of
// a run's items rc counts.
func tracedREST(t *testing.T) (*fixture, restClient, *rowCounter) {
	t.Helper()
	_, dsn := testkit.NewPool(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	rc := &rowCounter{}
	cfg.ConnConfig.Tracer = rc
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f := newFixtureOn(t, pool, nil, clock.System{})
	base, secret := startServer(t, f)
	tok, err := auth.Issue(secret, auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return f, restClient{t: t, base: base, token: tok}, rc
}

// A summary_only keyed replay answers counts alone: it read the answer's
// bounded page of items (and resolutions) of its run, then dropped them.
func TestReconciliationSummaryReplayReadsNoItems(t *testing.T) {
	t.Parallel()
	f, c, rc := tracedREST(t)
	var b strings.Builder
	b.WriteString("date,reference,amount,balance\n")
	for i := range 50 {
		fmt.Fprintf(&b, "2026-11-30,unknown-%05d,1.00,%d.00\n", i, i+1)
	}
	importCSV(t, f, "st-sum", b.String())
	const req = `{"currency":"CNY","summary_only":true,"idempotency_key":"k-sum"}`
	code, first := c.do("POST", "/v1/reconciliations", req)
	if code != 200 {
		t.Fatalf("keyed run: %d %s", code, first)
	}
	rc.on.Store(true)
	code, again := c.do("POST", "/v1/reconciliations", req)
	rc.on.Store(false)
	if code != 200 || again != first {
		t.Fatalf("replay: %d %s; want %s", code, again, first)
	}
	if read := rc.rows.Load(); read != 0 {
		t.Fatalf("the summary replay read %d item rows of its run; it answers none", read)
	}
}

// A run's answer with its most resolutions (50), each of the most items
// (100), in JSON, is bounded: each resolution carries its first items.
func TestReconciliationAnswerOfLargestResolutionsSize(t *testing.T) {
	t.Parallel()
	// Measured 1 604 627 B when each resolution carried every item; each
	// carries at most 10 now (item_count and items_next_page_token say the
	// rest). ListReconciliationResolutions' largest page (100 of them) is
	// measured too.
	f, c := financeREST(t)
	const resolutions, items = 50, 100
	var b strings.Builder
	b.WriteString("date,reference,amount,balance\n")
	for i := range resolutions * items {
		fmt.Fprintf(&b, "2026-11-30,BANK-TRANSFER-REF-2026113000%05d,1.00,%d.00\n", i, i+1)
	}
	importCSV(t, f, "st-res", b.String())
	rec := f.svc.Reconciliations()
	runs, err := rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance:alice")
	if err != nil || len(runs) != 1 {
		t.Fatalf("run: %v %v", runs, err)
	}
	for r := range resolutions {
		refs := make([]domain.LineRef, 0, items)
		for i := range items {
			refs = append(refs, domain.LineRef{StatementID: "st-res", LineNo: r*items + i + 1})
		}
		if _, err := rec.ResolveItems(f.ctx, runs[0].ID, domain.ResolveWriteOff, "bank error, refunded by the bank outside gpubill",
			"finance:alice", refs, nil); err != nil {
			t.Fatal(err)
		}
	}
	code, body := c.do("GET", "/v1/reconciliations/"+runs[0].ID, "")
	if code != 200 {
		t.Fatalf("GET: %d %s", code, body[:min(len(body), 500)])
	}
	t.Logf("GET /v1/reconciliations/{id} with %d resolutions of %d items: %d B", resolutions, items, len(body))
	if len(body) > reconAnswerSizeMax {
		t.Errorf("GET /v1/reconciliations/{id} with %d resolutions of %d items: %d B, want at most %d", resolutions, items, len(body), reconAnswerSizeMax)
	}
	code, body = c.do("GET", "/v1/reconciliations/"+runs[0].ID+"/resolutions?page_size=100", "")
	if code != 200 {
		t.Fatalf("GET resolutions: %d %s", code, body[:min(len(body), 500)])
	}
	t.Logf("GET /v1/reconciliations/{id}/resolutions?page_size=100 with %d resolutions of %d items: %d B", resolutions, items, len(body))
	if len(body) > reconAnswerSizeMax {
		t.Errorf("GET /v1/reconciliations/{id}/resolutions?page_size=100 with %d resolutions of %d items: %d B, want at most %d",
			resolutions, items, len(body), reconAnswerSizeMax)
	}
}

// reconAnswerSizeMax is the most a run's answer of bounded lists should
// weigh in JSON.
const reconAnswerSizeMax = 500_000
