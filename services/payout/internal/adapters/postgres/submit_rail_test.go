package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// The rail the gate hands an attempt to is kept with its mark (both ways
// the gate marks: SetSubmitting, Move to created) and read back; a mark
// that does not name a rail (a replica of an earlier version marking a
// retried attempt) leaves none, never the earlier attempt's rail, which
// asked alone would answer "unknown" for a reference another rail holds.
func TestSubmitRailKeptWithTheMark(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
		values ('po-r1', 'p-r1', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'created', 'alipay', '', '', true, 1, now(), now()),
			('po-r2', 'p-r2', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'action_required', 'bank', '', '', true, 1, now(), now())`); err != nil {
		t.Fatal(err)
	}
	rail := func(id string) string {
		t.Helper()
		p, err := s.GetPayout(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return p.SubmitRail
	}
	if err := s.Update(ctx, func(tx app.Tx) error { return tx.SetSubmitting(ctx, "po-r1", domain.MethodAlipay, "alipay") }); err != nil {
		t.Fatal(err)
	}
	if got := rail("po-r1"); got != "alipay" {
		t.Fatalf("po-r1 marked for alipay: rail %q", got)
	}
	if err := s.Update(ctx, func(tx app.Tx) error {
		p, err := tx.Lock(ctx, "po-r2")
		if err != nil {
			return err
		}
		p.Submitting, p.SubmitRail = true, "bank-file"
		return tx.Move(ctx, &p, domain.StatusCreated, "ready", time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	if got := rail("po-r2"); got != "bank-file" {
		t.Fatalf("po-r2 moved to created for bank-file: rail %q", got)
	}
	// An earlier version unmarks and marks again without naming a rail.
	for _, q := range []string{`update payout.payouts set submitting = false, attempt = 2 where payout_id = 'po-r1'`,
		`update payout.payouts set submitting = true where payout_id = 'po-r1'`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if got := rail("po-r1"); got != "" {
		t.Fatalf("po-r1 marked again by an earlier version: rail %q, want none (every rail asked)", got)
	}
}
