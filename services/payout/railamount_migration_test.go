package payout

import (
	"context"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A payout flagged rail_amount_mismatch by a version before payout/0022
// kept the rail's amount only in its failure_message: the migration reads
// it back, so finance's resolution of that payout is checked against it
// like one flagged today. Without it the payout could never be resolved
// (never flagged, a 409), and stayed submitted for ever.
func TestMigrationKeepsTheRailAmountOfAPayoutFlaggedBefore(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	ctx := context.Background()
	if err := pg.Migrate(ctx, pool, "payout", migrationsBefore(t, migrations.For("payout"), "0022_")); err != nil {
		t.Fatal(err)
	}
	msg := domain.RailAmountMismatchMessage("wechatpay", "po-1-2", decimal.RequireFromString("1320.5"), "CNY",
		decimal.RequireFromString("300"), "CNY")
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net,
			status, failure_code, failure_message, attempt, rail_reference) values
		('po-1', 'p-1', 'cyc-20260101', 'CNY', 400, 60, 40, 300, 'submitted', 'rail_amount_mismatch', $1, 2, 'po-1-2'),
		('po-2', 'p-2', 'cyc-20260101', 'CNY', 400, 60, 40, 300, 'in_transit', '', '', 1, 'po-2-1')`, msg); err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(ctx, pool, "payout", migrations.For("payout")); err != nil {
		t.Fatal(err)
	}
	st := &postgres.Store{Pool: pool}
	f, err := st.RailAmountFlag(ctx, "po-1", 2)
	if err != nil || f.Rail != "wechatpay" || !f.RailAmount.Equal(decimal.RequireFromString("1320.50")) || f.RailCurrency != "CNY" || f.Resolved() {
		t.Fatalf("po-1's flag from %q: %+v, %v; want wechatpay 1320.50 CNY, open", msg, f, err)
	}
	if _, err := st.RailAmountFlag(ctx, "po-2", 1); err == nil {
		t.Errorf("po-2, never flagged, has a flag")
	}
}
