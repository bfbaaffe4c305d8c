package postgres

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A payout the strict router refuses at once (a WeChat method, no WeChat
// rail configured) is failed in the store as Submit recorded it: the
// refusal first, under the payout's lock (created, its history saying the
// amount goes back), then failed with the reference its rail refused, the
// net posted back once.
func TestSubmitRefusedAtOnceRecordsTheStopFirst(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	led := &keptLedger{}
	a := &app.Payouts{Store: s, Ledger: led, Rail: app.Router{Default: refusedSandbox{}, Strict: true}, Clock: clock.System{}, Log: slog.New(slog.DiscardHandler)}
	if _, err := pool.Exec(ctx, `insert into payout.methods (provider_id, type, account_name, wechat_openid, updated_at)
		values ('p-s', 'wechat', 'Provider S', 'oUpF8uMuAJO_M2pxb1Q9zNjW0001', now() - interval '1 day')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			status_reason, method, method_summary, rail_reference, workflow_started, version, created_at, updated_at, submitting, submit_rail)
		values ('po-w', 'p-s', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'created', 'ready', 'wechat', '', '', true, 1, now(), now(), true, 'none')`); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the activity's retry changes nothing more
		if got, err := a.Submit(ctx, "po-w"); err != nil || got != domain.StatusFailed {
			t.Fatalf("Submit: %q, %v; want failed", got, err)
		}
	}
	var status, code, ref string
	var submitting bool
	if err := pool.QueryRow(ctx, `select status, failure_code, rail_reference, submitting from payout.payouts where payout_id = 'po-w'`).
		Scan(&status, &code, &ref, &submitting); err != nil {
		t.Fatal(err)
	}
	_, notes := reasonAndHistory(t, pool, "po-w")
	var statuses []string
	if err := pool.QueryRow(ctx, `select array_agg(status order by seq) from payout.status_history where payout_id = 'po-w'`).Scan(&statuses); err != nil {
		t.Fatal(err)
	}
	if status != domain.StatusFailed || code != domain.FailUnsupported || ref != domain.RailReference("po-w", 1) || submitting ||
		!slices.Equal(statuses, []string{domain.StatusCreated, domain.StatusFailed}) {
		t.Fatalf("payout %s %q, reference %q, submitting %v, history %q %q; want failed %s under its reference, the stop then the failure",
			status, code, ref, submitting, statuses, notes, domain.FailUnsupported)
	}
	want := []string{"payout-po-w-1-submitted provider:p-s:available → provider:p-s:in_transit 600",
		"payout-po-w-1-failed provider:p-s:in_transit → provider:p-s:available 600"}
	if !slices.Equal(led.keys, want) {
		t.Fatalf("posted %q; want %q", led.keys, want)
	}
}

// refusedSandbox is a default rail that knows no reference and must be
// given none.
type refusedSandbox struct{}

func (refusedSandbox) Name() string { return "sandbox" }
func (refusedSandbox) Submit(context.Context, app.Transfer) (app.RailStatus, error) {
	panic("the sandbox was given a payout the strict router refuses")
}
func (refusedSandbox) Query(context.Context, string) (app.RailStatus, error) {
	return app.RailStatus{}, app.ErrUnknownReference
}
