package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A hold locks the provider's payouts before it reads them, so a gate that
// holds a payout's lock (it read the holds, and marks the payout
// submitting) is waited for and its payout answered in flight, not waiting:
// the hold was answered as applying to a payout the gate had just passed.
func TestHoldWaitsForTheGate(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	for i, id := range []string{"po-h1", "po-h2"} {
		if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
				method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
			values ($1, 'p-h', $2, 'CNY', 1000, 250, 150, 600, 'action_required', 'bank', '', '', true, 1, now(), now())`, id, []string{"cyc-20260101", "cyc-20260215"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	gate, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Exec(ctx, `select 1 from payout.payouts where payout_id = 'po-h1' for update`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		waiting, inFlight []string
		err               error
	}
	held := make(chan answer, 1)
	go func() {
		w, f, err := s.PutHold(ctx, "p-h", "dispute", time.Now())
		held <- answer{w, f, err}
	}()
	time.Sleep(300 * time.Millisecond) // the hold waits on po-h1's lock meanwhile
	if _, err := gate.Exec(ctx, `update payout.payouts set status = 'created', submitting = true where payout_id = 'po-h1'`); err != nil {
		t.Fatal(err)
	}
	if err := gate.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-held
	if a.err != nil || !slices.Equal(a.waiting, []string{"po-h2"}) || !slices.Equal(a.inFlight, []string{"po-h1"}) {
		t.Fatalf("hold answered waiting %v, in flight %v (%v); want po-h2 waiting, po-h1 in flight", a.waiting, a.inFlight, a.err)
	}
}

// sentPayout inserts a payout of p-s submitted to its rail under its own id
// as reference, and, for a bank-file one, its transfer in state.
func sentPayout(t *testing.T, pool *pgxpool.Pool, id, cycle, method, transfer string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			status_reason, method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
		values ($1, 'p-s', $2, 'CNY', 1000, 250, 150, 600, 'submitted', 'submitted', $3, '', $1, true, 1, now(), now())`, id, cycle, method); err != nil {
		t.Fatal(err)
	}
	if transfer == "" {
		return
	}
	if _, err := pool.Exec(ctx, `insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name,
			creditor_account, creditor_agent, state, queued_at, updated_at)
		values ($1, $1, 'p-s', 'CNY', 600, 'Provider S', '6222000011110001', 'ICBKCNBJ', $2, now(), now())`, id, transfer); err != nil {
		t.Fatal(err)
	}
}

func reasonAndHistory(t *testing.T, pool *pgxpool.Pool, id string) (string, []string) {
	t.Helper()
	var reason string
	var notes []string
	if err := pool.QueryRow(context.Background(), `select status_reason, (select coalesce(array_agg(note order by seq), '{}') from payout.status_history h
		where h.payout_id = p.payout_id) from payout.payouts p where payout_id = $1`, id).Scan(&reason, &notes); err != nil {
		t.Fatal(err)
	}
	return reason, notes
}

// A hold answers the provider's payouts already sent (to Alipay, or in a
// bank file already cut) in flight: it cannot stop them. A bank transfer
// still queued for its cutoff is held (the cut leaves it out), and its
// payout says so; released, it says it goes in the next bank file. The
// hold answered payouts_in_flight 0 while a submitted payout was paid.
func TestHoldAnswersSubmittedPayoutsInFlight(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	sentPayout(t, pool, "po-alipay", "cyc-20260101", "alipay", "")
	sentPayout(t, pool, "po-batched", "cyc-20260115", "bank", "batched")
	sentPayout(t, pool, "po-queued", "cyc-20260201", "bank", "queued")
	waiting, inFlight, err := s.PutHold(ctx, "p-s", "fraud dispute", time.Now())
	if err != nil || !slices.Equal(waiting, []string{"po-queued"}) || !slices.Equal(inFlight, []string{"po-alipay", "po-batched"}) {
		t.Fatalf("hold answered waiting %v, in flight %v (%v); want po-queued waiting, po-alipay and po-batched in flight", waiting, inFlight, err)
	}
	reason, notes := reasonAndHistory(t, pool, "po-queued")
	held := "held by finance: fraud dispute (its bank transfer stays queued, out of the bank file, until the hold is released)"
	if reason != held || !slices.Equal(notes, []string{held}) {
		t.Fatalf("held queued payout reads %q, history %q", reason, notes)
	}
	if reason, notes := reasonAndHistory(t, pool, "po-batched"); reason != "submitted" || len(notes) != 0 {
		t.Fatalf("batched payout reads %q, history %q: the hold does not stop it", reason, notes)
	}
	// The same hold again says nothing new.
	if _, _, err := s.PutHold(ctx, "p-s", "fraud dispute", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, notes := reasonAndHistory(t, pool, "po-queued"); len(notes) != 1 {
		t.Fatalf("hold placed again: history %q", notes)
	}
	waiting, inFlight, err = s.PutHold(ctx, "p-s", "", time.Now())
	if err != nil || !slices.Equal(waiting, []string{"po-queued"}) || !slices.Equal(inFlight, []string{"po-alipay", "po-batched"}) {
		t.Fatalf("release answered waiting %v, in flight %v (%v)", waiting, inFlight, err)
	}
	reason, notes = reasonAndHistory(t, pool, "po-queued")
	released := "hold released by finance: its queued bank transfer goes in the next bank file"
	if reason != released || !slices.Equal(notes, []string{held, released}) {
		t.Fatalf("released queued payout reads %q, history %q", reason, notes)
	}
}

// A hold placed while a bank batch is being cut waits for the cut (its
// batch lock): the transfer the cut batched is answered in flight, not
// held, since the bank file carries it.
func TestHoldWaitsForTheCut(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	sentPayout(t, pool, "po-cut", "cyc-20260101", "bank", "queued")
	cut, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Rollback(ctx) // committed below; a failed test's is rolled back
	if _, err := cut.Exec(ctx, `select pg_advisory_xact_lock($1)`, domain.BankBatchLockKey); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		waiting, inFlight []string
		err               error
	}
	held := make(chan answer, 1)
	go func() {
		w, f, err := s.PutHold(ctx, "p-s", "dispute", time.Now())
		held <- answer{w, f, err}
	}()
	time.Sleep(300 * time.Millisecond) // the hold waits on the batch lock meanwhile
	if _, err := cut.Exec(ctx, `update payout.bank_transfers set state = 'batched' where reference = 'po-cut'`); err != nil {
		t.Fatal(err)
	}
	if err := cut.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-held
	if a.err != nil || len(a.waiting) != 0 || !slices.Equal(a.inFlight, []string{"po-cut"}) {
		t.Fatalf("hold answered waiting %v, in flight %v (%v); want po-cut in flight", a.waiting, a.inFlight, a.err)
	}
}
