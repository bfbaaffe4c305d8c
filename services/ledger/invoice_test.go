package ledger_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/app/invoicing"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

var shanghai = func() *time.Location {
	l, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		panic(err)
	}
	return l
}()

func sh(month time.Month, day, hour, min, sec int) time.Time {
	return time.Date(2026, month, day, hour, min, sec, 0, shanghai)
}

// fakeExplainer stands in pricing: it knows the charges the test rated.
type fakeExplainer struct {
	mu      sync.Mutex
	charges map[string]fakeCharge
}

type fakeCharge struct {
	currency, amount string
	lines            []domain.ExplainedLine
}

func (e *fakeExplainer) add(id, cur, amount string, lines ...domain.ExplainedLine) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.charges == nil {
		e.charges = map[string]fakeCharge{}
	}
	e.charges[id] = fakeCharge{cur, amount, lines}
}

func (e *fakeExplainer) Explain(_ context.Context, ids []string) (invoicing.Explanation, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := invoicing.Explanation{Totals: map[string]decimal.Decimal{}}
	var lines []domain.ExplainedLine
	for _, id := range ids {
		c, ok := e.charges[id]
		if !ok {
			out.Missing = append(out.Missing, id)
			continue
		}
		out.Totals[c.currency] = out.Totals[c.currency].Add(dec(c.amount))
		lines = append(lines, c.lines...)
	}
	out.Lines = domain.MergeExplained(lines)
	return out, nil
}

// postCharge posts a rated charge as the charges consumer would.
func postCharge(t *testing.T, f *fixture, id, renter, provider, cur, amount string, at time.Time) {
	t.Helper()
	msg := app.ChargeMessage{ID: "b-" + id, Charges: []app.RatedCharge{{ChargeID: id, LeaseID: "lease-" + id, RenterID: renter,
		ProviderID: provider, Currency: cur, Amount: amount, EffectiveAt: at}}}
	if n, err := f.app.PostCharges(f.ctx, []app.ChargeMessage{msg}); err != nil || n != 1 {
		t.Fatalf("post charge %s: %d, %v", id, n, err)
	}
}

func line(kind, model, band, tier, hours, amount, discount string) domain.ExplainedLine {
	return domain.ExplainedLine{Kind: kind, GPUModel: model, Band: band, Tier: tier, GPUHours: dec(hours), Amount: dec(amount), TierDiscount: dec(discount)}
}

