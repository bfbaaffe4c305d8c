package settlement

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// slowLedger is the ledger as a run of the hourly sweep meets it when its
// calls are slow: after budget calls of a run its clock jumps an hour, past
// the run's time bound (sweepRunMax, under the activity's 10 minutes), so
// the run stops before its next statement, Unfinished. during is called on
// each call before the ledger answers it (nil: nothing).
type slowLedger struct {
	app.Ledger
	clock  *clock.Manual
	budget int
	calls  int
	during func(call int)
}

func (l *slowLedger) CreateTransaction(ctx context.Context, tx app.LedgerTx) (string, error) {
	l.calls++
	if l.during != nil {
		l.during(l.calls)
	}
	if l.calls%l.budget == 0 {
		l.clock.Advance(time.Hour)
	}
	return l.Ledger.CreateTransaction(ctx, tx)
}

// replica is another settlement process on f's database, ledger and
// Temporal client (a restart of f's, or a second replica beside it), with
// its own clock, its ledger calls slowed to budget a run.
func replica(t *testing.T, f *fixture, budget int) (*Service, *slowLedger) {
	t.Helper()
	d := f.s.d
	clk := clock.NewManual(f.clock.Now())
	d.Clock = clk
	s, err := New(context.Background(), d, f.s.tc, "settlement-test", WithoutStartupCycles())
	if err != nil {
		t.Fatal(err)
	}
	l := &slowLedger{Ledger: s.acts.Steps.Ledger, clock: clk, budget: budget}
	s.acts.Steps.Ledger = l
	return s, l
}

// unsweptBacklog records n settled USD statements p-00001…, one a second,
// whose sweeps the ledger refuses as bank:client short.
func unsweptBacklog(t *testing.T, f *fixture, n int) {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2026, 2, 16, 1, 0, 0, 0, time.UTC)
	if _, err := f.s.d.Pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
		values ($1, 'settled', $2, $2, $2)`, cycle1.ID, cycle1.Closes); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.d.Pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, status,
			commission, tax_withheld, net, settled_at)
		select $1, 'p-' || lpad(i::text, 5, '0'), 'USD', 10, 'settled', 2.50, 0, 7.50, $2::timestamptz + i * interval '1 second'
		from generate_series(1, $3::int) i`, cycle1.ID, at, n); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		f.ledger.Refuse(domain.SweepKey(cycle1.ID, fmt.Sprintf("p-%05d", i), "USD"), bankClientShort("USD"))
	}
}

// sweepTries is how many times each of statements p-00001…p-{n} had its
// sweep asked of the ledger.
func sweepTries(f *fixture, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = f.ledger.Requests(domain.SweepKey(cycle1.ID, fmt.Sprintf("p-%05d", i+1), "USD"))
	}
	return out
}

// The hourly sweep's position survives a restart: a backlog three runs
// long, each run on a settlement started afresh on the same database (a
// deploy, a crash, the run landing on another replica), is tried to its
// tail in three runs. With the position in memory each new process
// started from the oldest again, and the tail of a backlog longer than one
// run was never tried while restarts came more often than its runs.
func TestSweepPositionSurvivesARestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const perRun, runs = 10, 3
	unsweptBacklog(t, f, perRun*runs)
	for run := 1; run <= runs; run++ {
		s, _ := replica(t, f, perRun) // a new process each run
		got, err := s.acts.SweepCommission(context.Background())
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if want := (app.SweepSummary{Deferred: perRun, Unfinished: true}); got != want {
			t.Errorf("run %d: %+v, want %+v", run, got, want)
		}
	}
	tries := sweepTries(f, perRun*runs)
	var never []string
	for i, n := range tries {
		if n == 0 {
			never = append(never, fmt.Sprintf("p-%05d", i+1))
		}
	}
	if len(never) > 0 {
		t.Fatalf("after %d runs, each on a restarted settlement, of %d over %d statements: %d never tried (first %s); tries %v",
			runs, perRun, perRun*runs, len(never), never[0], tries)
	}
	for i, n := range tries {
		if n != 1 {
			t.Errorf("p-%05d tried %d times in %d runs, want once", i+1, n, runs)
		}
	}
}

// Two replicas run the hourly sweep at once (an attempt that outlived its
// StartToClose and its retry on another replica, or a run started by hand):
// no sweep is posted twice (the ledger posts each under its sweep key once,
// a replay answers the same transaction; the statement names it once), and
// the shared position moves with one run only. The run that started later
// takes the position over; the earlier run stops at its next statement
// (Superseded), so it never writes its older position over the newer one.
func TestSweepRunsOnTwoReplicasAtOnceShareOnePosition(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	const perRun, backlog = 10, 30
	unsweptBacklog(t, f, backlog)
	// p-00004's sweep bank:client can fund.
	fundable := domain.SweepKey(cycle1.ID, "p-00004", "USD")
	f.ledger.Refuse(fundable, nil)

	a, la := replica(t, f, perRun)
	b, _ := replica(t, f, perRun)
	var (
		bOut  app.SweepSummary
		bErr  error
		bOnce sync.Once
	)
	// B's whole run happens while A's ledger call for p-00004 is in flight.
	la.during = func(call int) {
		if call == 4 {
			bOnce.Do(func() { bOut, bErr = b.acts.SweepCommission(ctx) })
		}
	}
	aOut, err := a.acts.SweepCommission(ctx)
	if err != nil {
		t.Fatalf("replica A: %v", err)
	}
	if bErr != nil {
		t.Fatalf("replica B: %v", bErr)
	}
	// B starts after p-00003, the last statement A had done: p-00004 (its
	// sweep posted by B) to p-00013. A, superseded, stops after p-00004 (the
	// ledger's replay of B's sweep).
	if want := (app.SweepSummary{Swept: 1, Deferred: perRun - 1, Unfinished: true}); bOut != want {
		t.Errorf("replica B: %+v, want %+v", bOut, want)
	}
	if want := (app.SweepSummary{Swept: 1, Deferred: 3, Superseded: true}); aOut != want {
		t.Errorf("replica A: %+v, want %+v", aOut, want)
	}
	txs := exactKey(f.ledger.Transactions(fundable), fundable)
	if len(txs) != 1 {
		t.Fatalf("p-00004: %d sweeps posted, want 1", len(txs))
	}
	if n := f.count(t, `select count(*) from settlement.settlements where provider_id = 'p-00004' and sweep_transaction_id = $1`, txs[0].TransactionId); n != 1 {
		t.Errorf("p-00004's statement does not name its sweep %s", txs[0].TransactionId)
	}
	// The next run, on either replica, goes on after B's last statement.
	before := sweepTries(f, backlog)
	c, _ := replica(t, f, perRun)
	if _, err := c.acts.SweepCommission(ctx); err != nil {
		t.Fatal(err)
	}
	after := sweepTries(f, backlog)
	var tried []string
	for i := range after {
		if after[i] > before[i] {
			tried = append(tried, fmt.Sprintf("p-%05d", i+1))
		}
	}
	if len(tried) == 0 || tried[0] != "p-00014" {
		t.Errorf("the run after both tried %v, want p-00014 first (after B's last)", tried)
	}
}
