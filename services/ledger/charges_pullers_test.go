package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/testkit"
)

// A batch of charges waiting on a hot balance row does not hold up the
// next one: the consumer posts another fetched batch beside it (and the
// waiting one once the row is free).
func TestChargesPostedBesideAWaitingBatch(t *testing.T) {
	t.Parallel()
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	f.deposit(t, "r-hot", "10", "USD", "top")
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- f.svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	const cyc = "cyc-20261112"
	publish := chargesPublisher(t, f, js)
	// Someone holds the hot wallet's balance row.
	holder, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(f.ctx, `select 1 from ledger.balances where account = 'renter:r-hot:wallet' for update`); err != nil {
		t.Fatal(err)
	}
	publish("hot-1", charge("c-hot", "r-hot", "p-1", cyc, "1.00"))
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.count(t, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`) > 0
	}, "the hot batch never waited on the held row")
	publish("free-1", charge("c-free", "r-free", "p-2", cyc, "2.00"))
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.balance(t, "provider:p-2:pending:"+cyc, "USD").Equal(dec("2.00"))
	}, "a batch beside the waiting one was not posted")
	if err := holder.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.balance(t, "provider:p-1:pending:"+cyc, "USD").Equal(dec("1.00"))
	}, "the waiting batch was not posted once the row was free")
	wantBalance(t, f, "renter:r-hot:wallet", "USD", "9.00")
}
