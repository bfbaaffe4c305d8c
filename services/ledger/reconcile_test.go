package ledger_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// TestReconciliationRunsCarryTheirExceptions drives three runs over two
// statements: each movement kind matched by its reference and exact amount
// (a cycle's two sweeps as one bank transfer), a wrong amount and an
// unknown bank line and a movement the bank has not shown yet kept as
// exceptions; the next run takes only the new statement and the newly
// chained movements plus the previous run's exceptions, and matches the
// late ones; a run with nothing new carries the exceptions again.
func TestReconciliationRunsCarryTheirExceptions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	rec := f.svc.Reconciliations()
	post := func(in app.CreateTransactionInput, meta map[string]string) *domain.Transaction {
		t.Helper()
		in.Metadata, in.Internal = meta, true // as settlement and payout post them
		tx, err := f.app.CreateTransaction(f.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	dep1 := f.deposit(t, "r-1", "100.00", "CNY", "bank-ref-1")
	f.deposit(t, "r-2", "50.00", "CNY", "bank-ref-2")
	post(transfer("earn", "renter:r-1:wallet", "provider:p-1:available", "20.00", "CNY"), nil)
	post(transfer("submit", "provider:p-1:available", "provider:p-1:in_transit", "5.04", "CNY"), map[string]string{"kind": "payout", "payout_id": "po-1", "step": "in_transit"})
	paid := post(transfer("payout-po-1-1-paid", "provider:p-1:in_transit", "bank:client", "5.04", "CNY"), map[string]string{"kind": "payout", "payout_id": "po-1", "step": "paid"})
	sw1 := post(transfer("sweep-1", "bank:operating", "bank:client", "2.10", "CNY"), map[string]string{"kind": "commission_sweep", "cycle_id": "cyc-20261112"})
	sw2 := post(transfer("sweep-2", "bank:operating", "bank:client", "1.05", "CNY"), map[string]string{"kind": "commission_sweep", "cycle_id": "cyc-20261112"})
	post(transfer("withhold", "renter:r-2:wallet", "tax:withheld:CN", "1.26", "CNY"), nil)
	rem := post(transfer("rem-CN-2026-11-CNY", "tax:withheld:CN", "bank:client", "1.26", "CNY"), map[string]string{"kind": "tax_remittance", "period": "2026-11"})
	chainAll(t, f)

	importCSV(t, f, "st-1", "date,reference,amount,balance\n"+
		"2026-11-30,bank-ref-1,100.00,1100.00\n"+
		"2026-11-30,bank-ref-2,49.00,1149.00\n"+
		"2026-11-30,po-1,-5.04,1143.96\n"+
		"2026-11-30,cyc-20261112,-3.15,1140.81\n"+
		"2026-11-30,interest,0.10,1140.91\n")
	runs, err := rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
	if err != nil || len(runs) != 1 {
		t.Fatalf("run 1: %v %v", runs, err)
	}
	r1 := runs[0]
	want := fmt.Sprintf("matched [1=deposit:bank-ref-1[%s] 3=payout:po-1[%s] 4=commission_sweep:cyc-20261112[%s %s]]; bank [2 5]; ledger [deposit:bank-ref-2:50 tax_remittance:rem-CN-2026-11-CNY:-1.26]",
		dep1.ID, paid.ID, sw1.ID, sw2.ID)
	if got := runSummary(r1); got != want {
		t.Fatalf("run 1:\n got  %s\n want %s", got, want)
	}
	if r1.Verdict != domain.ReconExceptions || strings.Join(r1.StatementIDs, ",") != "st-1" || r1.PreviousID != "" ||
		r1.BankClosing == nil || r1.BankClosing.String() != "1140.91" || r1.LedgerBankClient.String() != "140.55" {
		t.Fatalf("run 1: verdict %s, statements %v, previous %q, bank %v, ledger %s", r1.Verdict, r1.StatementIDs, r1.PreviousID, r1.BankClosing, r1.LedgerBankClient)
	}
	if !strings.Contains(r1.Result.UnmatchedLedger[0].Reason, "statement st-1 line 2") {
		t.Errorf("dep2's reason %q; want the line with the other amount named", r1.Result.UnmatchedLedger[0].Reason)
	}

	// Day two: the remittance and a new deposit reach the bank.
	dep3 := f.deposit(t, "r-1", "30.00", "CNY", "bank-ref-3")
	chainAll(t, f)
	importCSV(t, f, "st-2", "date,reference,amount,balance\n"+
		"2026-12-01,rem-CN-2026-11-CNY,-1.26,1139.65\n"+
		"2026-12-01,bank-ref-3,30.00,1169.65\n")
	runs, err = rec.Run(f.ctx, "", domain.ReconBySchedule, "service:settlement")
	if err != nil || len(runs) != 1 {
		t.Fatalf("run 2: %v %v", runs, err)
	}
	r2 := runs[0]
	want = fmt.Sprintf("matched [1=tax_remittance:rem-CN-2026-11-CNY[%s] 2=deposit:bank-ref-3[%s]]; bank [2 5]; ledger [deposit:bank-ref-2:50]", rem.ID, dep3.ID)
	if got := runSummary(r2); got != want {
		t.Fatalf("run 2:\n got  %s\n want %s", got, want)
	}
	if r2.PreviousID != r1.ID || strings.Join(r2.StatementIDs, ",") != "st-2" || r2.HeadPosition <= r1.HeadPosition || r2.BankClosing.String() != "1169.65" {
		t.Fatalf("run 2: previous %s, statements %v, head %d after %d, bank %v", r2.PreviousID, r2.StatementIDs, r2.HeadPosition, r1.HeadPosition, r2.BankClosing)
	}

	// Nothing new: the exceptions again, nothing matched twice.
	runs, err = rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
	if err != nil {
		t.Fatal(err)
	}
	if got := runSummary(runs[0]); got != "matched []; bank [2 5]; ledger [deposit:bank-ref-2:50]" || len(runs[0].StatementIDs) != 0 {
		t.Fatalf("run 3: %s, statements %v", got, runs[0].StatementIDs)
	}

	// Kept and listed newest first, in pages; one read back whole.
	page, next, err := rec.List(f.ctx, "", 2, "")
	if err != nil || len(page) != 2 || page[0].ID != runs[0].ID || page[1].ID != r2.ID || next == "" {
		t.Fatalf("list page 1: %d runs, next %q, %v", len(page), next, err)
	}
	// The token is of the listing of every currency: under ?currency=CNY
	// it is refused (its position is not of that listing).
	if _, _, err := rec.List(f.ctx, "CNY", 2, next); !isInvalid(err) {
		t.Fatalf("the unfiltered listing's token under currency CNY: %v; want invalid", err)
	}
	page, next, err = rec.List(f.ctx, "", 2, next)
	if err != nil || len(page) != 1 || page[0].ID != r1.ID || next != "" || page[0].MatchedCount != 3 || page[0].UnmatchedBankN != 2 {
		t.Fatalf("list page 2: %+v, next %q, %v", page, next, err)
	}
	got, err := rec.Get(f.ctx, r1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if runSummary(got) != runSummary(r1) || got.Result.UnmatchedBank[0].Line.BookedOn.Format("2006-01-02") != "2026-11-30" {
		t.Fatalf("read back:\n got  %s\n want %s", runSummary(got), runSummary(r1))
	}
	if _, err := f.pool.Exec(f.ctx, `delete from ledger.reconciliation_items`); err == nil || !strings.Contains(err.Error(), "kept as they were") {
		t.Fatalf("deleting reconciliation items: %v; want refused", err)
	}
}

func importCSV(t *testing.T, f *fixture, id, csv string) {
	t.Helper()
	if _, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: id, Currency: "CNY", Account: "CN-CLIENT-1",
		Format: "csv", Content: csv}); err != nil {
		t.Fatal(err)
	}
}

