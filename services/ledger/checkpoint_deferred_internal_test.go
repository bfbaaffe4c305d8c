package ledger

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// A checkpoint put off because a writer stayed open past the wait (a
// charge batch of minutes) was as silent as one another checkpointer
// took: MakeCheckpoint said (false, nil) for both, and a checkpoint put
// off step after step showed nowhere. It is counted and logged at WARN
// with the instant and how many writers were open, and not as a failure.
// Not parallel: the counters are the process's.
func TestCheckpointPutOffByAnOpenWriterIsCounted(t *testing.T) {
	var logs bytes.Buffer
	s, pool, ctx, clk := checkpointDue(t, slog.New(slog.NewTextHandler(&logs, nil)))
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx)
	if _, err := writer.Exec(ctx, `insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
		values ('6b0f5e1c-0000-4000-8000-0000000000d1', 0, 'bank:client', 'CNY', 'debit', 1, $1)`, clk.Now().Add(-time.Hour)); err != nil { // a ledger writer
		t.Fatal(err)
	}
	deferred, failed := counterValue(t, "gpubill_ledger_checkpoint_deferred_total"), counterValue(t, "gpubill_ledger_checkpoint_failures_total")
	s.checkpointStep(ctx)
	if got := counterValue(t, "gpubill_ledger_checkpoint_deferred_total") - deferred; got != 1 {
		t.Errorf("gpubill_ledger_checkpoint_deferred_total rose by %v with a writer open past the wait; want 1", got)
	}
	if got := counterValue(t, "gpubill_ledger_checkpoint_failures_total") - failed; got != 0 {
		t.Errorf("gpubill_ledger_checkpoint_failures_total rose by %v; a checkpoint put off is no failure", got)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "checkpoint") {
			line = l
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "at=2026-11-02T00:58:00") || !strings.Contains(line, "open_writers=1") {
		t.Errorf("log %q; want a WARN naming the checkpoint's instant and open_writers=1", line)
	}
	if c, err := s.reports.Store.LatestCheckpoint(ctx, nil); err != nil || c != nil {
		t.Fatalf("checkpoint %+v, %v; want none while the writer is open", c, err)
	}
	// The writer ends: the next step makes the checkpoint, nothing more counted.
	if err := writer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	s.checkpointStep(ctx)
	if got := counterValue(t, "gpubill_ledger_checkpoint_deferred_total") - deferred; got != 1 {
		t.Errorf("gpubill_ledger_checkpoint_deferred_total rose by %v after the writer ended; want 1", got)
	}
	if c, err := s.reports.Store.LatestCheckpoint(ctx, nil); err != nil || c == nil {
		t.Fatalf("checkpoint %+v, %v after the writer ended; want one", c, err)
	}
}

// checkpointDue is a ledger service on its own database, logging to log,
// whose checkpoint waits 200 ms for open writers, holding one deposit made
// a day before its clock: a checkpoint is due.
func checkpointDue(t *testing.T, log *slog.Logger) (*Service, *pgxpool.Pool, context.Context, *clock.Manual) {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	ctx := testkit.Context(t)
	clk := clock.NewManual(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	s, err := New(ctx, svc.Deps{Pool: pool, Log: log, Clock: clk, Calendar: cycles.Default()})
	if err != nil {
		t.Fatal(err)
	}
	s.reports.Store.(*postgres.Reports).WaitMax = 200 * time.Millisecond
	if _, err := s.app.Deposit(ctx, app.DepositInput{RenterID: "r-1", Amount: "10.00", Currency: "CNY", ExternalRef: "d-1"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(25 * time.Hour)
	return s, pool, ctx, clk
}

// Every service keeps its schema in the one database (README), so a
// transaction open in payout or settlement, or a session idle in one, is
// no ledger writer: a checkpoint waits only for transactions that write
// ledger.postings.
func TestCheckpointDoesNotWaitForAnotherServicesTransaction(t *testing.T) {
	s, pool, ctx, _ := checkpointDue(t, slog.New(slog.DiscardHandler))
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, `select pg_current_xact_id()`); err != nil { // holds an xid, writes no posting
		t.Fatal(err)
	}
	deferred := counterValue(t, "gpubill_ledger_checkpoint_deferred_total")
	s.checkpointStep(ctx)
	if got := counterValue(t, "gpubill_ledger_checkpoint_deferred_total") - deferred; got != 0 {
		t.Errorf("gpubill_ledger_checkpoint_deferred_total rose by %v while only another service's transaction was open; want 0", got)
	}
	if c, err := s.reports.Store.LatestCheckpoint(ctx, nil); err != nil || c == nil {
		t.Fatalf("checkpoint %+v, %v with only another service's transaction open; want one made", c, err)
	}
}
