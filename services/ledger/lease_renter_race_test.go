package ledger_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A renter's credit limit that reaches the ledger while lease control
// evaluates the renter's wallet resumes it at once. Both ran in READ
// COMMITTED transactions and neither saw the other: the evaluation read
// ledger.renters before the limit committed (no limit: nothing to spend,
// stopped), and the renters' read model looked for the renter's lease
// control rows before the evaluation committed (none: nothing to evaluate
// again). The renter stayed stopped with its whole limit to spend until the
// sweep, up to a minute later (the e2e TestRenterCloseThroughREST waited
// over 20 s for "r-1 refunded to 0, 500 of credit, ok").
func TestLeaseControlSeesACreditLimitArrivingMidEvaluation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil) // no stream: the test drives both transactions
	lc := &app.LeaseControl{Clock: clock.System{}, Log: slog.New(slog.DiscardHandler),
		Wallets: &postgres.Wallets{Pool: f.pool}, Store: postgres.LeaseStore{Pool: f.pool}}
	state := func() string {
		var s string
		if err := f.pool.QueryRow(f.ctx, `select state from ledger.lease_control where renter_id = 'r-race' and currency = 'CNY'`).Scan(&s); err != nil {
			return ""
		}
		return s
	}
	// 5.00 charged, no deposit: without its credit limit r-race has nothing to spend.
	if _, err := f.app.CreateTransaction(f.ctx, transfer("use-race", "renter:r-race:wallet", "provider:p-1:pending:cyc-20261112", "5.00", "CNY")); err != nil {
		t.Fatal(err)
	}

	// The evaluation of the charge's message, held open before its commit.
	evaluated, release := make(chan struct{}), make(chan struct{})
	evalDone := make(chan error, 1)
	go func() {
		evalDone <- lc.Store.WithLeaseTx(f.ctx, func(tx app.LeaseControlTx) error {
			if err := lc.Evaluate(f.ctx, tx, []domain.WalletKey{{RenterID: "r-race", Currency: "CNY"}}); err != nil {
				return err
			}
			close(evaluated)
			<-release
			return nil
		})
	}()
	select {
	case <-evaluated:
	case err := <-evalDone:
		t.Fatalf("evaluation ended before it was held: %v", err)
	}

	// The renter's credit limit of 100.00 arrives meanwhile.
	renters := &app.Renters{Store: postgres.RenterStore(f.pool, lc, false), Consumer: app.RentersConsumer}
	applyDone := make(chan error, 1)
	go func() {
		applyDone <- renters.Apply(f.ctx, []app.RenterUpdate{{ID: "party-renter-r-race-v1", Keep: true,
			Row: domain.RenterLimit{RenterID: "r-race", Currency: "CNY", CreditLimit: dec("100"), Version: 1, UpdatedAt: time.Now()}}})
	}()
	// It either commits past the open evaluation (what it did) or waits for
	// it on a lock; only then is the evaluation let commit.
	var applied bool
	testkit.Eventually(t, 20*time.Second, func() bool {
		select {
		case err := <-applyDone:
			if err != nil {
				t.Fatalf("renters applied: %v", err)
			}
			applied = true
			return true
		default:
		}
		var waiting int
		if err := f.pool.QueryRow(f.ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	}, "the renters' update committed or waiting for the evaluation")
	close(release)
	if err := <-evalDone; err != nil {
		t.Fatal(err)
	}
	if !applied {
		if err := <-applyDone; err != nil {
			t.Fatalf("renters applied: %v", err)
		}
	}
	if s := state(); s != "ok" {
		t.Fatalf("r-race's lease control %q once both committed, want ok: its credit limit of 100.00 leaves 95.00 to spend "+
			"(the renters' update committed while the evaluation was open: %v)", s, applied)
	}
}
