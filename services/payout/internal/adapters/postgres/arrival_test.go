package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// The rail's new arrival date is kept on the payout, its status unchanged,
// with a history row of that status; updated_at stays the last status
// change (the in-flight age counts from it). That row is no submission: a
// method changed after the payout was submitted, before its rail moved the
// date, is still a change for :retry (it was measured from the latest
// "submitted" row, the date's).
func TestArrivalDateKeptWithoutAStatusChange(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	base := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
	day := func(d string) *time.Time {
		v, err := time.Parse(time.DateOnly, d)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	put := func(acct string, at time.Time) {
		t.Helper()
		m := domain.Method{Type: domain.MethodAlipay, AccountName: "Li Lei", AlipayID: acct}
		if _, _, _, err := s.PutMethod(ctx, domain.ProviderMethod{ProviderID: "p-a1", Method: m, UpdatedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	put("13800000001", base.Add(-time.Hour))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
		values ('po-a1', 'p-a1', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'created', 'alipay', '', '', true, 1, $1, $1)`, base.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	inTx := func(fn func(tx pgx.Tx) error) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, fn); err != nil {
			t.Fatal(err)
		}
	}
	inTx(func(tx pgx.Tx) error {
		p, err := s.Lock(ctx, tx, "po-a1")
		if err != nil {
			return err
		}
		p.RailRef, p.ExpectedArrival = "po-a1-1", day("2026-12-01")
		return s.Move(ctx, tx, &p, domain.StatusSubmitted, "submitted to bank-file as po-a1-1", base)
	})
	put("13800000002", base.Add(time.Hour)) // corrected while submitted
	inTx(func(tx pgx.Tx) error {
		p, err := s.Lock(ctx, tx, "po-a1")
		if err != nil {
			return err
		}
		p.ExpectedArrival = day("2026-12-03")
		return s.SetArrival(ctx, tx, &p, "bank-file: expected arrival 2026-12-03 (was 2026-12-01)", base.Add(2*time.Hour))
	})
	p, err := s.GetPayout(ctx, "po-a1")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != domain.StatusSubmitted || p.ExpectedArrival == nil || !p.ExpectedArrival.Equal(*day("2026-12-03")) || !p.UpdatedAt.Equal(base) {
		t.Fatalf("po-a1 %s, expected arrival %v, updated_at %v; want submitted, 2026-12-03, %v", p.Status, p.ExpectedArrival, p.UpdatedAt, base)
	}
	if last := p.History[len(p.History)-1]; last.Status != domain.StatusSubmitted || !strings.Contains(last.Note, "2026-12-03") {
		t.Fatalf("last history %+v; want the new date, submitted", last)
	}
	inTx(func(tx pgx.Tx) error {
		changed, err := s.MethodChangedSince(ctx, tx, "p-a1", "po-a1", p.UpdatedAt)
		if err == nil && !changed {
			t.Error("a method changed after the submission, before the rail's new date: not a change for :retry")
		}
		return err
	})
}