// A month's invoice is made of the wallet's postings in the calendar month
// (Asia/Shanghai): the September deposit is the opening balance, the
// November one is left out; charges carry pricing's lines, rounded, with a
// rounding line bringing them to what the ledger posted; the closing
// balance is the ledger's own balance as of the month's end. Issuing before
// the month has ended is refused; issuing again issues nothing. The renter
// reads its invoice (JSON and PDF, whose text carries the same totals),
// another renter cannot.
func TestInvoiceIssuedFromTheJournal(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(9, 20, 10, 0, 0))
	f := newFixtureAt(t, nil, clk)
	ex := &fakeExplainer{}
	f.svc.Invoicing().Explainer = ex
	const r1, r2, cur = "r-inv1", "r-inv2", "CNY"

	f.deposit(t, r1, "20.00", cur, "bank-sep")
	clk.Set(sh(10, 1, 0, 0, 0)) // the month's first instant belongs to it
	f.deposit(t, r1, "100.00", cur, "bank-oct")
	f.deposit(t, r2, "50.00", cur, "bank-oct-2")
	clk.Set(sh(10, 12, 9, 0, 0))
	postCharge(t, f, "chg-a", r1, "p-1", cur, "12.34", clk.Now())
	ex.add("chg-a", cur, "12.34",
		line("usage", "RTX_4090", "", "", "4", "9.996", "0"),
		line("pue_surcharge", "RTX_4090", "", "", "4", "2.3461", "0"))
	clk.Set(sh(10, 31, 23, 59, 59))
	postCharge(t, f, "chg-b", r1, "p-1", cur, "7.66", clk.Now())
	ex.add("chg-b", cur, "7.66", line("usage", "RTX_4090", "night", "100+ GPU-h", "3", "7.6612", "0.85124"))
	if _, err := f.app.CreateTransaction(f.ctx, transfer("adj-1", "bank:client", "renter:"+r1+":wallet", "5.00", cur)); err != nil {
		t.Fatal(err)
	}
	clk.Set(sh(11, 1, 0, 0, 0)) // the next month's first instant
	f.deposit(t, r1, "1.00", cur, "bank-nov")

	clk.Set(sh(11, 1, 0, 0, 30))
	if _, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-10"); !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("issue within a minute of the month's end: %v, want a precondition error", err)
	}
	clk.Set(sh(11, 1, 1, 0, 0))
	res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-10")
	if err != nil || res.Issued != 2 {
		t.Fatalf("issue 2026-10: %+v, %v; want 2 issued", res, err)
	}
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-10"); err != nil || res.Issued != 0 {
		t.Fatalf("issue 2026-10 again: %+v, %v; want nothing new", res, err)
	}

	base, secret := startServer(t, f)
	tok := func(role, sub string) string {
		s, err := auth.Issue(secret, role, sub, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	renter1 := restClient{t: t, base: base, token: tok(auth.RoleRenter, r1)}
	renter2 := restClient{t: t, base: base, token: tok(auth.RoleRenter, r2)}
	auditor := restClient{t: t, base: base, token: tok(auth.RoleAuditor, "")}

	code, body := renter1.do(http.MethodGet, "/v1/renters/"+r1+"/invoices", "")
	if code != http.StatusOK {
		t.Fatalf("list own invoices: %d %s", code, body)
	}
	var list struct {
		Invoices []map[string]any `json:"invoices"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Invoices) != 1 {
		t.Fatalf("list: %v %s", err, body)
	}
	id := list.Invoices[0]["invoice_id"].(string)

	code, body = renter1.do(http.MethodGet, "/v1/invoices/"+id, "")
	if code != http.StatusOK {
		t.Fatalf("get own invoice: %d %s", code, body)
	}
	var inv struct {
		Number, Period, Currency, TimeZone            string
		Opening, Deposits, Charges, Adjustments       string
		Closing, TierDiscounts, Surcharges, PeriodEnd string
		Lines                                         []map[string]string
		DepositEntries                                []map[string]string
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	str := func(k string) string { s, _ := raw[k].(string); return s }
	inv.Number, inv.Period, inv.Currency, inv.TimeZone = str("number"), str("period"), str("currency"), str("time_zone")
	inv.Opening, inv.Deposits, inv.Charges, inv.Adjustments = str("opening_balance"), str("deposits"), str("charges"), str("adjustments")
	inv.Closing, inv.TierDiscounts, inv.Surcharges, inv.PeriodEnd = str("closing_balance"), str("tier_discounts"), str("surcharges"), str("period_end")
	want := []string{"2026-10", "CNY", "Asia/Shanghai", "20.00", "100.00", "20.00", "5.00", "105.00", "0.85", "2.35"}
	got := []string{inv.Period, inv.Currency, inv.TimeZone, inv.Opening, inv.Deposits, inv.Charges, inv.Adjustments, inv.Closing, inv.TierDiscounts, inv.Surcharges}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("invoice figures %v, want %v\n%s", got, want, body)
	}
	if !strings.HasPrefix(inv.Number, "2026-00000") {
		t.Fatalf("number %q", inv.Number)
	}
	// The closing balance is the ledger's: the wallet as of the month's end
	// (as_of is inclusive; the November deposit posted at the end itself).
	end, err := time.Parse(time.RFC3339, inv.PeriodEnd)
	if err != nil {
		t.Fatalf("period_end %q: %v", inv.PeriodEnd, err)
	}
	v, err := f.app.GetAccount(f.ctx, "renter:"+r1+":wallet", ptr(end.Add(-time.Microsecond)))
	if err != nil || len(v.Balances) != 1 || v.Balances[0].Amount.StringFixed(2) != inv.Closing {
		t.Fatalf("ledger balance as of %s: %+v, %v; invoice says %s", end, v.Balances, err, inv.Closing)
	}
	lines, err := json.Marshal(raw["lines"])
	if err != nil {
		t.Fatal(err)
	}
	wantLines := `[{"amount":"10.00","band":"","gpu_hours":"4","gpu_model":"RTX_4090","kind":"usage","tier":"","tier_discount":"0.00"},` +
		`{"amount":"2.35","band":"","gpu_hours":"4","gpu_model":"RTX_4090","kind":"pue_surcharge","tier":"","tier_discount":"0.00"},` +
		`{"amount":"7.66","band":"night","gpu_hours":"3","gpu_model":"RTX_4090","kind":"usage","tier":"100+ GPU-h","tier_discount":"0.85"},` +
		`{"amount":"-0.01","band":"","gpu_hours":"0","gpu_model":"","kind":"rounding","tier":"","tier_discount":"0.00"}]`
	if string(lines) != wantLines {
		t.Fatalf("lines\n%s\nwant\n%s", lines, wantLines)
	}
	if d := raw["deposit_entries"].([]any); len(d) != 1 || d[0].(map[string]any)["reference"] != "bank-oct" {
		t.Fatalf("deposit entries %v", d)
	}

	// The PDF carries the same figures.
	req, err := http.NewRequest(http.MethodGet, base+"/v1/invoices/"+id+"?format=pdf", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+renter1.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	pdfBytes, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("pdf body: %v", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/pdf" {
		t.Fatalf("pdf: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	cells := testkit.PDFCells(t, pdfBytes)
	for label, want := range map[string]string{"Invoice number": inv.Number, "Opening balance": inv.Opening + " CNY",
		"Deposits": inv.Deposits + " CNY", "Charges": inv.Charges + " CNY", "Adjustments": inv.Adjustments + " CNY",
		"Closing balance": inv.Closing + " CNY", "Total charges": inv.Charges, "bank-oct": "100.00"} {
		if got := testkit.CellAfter(cells, label); got != want {
			t.Errorf("pdf: %q is followed by %q, want %q\n%s", label, got, want, strings.Join(cells, " | "))
		}
	}

	// Someone else's invoices: refused (an invoice of another renter reads as
	// one that does not exist: a 403 named its renter); staff read all.
	if code, body := renter2.do(http.MethodGet, "/v1/invoices/"+id, ""); code != http.StatusNotFound || strings.Contains(body, r1) {
		t.Fatalf("another renter's invoice: %d %s; want 404 naming no renter", code, body)
	}
	if code, body := renter2.do(http.MethodGet, "/v1/invoices/inv-"+strings.Repeat("0", 26), ""); code != http.StatusNotFound {
		t.Fatalf("an invoice id no invoice holds: %d %s", code, body)
	}
	if code, body := renter2.do(http.MethodGet, "/v1/renters/"+r1+"/invoices", ""); code != http.StatusForbidden {
		t.Fatalf("another renter's invoice list: %d %s", code, body)
	}
	if code, body := auditor.do(http.MethodGet, "/v1/invoices/"+id+"?format=json", ""); code != http.StatusOK {
		t.Fatalf("auditor: %d %s", code, body)
	}
	if code, _ := auditor.do(http.MethodGet, "/v1/invoices/"+id+"?format=xml", ""); code != http.StatusBadRequest {
		t.Fatalf("format=xml: %d, want 400", code)
	}
}

func ptr[T any](v T) *T { return &v }

// invoiceNumbers reads every invoice's year sequence number in order, and
// the year's counter.
func invoiceNumbers(t *testing.T, f *fixture) ([]int64, int64) {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `select seq from ledger.invoices where year = 2026 order by seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	var last int64
	if err := f.pool.QueryRow(f.ctx, `select coalesce((select last_number from ledger.invoice_counters where year = 2026), 0)`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	return seqs, last
}

// wantGapless fails unless the numbers are exactly 1..n and the counter
// stands at n.
func wantGapless(t *testing.T, seqs []int64, last int64, n int) {
	t.Helper()
	if len(seqs) != n || last != int64(n) {
		t.Fatalf("%d invoices, counter at %d; want %d and %d (numbers %v)", len(seqs), last, n, n, seqs)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("invoice numbers %v: gap or repeat at position %d", seqs, i)
		}
	}
}

// Issuers running at once (several schedule runs, an operator's retry)
// number the year's invoices 1..n: each wallet once, no gap, no repeat.
func TestInvoiceNumbersGaplessUnderConcurrentIssuing(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(10, 3, 12, 0, 0))
	f := newFixtureAt(t, nil, clk)
	f.svc.Invoicing().Explainer = &fakeExplainer{}
	const renters = 24
	for i := range renters {
		f.deposit(t, fmt.Sprintf("r-gap%02d", i), "10.00", "CNY", fmt.Sprintf("bank-gap-%d", i))
	}
	f.deposit(t, "r-gap00", "3.00", "USD", "bank-gap-usd") // a second currency: its own invoice
	clk.Set(sh(11, 1, 1, 0, 0))
	const issuers = 6
	var wg sync.WaitGroup
	results := make([]invoicing.IssueResult, issuers)
	errs := make([]error, issuers)
	for i := range issuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = f.svc.Invoicing().IssueMonth(f.ctx, "2026-10")
		}()
	}
	wg.Wait()
	issued := 0
	for i := range issuers {
		if errs[i] != nil {
			t.Fatalf("issuer %d: %v", i, errs[i])
		}
		issued += results[i].Issued
	}
	if issued != renters+1 {
		t.Fatalf("issuers issued %d invoices in all, want %d (each wallet once)", issued, renters+1)
	}
	seqs, last := invoiceNumbers(t, f)
	wantGapless(t, seqs, last, renters+1)
}

