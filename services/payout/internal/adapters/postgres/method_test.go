package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A provider's payout method cannot change while one of its payouts is
// being submitted (past the gate, its rail's answer unknown): a retry
// reads the method again and submits the same reference to that method's
// rail, which knew nothing of the first, so the provider could be paid on
// two rails. Before the gate and once submitted it changes as before.
func TestMethodFixedWhileAPayoutIsSubmitted(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	put := func(typ string) error {
		m := domain.Method{Type: typ, AccountName: "Li Lei", AlipayID: "13800000001", WechatOpenID: "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"}
		_, _, _, err := s.PutMethod(ctx, domain.ProviderMethod{ProviderID: "p-m1", Method: m, UpdatedAt: time.Now()})
		return err
	}
	if err := put(domain.MethodWechat); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
		values ('po-m1', 'p-m1', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'created', 'wechat', '', '', true, 1, now(), now())`); err != nil {
		t.Fatal(err)
	}
	if err := put(domain.MethodAlipay); err != nil {
		t.Fatalf("before the gate: %v", err)
	}
	if _, err := pool.Exec(ctx, `update payout.payouts set submitting = true where payout_id = 'po-m1'`); err != nil {
		t.Fatal(err)
	}
	if err := put(domain.MethodWechat); !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("while po-m1 is submitted: %v, want a precondition error", err)
	}
	var typ string
	if err := pool.QueryRow(ctx, `select type from payout.methods where provider_id = 'p-m1'`).Scan(&typ); err != nil || typ != domain.MethodAlipay {
		t.Fatalf("method %q (%v), want alipay kept", typ, err)
	}
	// The same method again (a client's retry of the PUT that succeeded):
	// answered, nothing changed: no history row, updated_at kept (which
	// :retry reads as "changed since it failed"). It was refused here.
	state := func() (n int, at time.Time) {
		t.Helper()
		if err := pool.QueryRow(ctx, `select (select count(*) from payout.method_history where provider_id = 'p-m1'),
			(select updated_at from payout.methods where provider_id = 'p-m1')`).Scan(&n, &at); err != nil {
			t.Fatal(err)
		}
		return n, at
	}
	n0, at0 := state()
	if err := put(domain.MethodAlipay); err != nil {
		t.Fatalf("the stored method again while po-m1 is submitted: %v", err)
	}
	if n, at := state(); n != n0 || !at.Equal(at0) {
		t.Fatalf("the same method again: %d history rows (was %d), updated_at %v (was %v); want nothing changed", n, n0, at, at0)
	}
	if _, err := pool.Exec(ctx, `update payout.payouts set status = 'submitted' where payout_id = 'po-m1'`); err != nil {
		t.Fatal(err)
	}
	if err := put(domain.MethodWechat); err != nil {
		t.Fatalf("once submitted: %v", err)
	}
}

// A payout already submitted goes to the account it was submitted with (a
// bank transfer copies it when queued): a change of the method does not
// reach it. The change is not refused; its answer lists those payouts and
// each one's history notes that it still goes to the old method. The PUT
// answered the new method only, and the payout's history said nothing, as
// the queued transfer was paid to the old account.
func TestMethodChangeNamesPayoutsInFlightToTheOldMethod(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	put := func(account string) ([]string, error) {
		m := domain.Method{Type: domain.MethodBank, AccountName: "Li Lei", AccountNumber: account, BankCode: "ICBKCNBJ"}
		_, _, inFlight, err := s.PutMethod(ctx, domain.ProviderMethod{ProviderID: "p-s", Method: m, UpdatedAt: time.Now()})
		return inFlight, err
	}
	if _, err := put("6222000011110001"); err != nil {
		t.Fatal(err)
	}
	sentPayout(t, pool, "po-queued", "cyc-20260201", "bank", "queued")
	sentPayout(t, pool, "po-moving", "cyc-20260115", "bank", "accepted")
	if _, err := pool.Exec(ctx, `update payout.payouts set method_summary = 'bank ****0001'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `update payout.payouts set status = 'in_transit' where payout_id = 'po-moving'`); err != nil {
		t.Fatal(err)
	}
	inFlight, err := put("6222000011110002")
	if err != nil || !slices.Equal(inFlight, []string{"po-moving", "po-queued"}) {
		t.Fatalf("method change answered in flight %v (%v); want po-moving and po-queued", inFlight, err)
	}
	want := "payout method set to bank ****0002: this payout, already submitted, still goes to bank ****0001"
	for _, id := range inFlight {
		if _, notes := reasonAndHistory(t, pool, id); !slices.Equal(notes, []string{want}) {
			t.Errorf("%s history %q, want %q", id, notes, want)
		}
	}
	// The same method again changes nothing: nothing to name.
	if inFlight, err := put("6222000011110002"); err != nil || len(inFlight) != 0 {
		t.Fatalf("same method again: in flight %v (%v)", inFlight, err)
	}
}
