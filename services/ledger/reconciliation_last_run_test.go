package ledger_test

import (
	"math"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// A currency whose reconciliations fail from its first statement had no
// last-run series, and GpubillReconciliationNotRun read nothing: with no
// run, its series is the first statement's import (the daily run has been
// due since), so the alert fires 26 hours after it. A currency that ran
// reads its latest run.
func TestReconciliationLastRunOfACurrencyNeverReconciled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	day := time.Now().UTC().AddDate(0, 0, -3).Format(time.DateOnly)
	for _, st := range []struct{ id, currency string }{{"cn-never-run", "CNY"}, {"us-ran", "USD"}} {
		if _, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: st.id, Currency: st.currency,
			Account: st.currency + "-CLIENT-1", Format: "csv",
			Content: "date,reference,amount,balance\n" + day + ",interest,0.01,0.01\n"}); err != nil {
			t.Fatal(err)
		}
	}
	imported := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	ran := time.Now().Add(-time.Hour).Truncate(time.Second)
	// Imported two days ago (statements are immutable: the test sets it aside).
	if _, err := f.pool.Exec(f.ctx, `alter table ledger.bank_statements disable trigger user;
		update ledger.bank_statements set imported_at = '`+imported.Format(time.RFC3339)+`';
		alter table ledger.bank_statements enable trigger user`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, `insert into ledger.reconciliations (reconciliation_id, currency, trigger, created_at,
			journal_head_hash, journal_head_position, ledger_bank_client, verdict, matched_count, unmatched_bank_count, unmatched_ledger_count)
		values ('rec-usd', 'USD', 'schedule', $1, '', 0, 0, 'reconciled', 0, 0, 0)`, ran); err != nil {
		t.Fatal(err)
	}
	got := statementGauges(t, f, "gpubill_reconciliation_last_run_timestamp_seconds")
	want := map[string]float64{"CNY": float64(imported.Unix()), "USD": float64(ran.Unix())}
	if len(got) != len(want) {
		t.Fatalf("last-run series %v; want %v (CNY never reconciled: its first statement's import)", got, want)
	}
	for c, w := range want {
		if math.Abs(got[c]-w) > 1 {
			t.Errorf("last run of %s: %v; want %v", c, got[c], w)
		}
	}
}
