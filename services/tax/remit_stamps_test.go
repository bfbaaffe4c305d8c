package tax

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/tax/internal/app"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// slowLedger is a ledger that takes a while to answer each call: the
// manual clock moves on by `takes` before each answer.
type slowLedger struct {
	app.Ledger
	clk   *clock.Manual
	takes time.Duration
}

func (l slowLedger) PostRemittance(ctx context.Context, r domain.Remittance) (domain.PostedTx, error) {
	l.clk.Advance(l.takes)
	return l.Ledger.PostRemittance(ctx, r)
}

func (l slowLedger) Posted(ctx context.Context, keys []string) (map[string]domain.PostedTx, error) {
	l.clk.Advance(l.takes)
	return l.Ledger.Posted(ctx, keys)
}

// slowReportStore takes `takes` to count a run's report lines, the run's
// last step before it is recorded.
type slowReportStore struct {
	app.Store
	clk   *clock.Manual
	takes time.Duration
}

func (s slowReportStore) ReportCount(ctx context.Context, remittanceIDs []string) (int, error) {
	s.clk.Advance(s.takes)
	return s.Store.ReportCount(ctx, remittanceIDs)
}

// Each time a run records says when what it names happened: the run's
// started_at when it took the runs' lock, a remittance's created_at when
// it was planned, remitted_at when the ledger's answer was recorded,
// reversed_at when the reversal was found, the run's completed_at when its
// last write (its record) was made. A run stamped all of them with the one
// instant it read on taking the lock: with a ledger taking 20 minutes a
// call, February's run was recorded completed at the instant it started,
// 45 minutes before its work was done, and an auditor read a completion
// before the remittance it completed.
func TestRemitTaxStampsEachRecordWhenItIsWritten(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00 on 20 February
	const call, report = 20 * time.Minute, 5 * time.Minute
	s.app.Ledger = slowLedger{Ledger: s.app.Ledger, clk: clk, takes: call}
	s.app.Store = slowReportStore{Store: s.app.Store, clk: clk, takes: report}
	ctx := context.Background()

	// February's run: the settlements looked up (a call), the month
	// planned, its remittance posted (a call), the report counted, the run
	// recorded.
	started := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	clk.Set(started)
	feb, err := s.app.RemitTax(ctx, "2026-02", 10)
	if err != nil || len(feb.Remittances) != 1 {
		t.Fatalf("February's run answered %v, %v; want one remittance", appRemIDs(feb.Remittances), err)
	}
	planned, posted, completed := started.Add(call), started.Add(2*call), started.Add(2*call+report)
	var runStarted *time.Time
	var runCompleted time.Time
	if err := s.d.Pool.QueryRow(ctx, `select (to_jsonb(r)->>'started_at')::timestamptz, completed_at from tax.remittance_runs r
		where period = '2026-02'`).Scan(&runStarted, &runCompleted); err != nil {
		t.Fatal(err)
	}
	r := feb.Remittances[0]
	if runStarted == nil || !runStarted.Equal(started) || !r.CreatedAt.Equal(planned) || r.RemittedAt == nil || !r.RemittedAt.Equal(posted) ||
		!runCompleted.Equal(completed) {
		t.Fatalf("February's run, its lock taken at %s, recorded started at %v, %s created at %s and remitted at %v, completed at %s; "+
			"want started %s, created %s (planned after a ledger call), remitted %s (after the post's), completed %s (after the report)",
			started.Format(time.RFC3339), stamp(runStarted), r.ID, stamp(&r.CreatedAt), stamp(r.RemittedAt), stamp(&runCompleted),
			started.Format(time.RFC3339), planned.Format(time.RFC3339), posted.Format(time.RFC3339), completed.Format(time.RFC3339))
	}

	// Finance reverses it; the check finds the reversal (a call), plans
	// February again after looking its settlement up (a call) and posts
	// the new remittance (a call).
	l.reverseTx(t, "rem-2026-02-CN-CNY", "tx-reversal")
	checked := time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)
	clk.Set(checked)
	again, err := s.app.RemitReversed(ctx)
	if err != nil || len(again) != 1 {
		t.Fatalf("the check answered %v, %v; want February's new remittance", appRemIDs(again), err)
	}
	first, err := s.app.Store.Remittances(ctx, app.RemittanceFilter{Period: "2026-02", Jurisdiction: "CN", Currency: "CNY", Limit: 1})
	if err != nil || len(first) != 1 || first[0].ID != "rem-2026-02-CN-CNY" {
		t.Fatalf("February's first remittance: %v, %v", appRemIDs(first), err)
	}
	found, replanned, reposted := checked.Add(call), checked.Add(2*call), checked.Add(3*call)
	n := again[0]
	if first[0].ReversedAt == nil || !first[0].ReversedAt.Equal(found) || !n.CreatedAt.Equal(replanned) || n.RemittedAt == nil ||
		!n.RemittedAt.Equal(reposted) {
		t.Fatalf("the check, its lock taken at %s, recorded %s reversed at %v, %s created at %s and remitted at %v; "+
			"want reversed %s (the ledger's answer), created %s, remitted %s", checked.Format(time.RFC3339), first[0].ID,
			stamp(first[0].ReversedAt), n.ID, stamp(&n.CreatedAt), stamp(n.RemittedAt), found.Format(time.RFC3339),
			replanned.Format(time.RFC3339), reposted.Format(time.RFC3339))
	}
}

func stamp(at *time.Time) string {
	if at == nil {
		return "none"
	}
	return at.UTC().Format(time.RFC3339)
}