// An issue that fails after taking its number (here the invoice insert
// itself fails, for one renter) gives the number back: the others are
// issued 1..n-1 without a gap, and the retry gives the failed one n.
func TestInvoiceNumberNotLostByAFailedIssue(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(10, 3, 12, 0, 0))
	f := newFixtureAt(t, nil, clk)
	f.svc.Invoicing().Explainer = &fakeExplainer{}
	for _, r := range []string{"r-a", "r-b", "r-c", "r-d"} {
		f.deposit(t, r, "10.00", "CNY", "bank-"+r)
	}
	clk.Set(sh(11, 1, 1, 0, 0))
	for _, q := range []string{
		`create function ledger.fail_invoice() returns trigger language plpgsql as $$
		 begin raise exception 'injected: invoice of % refused', new.renter_id; end $$`,
		`create trigger fail_invoice before insert on ledger.invoices for each row
		 when (new.renter_id = 'r-b') execute function ledger.fail_invoice()`,
	} {
		if _, err := f.pool.Exec(f.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-10")
	if err == nil || !strings.Contains(err.Error(), "injected: invoice of r-b refused") || res.Issued != 3 {
		t.Fatalf("issue with r-b failing: %+v, %v; want 3 issued and r-b's injected error", res, err)
	}
	seqs, last := invoiceNumbers(t, f)
	wantGapless(t, seqs, last, 3)

	if _, err := f.pool.Exec(f.ctx, `drop trigger fail_invoice on ledger.invoices`); err != nil {
		t.Fatal(err)
	}
	if res, err := f.svc.Invoicing().IssueMonth(f.ctx, "2026-10"); err != nil || res.Issued != 1 {
		t.Fatalf("retry: %+v, %v; want r-b issued", res, err)
	}
	seqs, last = invoiceNumbers(t, f)
	wantGapless(t, seqs, last, 4)
	var renter string
	if err := f.pool.QueryRow(f.ctx, `select renter_id from ledger.invoices where seq = 4`).Scan(&renter); err != nil || renter != "r-b" {
		t.Fatalf("invoice 4 is %q (%v), want r-b's", renter, err)
	}
}

// A renter's invoices page with tokens of pkg/cursor: every invoice once,
// newest month first; a token is refused under another renter or currency,
// and a forged one holding a NUL is a 400 (the listing's own JSON token
// passed it to SQL, a 500).
func TestRenterInvoicesPage(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(7, 10, 10, 0, 0))
	f := newFixtureAt(t, nil, clk)
	const r1 = "r-page1"
	for i, m := range []time.Month{7, 8, 9} {
		clk.Set(sh(m, 10, 10, 0, 0))
		f.deposit(t, r1, "10.00", "CNY", fmt.Sprintf("bank-cny-%d", i))
		f.deposit(t, r1, "10.00", "USD", fmt.Sprintf("bank-usd-%d", i))
		clk.Set(sh(m+1, 1, 2, 0, 0))
		if _, err := f.svc.Invoicing().IssueMonth(f.ctx, fmt.Sprintf("2026-%02d", m)); err != nil {
			t.Fatal(err)
		}
	}
	inv := f.svc.Invoicing()
	var got []string
	token := ""
	for pages := 0; pages < 10; pages++ {
		page, next, err := inv.RenterInvoices(f.ctx, r1, "", 4, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range page {
			got = append(got, x.Period+" "+x.Currency)
		}
		if token = next; token == "" {
			break
		}
	}
	want := "2026-09 CNY,2026-09 USD,2026-08 CNY,2026-08 USD,2026-07 CNY,2026-07 USD"
	if strings.Join(got, ",") != want {
		t.Fatalf("pages listed %v, want %s", got, want)
	}
	_, next, err := inv.RenterInvoices(f.ctx, r1, "CNY", 1, "")
	if err != nil || next == "" {
		t.Fatalf("first CNY page: %q, %v", next, err)
	}
	for name, try := range map[string]func() error{
		"another renter":   func() error { _, _, err := inv.RenterInvoices(f.ctx, "r-page2", "CNY", 1, next); return err },
		"another currency": func() error { _, _, err := inv.RenterInvoices(f.ctx, r1, "USD", 1, next); return err },
		"a forged NUL": func() error {
			forged := cursor.Encode(cursor.Scoped("ledger.invoices", r1, ""), "2026-09", "\x00", "x")
			_, _, err := inv.RenterInvoices(f.ctx, r1, "", 1, forged)
			return err
		},
		"the old JSON token": func() error {
			old := base64.RawURLEncoding.EncodeToString([]byte(`{"p":"2026-09","c":"\u0000","i":"x"}`))
			_, _, err := inv.RenterInvoices(f.ctx, r1, "", 1, old)
			return err
		},
	} {
		if err := try(); !errors.As(err, new(*apperr.InvalidError)) {
			t.Errorf("%s: %v, want an InvalidError on page_token", name, err)
		}
	}
}

// cancelOnExplain is fakeExplainer cancelling the issuing run's context at
// its first call: the run's deadline passing while it issues.
type cancelOnExplain struct {
	fakeExplainer
	cancel context.CancelFunc
}

func (e *cancelOnExplain) Explain(ctx context.Context, ids []string) (invoicing.Explanation, error) {
	e.cancel()
	return e.fakeExplainer.Explain(ctx, ids)
}

// A run whose context ends (the activity's deadline) stops at the first
// context error: it went on asking for every wallet left, each failing
// with the same error, and joined them all into one (tens of MB logged at
// 100 000 renters).
func TestInvoiceRunStopsAtItsDeadline(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(sh(10, 3, 12, 0, 0))
	f := newFixtureAt(t, nil, clk)
	ctx, cancel := context.WithCancel(f.ctx)
	ex := &cancelOnExplain{cancel: cancel}
	f.svc.Invoicing().Explainer = ex
	const renters = 10
	for i := range renters {
		r := fmt.Sprintf("r-dl%02d", i)
		f.deposit(t, r, "10.00", "CNY", "bank-dl-"+r)
		postCharge(t, f, "chg-dl-"+r, r, "p-1", "CNY", "1.00", clk.Now())
		ex.add("chg-dl-"+r, "CNY", "1.00", line("usage", "RTX_4090", "", "", "1", "1.00", "0"))
	}
	clk.Set(sh(11, 1, 1, 0, 0))
	res, err := f.svc.Invoicing().IssueMonth(ctx, "2026-10")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("issue with its context ended: %+v, %v; want context.Canceled", res, err)
	}
	if n := strings.Count(err.Error(), "invoice r-dl"); n != 1 {
		t.Fatalf("the error names %d wallets, want the first one the ended context failed: %.300s", n, err)
	}
}
