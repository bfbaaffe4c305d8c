package postgres

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/pg"

	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// keyedLedger moves balances once per key, as the ledger does (a key
// posted again is answered, nothing moved), and refuses every call while
// down.
type keyedLedger struct {
	mu      sync.Mutex
	down    bool
	balance map[string]decimal.Decimal
	moved   map[string]int // per key: how many times it moved money
}

func (l *keyedLedger) setDown(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
}

func (l *keyedLedger) Available(_ context.Context, provider, _ string) (decimal.Decimal, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return decimal.Zero, errors.New("ledger: connection refused")
	}
	return l.balance[domain.AvailableAccount(provider)], nil
}

func (l *keyedLedger) Transfer(_ context.Context, t domain.LedgerTransfer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return errors.New("ledger: connection refused")
	}
	if l.moved[t.Key] > 0 {
		return nil
	}
	l.moved[t.Key]++
	l.balance[t.Debit] = l.balance[t.Debit].Sub(t.Amount)
	l.balance[t.Credit] = l.balance[t.Credit].Add(t.Amount)
	return nil
}

func (l *keyedLedger) state(provider, key string) (available, inTransit string, moved int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.balance[domain.AvailableAccount(provider)].String(), l.balance[domain.InTransitAccount(provider)].String(), l.moved[key]
}

// A payout canceled while its bank transfer was queued, the ledger down:
// the cancel is saved (payout canceled, transfer out of the queue), its
// answer says the amount goes back to available once the ledger takes it.
// A database restored from that point (the return not yet posted) had the
// payout read canceled, its 600.00 in provider:{id}:in_transit for good:
// the restore restarted no workflow for a canceled payout, and a workflow
// restarted would have ended at the gate without posting. The restore's
// step, run twice, and the workflows it restarts bring the amount back to
// available exactly once.
func TestCanceledInQueueReturnedAfterRestore(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	const key = "payout-po-rc-1-canceled"
	led := &keyedLedger{down: true, moved: map[string]int{"payout-po-rc-1-submitted": 1},
		balance: map[string]decimal.Decimal{domain.InTransitAccount("p-s"): decimal.NewFromInt(600)}}
	a := &app.Payouts{Store: s, Ledger: led, Clock: clock.System{}, Log: slog.New(slog.DiscardHandler)}
	sentPayout(t, pool, "po-rc", "cyc-20260101", "bank", "queued")
	if err := a.Cancel(ctx, "po-rc", "fraud confirmed"); err == nil || !strings.Contains(err.Error(), "once the ledger takes it") {
		t.Fatalf("cancel with the ledger down: %v; want the cancel saved, its return waiting for the ledger", err)
	}
	var status, transfer string
	if err := pool.QueryRow(ctx, `select p.status, t.state from payout.payouts p join payout.bank_transfers t on t.reference = p.rail_reference
		where p.payout_id = 'po-rc'`).Scan(&status, &transfer); err != nil || status != "canceled" || transfer != "canceled" {
		t.Fatalf("after the cancel: payout %s, transfer %s (%v); want both canceled", status, transfer, err)
	}
	led.setDown(false)

	// The database restored from here: the workflow that would have
	// posted the return never ran on the new Temporal.
	for step := 1; step <= 2; step++ {
		var marked int64
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			marked, err = MarkUnstartedAfterRestore(ctx, tx, time.Now(), app.ReturnWindowDefault)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		unstarted, err := s.Unstarted(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range unstarted { // the starter's part: payout-{id} on the new Temporal
			if got := runPayoutWorkflow(t, a, u.ID); got != domain.StatusCanceled {
				t.Fatalf("restore step %d: the workflow of %s ended %s, want canceled", step, u.ID, got)
			}
		}
		if err := s.SetWorkflowStarted(ctx, unstarted); err != nil {
			t.Fatal(err)
		}
		// Once the ledger took the return (recorded), a restore has
		// nothing more to restart for it.
		want := []int64{1, 0}[step-1]
		available, inTransit, moved := led.state("p-s", key)
		if available != "600" || inTransit != "0" || moved != 1 || marked != want {
			t.Fatalf("restore step %d (%d payouts marked for a new workflow): available %s, in_transit %s, %s moved money %d times; "+
				"want available 600, in_transit 0, the return posted once, %d marked", step, marked, available, inTransit, key, moved, want)
		}
	}
}

// runPayoutWorkflow runs payout-{id} on a test Temporal with a's activities
// and returns its last status.
func runPayoutWorkflow(t *testing.T, a *app.Payouts, id string) string {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(app.Workflow, workflow.RegisterOptions{Name: app.WorkflowName})
	env.RegisterActivityWithOptions(a.Prepare, activity.RegisterOptions{Name: app.ActPrepare})
	env.RegisterActivityWithOptions(a.Submit, activity.RegisterOptions{Name: app.ActSubmit})
	env.RegisterActivityWithOptions(a.Follow, activity.RegisterOptions{Name: app.ActFollow})
	env.ExecuteWorkflow(app.WorkflowName, app.Input{PayoutID: id})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("payout-%s: completed %v, %v", id, env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	var status string
	if err := env.GetWorkflowResult(&status); err != nil {
		t.Fatal(err)
	}
	return status
}

// A snapshot taken before cancel_posted_at (migration payout/0026) is
// restored all the same: the restore's step leaves its payouts canceled in
// the queue to the migration, run at the service's start, which marks them
// for a new workflow (that posts their return, or is answered it was).
func TestCanceledInQueueRestoredFromBeforeItsRecord(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	store, err := database.NewStore(database.DialectPostgres, "payout.goose_db_version")
	if err != nil {
		t.Fatal(err)
	}
	mig, err := goose.NewProvider("", db, migrations.For(Schema), goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mig.DownTo(ctx, 25); err != nil {
		t.Fatal(err)
	}
	sentPayout(t, pool, "po-old", "cyc-20260101", "bank", "canceled")
	if _, err := pool.Exec(ctx, `update payout.payouts set status = 'canceled' where payout_id = 'po-old'`); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := MarkUnstartedAfterRestore(ctx, tx, time.Now(), app.ReturnWindowDefault)
		return err
	}); err != nil {
		t.Fatalf("the restore's step on a snapshot before cancel_posted_at: %v", err)
	}
	if err := pg.Migrate(ctx, pool, Schema, migrations.For(Schema)); err != nil {
		t.Fatal(err)
	}
	s := &Store{Pool: pool}
	if got, err := s.Unstarted(ctx); err != nil || len(got) != 1 || got[0].ID != "po-old" {
		t.Fatalf("unstarted after the migration: %v (%v); want po-old, canceled in the queue, its return not known posted", got, err)
	}
}
