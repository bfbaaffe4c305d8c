package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A starter that read a payout as unstarted, then found its first attempt's
// workflow already started (another replica started it), marks it started
// only after its whole batch. If the attempt failed and finance retried it
// meanwhile, that late mark must not cover the retry: attempt 2 would never
// get a workflow and the payout would stay created, its net in available.
func TestStaleStartDoesNotMarkARetry(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
		values ('po-r1', 'p-r', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'created', 'bank', '', '', false, 1, now(), now())`); err != nil {
		t.Fatal(err)
	}
	stale, err := s.Unstarted(ctx) // replica B reads, then starts its batch
	if err != nil || !slices.Equal(stale, []app.PayoutAttempt{{ID: "po-r1", Attempt: 1}}) {
		t.Fatalf("unstarted %v (%v); want po-r1 attempt 1", stale, err)
	}
	fresh, err := s.Unstarted(ctx) // replica A starts attempt 1's workflow
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetWorkflowStarted(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if left, err := s.Unstarted(ctx); err != nil || len(left) != 0 {
		t.Fatalf("after attempt 1 was marked started, unstarted is %v (%v); want none", left, err)
	}
	now := time.Now()
	if err := s.Update(ctx, func(tx app.Tx) error { // attempt 1 fails at once
		p, err := tx.Lock(ctx, "po-r1")
		if err != nil {
			return err
		}
		p.FailureCode, p.FailureMessage = domain.FailUnsupported, "rail does not take CNY"
		return tx.Move(ctx, &p, domain.StatusFailed, "unsupported", now)
	}); err != nil {
		t.Fatal(err)
	}
	if err := (&app.Payouts{Store: s, Clock: clock.NewManual(now.Add(time.Minute))}).Retry(ctx, "po-r1", "rail fixed"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWorkflowStarted(ctx, stale); err != nil { // B records its batch late
		t.Fatal(err)
	}
	got, err := s.Unstarted(ctx)
	if err != nil || !slices.Equal(got, []app.PayoutAttempt{{ID: "po-r1", Attempt: 2}}) {
		t.Fatalf("after a late mark of attempt 1, unstarted is %v (%v); want po-r1 attempt 2 (it has no workflow)", got, err)
	}
	if err := s.SetWorkflowStarted(ctx, got); err != nil { // the next pass starts attempt 2
		t.Fatal(err)
	}
	if left, err := s.Unstarted(ctx); err != nil || len(left) != 0 {
		t.Fatalf("after attempt 2 was marked started, unstarted is %v (%v); want none", left, err)
	}
}
