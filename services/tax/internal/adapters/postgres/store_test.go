package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// A caller whose context ends while its statements wait in a shared batch
// is answered at once, and its statements still run with the group's
// (pg.Batches.Do): Recorded must not write what it answers from the
// batch's callbacks. It did (its results were the callbacks' variables), a
// race `make test-race` reports.
func TestRecordedWithAnEndedContext(t *testing.T) {
	t.Parallel()
	s := NewStore(testkit.NewMigratedPool(t, Schema, migrations.For(Schema)))
	ctx := context.Background()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for i := range 20 {
		leader := make(chan error, 1)
		go func() {
			_, _, _, _, err := s.Recorded(ctx, fmt.Sprintf("lead-%d", i), "p-1")
			leader <- err
		}()
		time.Sleep(2 * time.Millisecond) // the leader's group lingers: this one joins it
		_, found, p, ok, err := s.Recorded(ended, fmt.Sprintf("ended-%d", i), "p-2")
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Recorded with an ended context: %v", err)
		}
		if err != nil && (found || ok || p.ProviderID != "") {
			t.Fatalf("Recorded answered %v with found %v, profile %+v (%v)", err, found, p, ok)
		}
		if err := <-leader; err != nil {
			t.Fatalf("the leader's Recorded: %v", err)
		}
	}
}

// Two remittance runs side by side (the schedule and finance's POST, a
// client's retry) mark the same page of withholdings posted: they updated
// them in the orders of two Go maps, and deadlocked (40P01, one run a 500).
func TestMarkPostedSideBySide(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, Schema, migrations.For(Schema))
	s := NewStore(pool)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `insert into tax.withholdings (withholding_id, idempotency_key, provider_id, cycle_id, currency, gross,
			commission, taxable_base, tax_withheld, net, tax_profile, jurisdiction, rule_set, rule_version, certificate_id)
		select 'wh-' || i, 'k-' || i, 'p-' || i, 'cyc-20260101', 'CNY', 100, 25, 75, 15, 60, 'individual', 'CN', 'flat20', '1', 'cert-' || i
		from generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `analyze tax.withholdings`); err != nil {
		t.Fatal(err)
	}
	f, unlock, err := s.LockRuns(ctx) // a run's writes take the fence of its lock
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	for round := range 30 {
		page := map[string]string{}
		for i := range 100 {
			page[fmt.Sprintf("wh-%d", round*100+i+1)] = fmt.Sprintf("tx-%d-%d", round, i)
		}
		errs := make(chan error, 4)
		for range 4 {
			go func() { errs <- s.MarkPosted(ctx, f, page) }()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