// runSummary: matched line numbers with kind:key[transactions]; unmatched
// line numbers; unmatched movements kind:key:amount.
func runSummary(r *domain.ReconRun) string {
	var m, b, l []string
	for _, x := range r.Result.Matched {
		m = append(m, fmt.Sprintf("%d=%s:%s%v", x.Line.LineNo, x.Movement.Kind, x.Movement.Key, x.Movement.TransactionIDs))
	}
	for _, x := range r.Result.UnmatchedBank {
		b = append(b, fmt.Sprint(x.Line.LineNo))
	}
	for _, x := range r.Result.UnmatchedLedger {
		l = append(l, fmt.Sprintf("%s:%s:%s", x.Movement.Kind, x.Movement.Key, x.Movement.Amount))
	}
	return fmt.Sprintf("matched %v; bank %v; ledger %v", m, b, l)
}

// A transaction chained long after it was created (chaining waits for every
// older database transaction to end, an open psql session's too) is taken
// by the run after its chaining. Runs read movements created from an hour
// before their own previous run's time: one created more than an hour
// before the run that did not find it chained fell between the two runs,
// in neither, and a run could say reconciled without it.
func TestReconciliationTakesALateChainedMovement(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	f := newFixtureAt(t, nil, clk)
	rec := f.svc.Reconciliations()
	run := func(name string) *domain.ReconRun {
		t.Helper()
		runs, err := rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
		if err != nil || len(runs) != 1 {
			t.Fatalf("%s: %v %v", name, runs, err)
		}
		return runs[0]
	}
	early := f.deposit(t, "r-1", "10.00", "CNY", "early")
	chainAll(t, f)
	importCSV(t, f, "st-1", "date,reference,amount,balance\n2026-11-30,early,10.00,10.00\n")
	if got := runSummary(run("run 1")); got != fmt.Sprintf("matched [1=deposit:early[%s]]; bank []; ledger []", early.ID) {
		t.Fatalf("run 1: %s", got)
	}
	clk.Advance(30 * time.Minute)
	late := f.deposit(t, "r-1", "100.00", "CNY", "late-1") // not chained before run 2
	clk.Advance(2 * time.Hour)
	if r2 := run("run 2"); len(r2.Result.UnmatchedLedger) != 0 {
		t.Fatalf("run 2 found the unchained deposit: %s", runSummary(r2))
	}
	chainAll(t, f)
	clk.Advance(24 * time.Hour)
	if got, want := runSummary(run("run 3")), "matched []; bank []; ledger [deposit:late-1:100]"; got != want {
		t.Fatalf("run 3 (the deposit of %s chained since run 2):\n got  %s\n want %s", late.ID, got, want)
	}
}

