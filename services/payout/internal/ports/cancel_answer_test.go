package ports

import (
	"context"
	"testing"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// leaveAfterCommit is a store whose caller leaves (leave) as soon as an
// update has committed.
type leaveAfterCommit struct {
	app.Store
	leave context.CancelFunc
}

func (s leaveAfterCommit) Update(ctx context.Context, fn func(app.Tx) error) error {
	err := s.Store.Update(ctx, fn)
	s.leave()
	return err
}

// A cancel that committed is answered as done (the payout canceled) even
// when its caller left just after the commit: the answer was read with the
// caller's context, so the call answered Canceled, and the audit log
// (which records the answer's code) read as if nothing was changed.
func TestCancelPayoutAnsweredOnceCommitted(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, postgres.Schema, migrations.For(postgres.Schema))
	id, err := domain.PayoutID("p-1", "cyc-20260101", "CNY")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, created_at, updated_at) values ($1, 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', now(), now())`, id); err != nil {
		t.Fatal(err)
	}
	ctx, leave := context.WithCancel(auth.WithPrincipal(context.Background(), auth.Principal{Role: auth.RoleFinance}))
	defer leave()
	store := &postgres.Store{Pool: pool}
	srv := &Server{Store: store, Epoch: "1", Clock: clock.System{},
		App: &app.Payouts{Store: leaveAfterCommit{Store: store, leave: leave}, Clock: clock.System{}}}
	resp, err := srv.CancelPayout(ctx, &payoutv1.CancelPayoutRequest{PayoutId: id, Reason: "provider closed"})
	if ctx.Err() == nil {
		t.Fatal("guard: the caller did not leave")
	}
	if err != nil || resp.GetPayout().GetStatus() != string(domain.StatusCanceled) {
		t.Fatalf("cancel committed, its caller gone: %v, %v; want the payout canceled", resp, err)
	}
}
