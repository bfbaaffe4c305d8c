package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A KYC rejected by finance locks the provider's payouts before it writes
// the verdict, as a hold does (TestHoldWaitsForTheGate): a gate that holds
// a payout's lock (it read KYC verified, and marks the payout submitting)
// is waited for and its payout answered in flight, not waiting. The KYC
// was a plain upsert: the payout the gate had just passed went to its
// rail, the rejection answered 200 without a word about it.
func TestKYCRejectedWaitsForTheGate(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	for i, id := range []string{"po-k1", "po-k2"} {
		if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
				method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
			values ($1, 'p-k', $2, 'CNY', 1000, 250, 150, 600, 'action_required', 'bank', '', '', true, 1, now(), now())`, id, []string{"cyc-20260101", "cyc-20260215"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	gate, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Rollback(ctx) // committed below; a failed test's is rolled back
	if _, err := gate.Exec(ctx, `select 1 from payout.payouts where payout_id = 'po-k1' for update`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		waiting, inFlight []string
		err               error
	}
	rejected := make(chan answer, 1)
	go func() {
		w, f, err := s.PutKYC(ctx, "p-k", domain.KYCRejected, "sanctions hit", false, time.Now())
		rejected <- answer{w, f, err}
	}()
	time.Sleep(300 * time.Millisecond) // the rejection waits on po-k1's lock meanwhile
	if _, err := gate.Exec(ctx, `update payout.payouts set status = 'created', submitting = true where payout_id = 'po-k1'`); err != nil {
		t.Fatal(err)
	}
	if err := gate.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-rejected
	if a.err != nil || !slices.Equal(a.waiting, []string{"po-k2"}) || !slices.Equal(a.inFlight, []string{"po-k1"}) {
		t.Fatalf("KYC rejection answered waiting %v, in flight %v (%v); want po-k2 waiting, po-k1 in flight", a.waiting, a.inFlight, a.err)
	}
}

// A KYC rejected answers the provider's payouts already sent (to Alipay,
// or in a bank file already cut) in flight, and the one whose bank
// transfer is still queued for its cutoff waiting (the cut leaves it out),
// its payout saying so; the verdict changed by finance, it says it goes in
// the next bank file.
func TestKYCRejectedAnswersSubmittedPayouts(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	sentPayout(t, pool, "po-alipay", "cyc-20260101", "alipay", "")
	sentPayout(t, pool, "po-batched", "cyc-20260115", "bank", "batched")
	sentPayout(t, pool, "po-queued", "cyc-20260201", "bank", "queued")
	waiting, inFlight, err := s.PutKYC(ctx, "p-s", domain.KYCRejected, "fraud", false, time.Now())
	if err != nil || !slices.Equal(waiting, []string{"po-queued"}) || !slices.Equal(inFlight, []string{"po-alipay", "po-batched"}) {
		t.Fatalf("KYC rejection answered waiting %v, in flight %v (%v); want po-queued waiting, po-alipay and po-batched in flight", waiting, inFlight, err)
	}
	reason, notes := reasonAndHistory(t, pool, "po-queued")
	if reason != domain.KYCRejectedQueuedNote || !slices.Equal(notes, []string{domain.KYCRejectedQueuedNote}) {
		t.Fatalf("queued payout of a rejected KYC reads %q, history %q", reason, notes)
	}
	if reason, notes := reasonAndHistory(t, pool, "po-batched"); reason != "submitted" || len(notes) != 0 {
		t.Fatalf("batched payout reads %q, history %q: the rejection does not stop it", reason, notes)
	}
	// Rejected again: nothing new in its history.
	if _, _, err := s.PutKYC(ctx, "p-s", domain.KYCRejected, "fraud", false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, notes := reasonAndHistory(t, pool, "po-queued"); len(notes) != 1 {
		t.Fatalf("rejected again: history %q", notes)
	}
	waiting, _, err = s.PutKYC(ctx, "p-s", domain.KYCVerified, "cleared on appeal", false, time.Now())
	if err != nil || !slices.Equal(waiting, []string{"po-queued"}) {
		t.Fatalf("verified again answered waiting %v (%v); want po-queued", waiting, err)
	}
	reason, notes = reasonAndHistory(t, pool, "po-queued")
	if reason != domain.KYCReleasedQueuedNote || !slices.Equal(notes, []string{domain.KYCRejectedQueuedNote, domain.KYCReleasedQueuedNote}) {
		t.Fatalf("queued payout of a KYC verified again reads %q, history %q", reason, notes)
	}
}

// A provider may not set its own KYC over finance's rejection: its
// "pending" wiped the verdict, and its payouts went to the gate again.
// Finance can still change it.
func TestProviderCannotUndoARejectedKYC(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	if _, _, err := s.PutKYC(ctx, "p-r", domain.KYCPending, "passport", true, time.Now()); err != nil {
		t.Fatalf("provider's first KYC: %v", err)
	}
	if _, _, err := s.PutKYC(ctx, "p-r", domain.KYCRejected, "sanctions hit", false, time.Now()); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.PutKYC(ctx, "p-r", domain.KYCPending, "new passport", true, time.Now())
	if !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("provider's pending over finance's rejection: %v; want a precondition failure", err)
	}
	status := func() string {
		t.Helper()
		var st string
		if err := pool.QueryRow(ctx, `select status || ' ' || reference from payout.kyc where provider_id = 'p-r'`).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if got := status(); got != "rejected sanctions hit" {
		t.Fatalf("KYC reads %q after the provider's refused reset; want finance's verdict", got)
	}
	if _, _, err := s.PutKYC(ctx, "p-r", domain.KYCPending, "re-review", false, time.Now()); err != nil {
		t.Fatalf("finance's pending over its rejection: %v", err)
	}
	if got := status(); got != "pending re-review" {
		t.Fatalf("KYC reads %q; want finance's pending", got)
	}
}

// A payout being submitted when its provider's KYC was rejected (answered
// in flight) whose bank transfer lands in the queue is noted by its
// workflow (HoldQueued) as kept out by the rejection, as one queued before
// it (PutKYC): the cut left it out without a word.
func TestHoldQueuedNotesARejectedKYC(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	sentPayout(t, pool, "po-q", "cyc-20260101", "bank", "queued")
	if _, err := pool.Exec(ctx, `insert into payout.kyc (provider_id, status, reference, updated_at, rejected_at) values ('p-s', 'rejected', 'fraud', now(), now())`); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx app.Tx) error {
		if err := tx.LockBankQueue(ctx); err != nil {
			return err
		}
		p, err := tx.Lock(ctx, "po-q")
		if err != nil {
			return err
		}
		return tx.HoldQueued(ctx, &p, time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	if reason, notes := reasonAndHistory(t, pool, "po-q"); reason != domain.KYCRejectedQueuedNote || !slices.Equal(notes, []string{domain.KYCRejectedQueuedNote}) {
		t.Fatalf("queued payout of a rejected KYC reads %q, history %q", reason, notes)
	}
}

// A hold released while the provider's KYC stays rejected does not tell
// the queued payout it goes in the next bank file: the cut still leaves
// it out, and its reason says why.
func TestHoldReleasedUnderARejectedKYC(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	sentPayout(t, pool, "po-q", "cyc-20260101", "bank", "queued")
	if _, _, err := s.PutKYC(ctx, "p-s", domain.KYCRejected, "sanctions hit", false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutHold(ctx, "p-s", "fraud dispute", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutHold(ctx, "p-s", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	held := domain.HeldQueuedNote("fraud dispute")
	reason, notes := reasonAndHistory(t, pool, "po-q")
	if want := []string{domain.KYCRejectedQueuedNote, held, domain.KYCRejectedQueuedNote}; reason != domain.KYCRejectedQueuedNote || !slices.Equal(notes, want) {
		t.Fatalf("hold released under a rejected KYC: reads %q, history %q; want %q", reason, notes, want)
	}
}