// Two statements of one account closing at the same instant (a morning
// one, then the full day's, imported later, its id sorting first): the
// reconciliation run and the segregated-funds report take the same one as
// the account's latest, the one imported last (the run took the id sorting
// last, the report the import; the auditors' two documents disagreed).
func TestRunAndReportTakeTheSameLatestStatement(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	importCSV(t, f, "st-z-morning", "date,reference,amount,balance\n2026-11-30,x,1000.00,1000.00\n")
	importCSV(t, f, "st-a-day", "date,reference,amount,balance\n2026-11-30,x,1000.00,1000.00\n2026-11-30,y,100.00,1100.00\n")
	runs, err := f.svc.Reconciliations().Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
	if err != nil || len(runs) != 1 || runs[0].BankClosing == nil {
		t.Fatalf("run: %v %v", runs, err)
	}
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || rep.BankStatementBalance == nil {
		t.Fatalf("report: %+v %v", rep, err)
	}
	if !runs[0].BankClosing.Equal(*rep.BankStatementBalance) || rep.BankStatementBalance.String() != "1100" {
		t.Fatalf("run's bank closing %s, report's %s; want both the full day's 1100", runs[0].BankClosing, rep.BankStatementBalance)
	}
}

// The same file imported again under another statement id (a retry after a
// timeout, named anew) is a conflict naming the first: accepted, its lines
// were "already matched" exceptions in every run from then on, nothing able
// to clear them.
func TestSameFileUnderAnotherIDIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const csv = "date,reference,amount,balance\n2026-11-30,x,1000.00,1000.00\n"
	importCSV(t, f, "st-1", csv)
	_, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: "st-1-retry", Currency: "CNY", Account: "CN-CLIENT-1",
		Format: "csv", Content: csv})
	if !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "st-1") {
		t.Fatalf("the same file as st-1-retry: %v, want a conflict naming st-1", err)
	}
	importCSV(t, f, "st-1", csv) // the same file under its own id: answered, as before
	// Another account's statement may hold the same bytes (two accounts,
	// the same day's single line): it is another statement.
	if _, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: "st-2", Currency: "CNY", Account: "CN-CLIENT-2",
		Format: "csv", Content: csv}); err != nil {
		t.Fatalf("the same bytes for another account: %v", err)
	}
}

// A statement describes days past, after 1970: a line of year 0 was stored
// (statements are never changed) and every listing holding it was a 500; a
// year mistyped 2062 was every later run's latest statement of the account.
func TestStatementDatesInRange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for id, csv := range map[string]string{
		"st-year0":  "date,reference,amount,balance\n0000-06-01,x,1.00,1.00\n",
		"st-2062":   "date,reference,amount,balance\n2062-11-30,x,1.00,1.00\n",
		"st-line-0": "date,reference,amount,balance\n0001-01-01,x,1.00,1.00\n2026-11-30,y,1.00,2.00\n",
	} {
		_, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: id, Currency: "CNY", Account: "CN-CLIENT-1",
			Format: "csv", Content: csv})
		var inv *apperr.InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("%s: %v, want InvalidError", id, err)
		}
	}
	list, _, err := f.svc.Statements().List(f.ctx, "", "", 0, "")
	if err != nil || len(list) != 0 {
		t.Fatalf("statements stored: %v %v", list, err)
	}
}

// TestReconciliationTellsOutstandingFromExceptions: a movement no statement
// line names yet, recorded less than 4 days before the latest statement's
// close or after it, is outstanding, and a run left with only such items
// is reconciled. Before, every transfer of the last day kept each daily
// run at "exceptions" (and GpubillReconciliationExceptions on for good),
// a real exception looking like any day's. A carried item is judged again
// by when it was recorded: one the next statements still do not show
// becomes an exception.
func TestReconciliationTellsOutstandingFromExceptions(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	rec := f.svc.Reconciliations()
	f.deposit(t, "r-1", "10.00", "CNY", "ref-shown")
	f.deposit(t, "r-1", "20.00", "CNY", "ref-friday") // the statement of 12-01 closes 30 h later
	clk.Set(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	f.deposit(t, "r-1", "30.00", "CNY", "ref-after") // after that statement's close
	chainAll(t, f)
	importCSV(t, f, "st-1", "date,reference,amount,balance\n2026-12-01,ref-shown,10.00,10.00\n")
	runs, err := rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
	if err != nil {
		t.Fatal(err)
	}
	r1 := runs[0]
	if r1.Verdict != domain.ReconReconciled || r1.UnmatchedLedgerN != 2 || r1.OutstandingN != 2 {
		t.Fatalf("run 1: %s, %d unmatched in the ledger, %d outstanding (%s); want reconciled, 2 outstanding",
			r1.Verdict, r1.UnmatchedLedgerN, r1.OutstandingN, runSummary(r1))
	}
	for _, u := range r1.Result.UnmatchedLedger {
		if !u.Outstanding || !strings.HasPrefix(u.Reason, "outstanding: recorded ") {
			t.Errorf("%s: outstanding %v, reason %q", u.Movement.Key, u.Outstanding, u.Reason)
		}
	}
	if v := reconGauge(t, f, "gpubill_reconciliation_exceptions"); v != 0 {
		t.Errorf("gpubill_reconciliation_exceptions %v after run 1; want 0", v)
	}

	// A week on, the bank's statements still show neither: both are now
	// exceptions, judged by when they were recorded (kept with the items).
	clk.Set(time.Date(2026, 12, 9, 9, 0, 0, 0, time.UTC))
	importCSV(t, f, "st-2", "date,reference,amount,balance\n2026-12-08,interest,0.01,10.01\n")
	runs, err = rec.Run(f.ctx, "CNY", domain.ReconBySchedule, "service:settlement")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rec.Get(f.ctx, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Verdict != domain.ReconExceptions || r2.UnmatchedLedgerN != 2 || r2.OutstandingN != 0 || r2.UnmatchedBankN != 1 {
		t.Fatalf("run 2: %s, %d unmatched in the ledger, %d outstanding (%s); want exceptions, none outstanding",
			r2.Verdict, r2.UnmatchedLedgerN, r2.OutstandingN, runSummary(r2))
	}
	for _, u := range r2.Result.UnmatchedLedger {
		if u.Outstanding || u.Movement.RecordedAt.IsZero() {
			t.Errorf("%s: outstanding %v, recorded %v; want an exception with its time", u.Movement.Key, u.Outstanding, u.Movement.RecordedAt)
		}
	}
	if v := reconGauge(t, f, "gpubill_reconciliation_exceptions"); v != 1 {
		t.Errorf("gpubill_reconciliation_exceptions %v after run 2; want 1", v)
	}
}

// reconGauge reads a one-currency gauge of ledger.Metrics (label, value).
func reconGauge(t *testing.T, f *fixture, name string) float64 {
	t.Helper()
	for _, m := range ledger.Metrics() {
		if m.Name == name {
			var cur string
			var v float64
			if err := f.pool.QueryRow(f.ctx, m.Query).Scan(&cur, &v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A run judges what is outstanding by the statements it or an earlier run
// took: one imported while it reads (its transaction is read committed,
// and an import takes no run's lock) moved the cut-off a day on, and what
// that statement shows, not in the run, read as exceptions for a day.
func TestReconciliationJudgesByTheStatementsItTook(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	importCSV(t, f, "st-1", "date,reference,amount,balance\n2026-12-01,interest,0.01,0.01\n")
	rd, err := (&postgres.Reconciliations{Pool: f.pool}).BeginRun(f.ctx, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Rollback(f.ctx) //nolint:errcheck // a read-only run
	taken, _, err := rd.FreshLines(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	importCSV(t, f, "st-2", "date,reference,amount,balance\n2026-12-04,interest,0.01,0.02\n")
	at, ok, err := rd.LatestClose(f.ctx, taken)
	if want := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC); err != nil || !ok || !at.Equal(want) {
		t.Fatalf("latest close %v %v %v; want %v, st-1's (st-2 came after the run read its lines)", at, ok, err, want)
	}
}

// TestStoppedBankFeedTurnsMovementsIntoExceptions: a payout paid after the
// latest statement, with no statement imported since, is outstanding only
// while a statement could still be on its way; judged by that old close
// alone, every daily run said reconciled for good (no exception, no
// alert), hiding a transfer the bank never made while the feed was down.
// The age of the latest statement is a gauge of its own.
func TestStoppedBankFeedTurnsMovementsIntoExceptions(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	rec := f.svc.Reconciliations()
	f.deposit(t, "r-1", "100.00", "CNY", "ref-in")
	clk.Set(time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC))
	importCSV(t, f, "st-1130", "date,reference,amount,balance\n2026-11-30,ref-in,100.00,100.00\n") // closes 12-01T00:00Z
	clk.Set(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	for _, tr := range []app.CreateTransactionInput{
		transfer("earn", "renter:r-1:wallet", "provider:p-1:available", "40.00", "CNY"),
		transfer("submit", "provider:p-1:available", "provider:p-1:in_transit", "40.00", "CNY"),
		transfer("paid", "provider:p-1:in_transit", "bank:client", "40.00", "CNY"),
	} {
		tr.Internal = true
		if tr.IdempotencyKey != "earn" {
			tr.Metadata = map[string]string{"kind": "payout", "payout_id": "po-1"}
		}
		if _, err := f.app.CreateTransaction(f.ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	chainAll(t, f)

	// The next morning the payout may not be booked yet: outstanding.
	clk.Set(time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC))
	runs, err := rec.Run(f.ctx, "", domain.ReconBySchedule, "service:settlement")
	if err != nil {
		t.Fatal(err)
	}
	if r := runs[0]; r.Verdict != domain.ReconReconciled || r.OutstandingN != 1 || r.UnmatchedLedgerN != 1 {
		t.Fatalf("run of 12-03: %s, %d outstanding (%s); want reconciled, the payout outstanding", r.Verdict, r.OutstandingN, runSummary(r))
	}

	// No statement since 11-30: on 12-20 the statements of 12-02 to 12-17
	// should long have shown the payout. Nothing does: an exception.
	clk.Set(time.Date(2026, 12, 20, 6, 0, 0, 0, time.UTC))
	runs, err = rec.Run(f.ctx, "", domain.ReconBySchedule, "service:settlement")
	if err != nil {
		t.Fatal(err)
	}
	r := runs[0]
	if r.Verdict != domain.ReconExceptions || r.OutstandingN != 0 || r.UnmatchedLedgerN != 1 || r.Result.UnmatchedLedger[0].Movement.Key != "po-1" {
		t.Fatalf("run of 12-20: %s, %d outstanding (%s); want exceptions, the payout an exception", r.Verdict, r.OutstandingN, runSummary(r))
	}
	if why := r.Result.UnmatchedLedger[0].Reason; !strings.Contains(why, "2026-12-01T00:00:00Z") {
		t.Errorf("the payout's reason %q; want the latest statement's close named", why)
	}
	if v := reconGauge(t, f, "gpubill_reconciliation_exceptions"); v != 1 {
		t.Errorf("gpubill_reconciliation_exceptions %v after the run of 12-20; want 1", v)
	}
	// The gauge is read on scrape against the database's clock.
	closeAt := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	lo := time.Since(closeAt).Seconds()
	age := statementGauges(t, f, "gpubill_reconciliation_latest_statement_age_seconds")["CNY/CN-CLIENT-1"]
	if hi := time.Since(closeAt).Seconds(); age < lo-1 || age > hi+1 {
		t.Errorf("gpubill_reconciliation_latest_statement_age_seconds %v; want %v..%v (since st-1130's close)", age, lo, hi)
	}
}

// A statement imported late fills the gap its absence left: with 1 and 3
// December imported, the run names the break (+50: 1 December closes at
// 100, 3 December opens at 150) and is not reconciled, the exceptions
// gauge at 1; once 2 December (the deposit of 50) is imported, after 3
// December, the next run matches every line and reconciles.
func TestStatementGapClearsOnceTheMissingStatementIsImported(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	rec := f.svc.Reconciliations()
	f.deposit(t, "r-1", "100.00", "CNY", "ref-1")
	f.deposit(t, "r-1", "50.00", "CNY", "ref-2")
	f.deposit(t, "r-1", "20.00", "CNY", "ref-3")
	chainAll(t, f)
	importCSV(t, f, "st-1201", "date,reference,amount,balance\n2026-12-01,ref-1,100.00,100.00\n")
	importCSV(t, f, "st-1203", "date,reference,amount,balance\n2026-12-03,ref-3,20.00,170.00\n")
	runs, err := rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
	if err != nil {
		t.Fatal(err)
	}
	r1, err := rec.Get(f.ctx, runs[0].ID) // as kept
	if err != nil {
		t.Fatal(err)
	}
	if r1.Verdict != domain.ReconExceptions || r1.BreakN != 1 || len(r1.Result.Breaks) != 1 || r1.MatchedCount != 2 || r1.OutstandingN != 1 {
		t.Fatalf("run 1: %s, %d breaks %+v, %s; want exceptions, one break", r1.Verdict, r1.BreakN, r1.Result.Breaks, runSummary(r1))
	}
	b := r1.Result.Breaks[0]
	if got := fmt.Sprintf("%s %s>%s %s>%s %s", b.Account, b.PreviousID, b.StatementID, b.PreviousClosing, b.Opening, b.Difference); got != "CN-CLIENT-1 st-1201>st-1203 100>150 50" {
		t.Fatalf("run 1: break %s (%q)", got, b.Reason)
	}
	if v := reconGauge(t, f, "gpubill_reconciliation_exceptions"); v != 1 {
		t.Errorf("gpubill_reconciliation_exceptions %v after run 1; want 1", v)
	}

	importCSV(t, f, "st-1202", "date,reference,amount,balance\n2026-12-02,ref-2,50.00,150.00\n")
	runs, err = rec.Run(f.ctx, "CNY", domain.ReconByRequest, "finance")
	if err != nil {
		t.Fatal(err)
	}
	if r2 := runs[0]; r2.Verdict != domain.ReconReconciled || r2.BreakN != 0 || r2.MatchedCount != 1 || r2.UnmatchedLedgerN != 0 {
		t.Fatalf("run 2: %s, breaks %+v, %s; want reconciled", r2.Verdict, r2.Result.Breaks, runSummary(r2))
	}
	if v := reconGauge(t, f, "gpubill_reconciliation_exceptions"); v != 0 {
		t.Errorf("gpubill_reconciliation_exceptions %v after run 2; want 0", v)
	}
}
