package payout

import (
	"context"
	"testing"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// A payout that joined a later one counts in that one only: its net was
// counted as canceled too, money read as stranded in available beside the
// payout that paid it.
func TestPayoutAmountCountsAJoinedPayoutOnce(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net,
			status, absorbed_into, created_at, updated_at) values
		('po-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'canceled', 'po-2', now(), now()),
		('po-2', 'p-1', 'cyc-20260215', 'CNY', 300, 75, 45, 180, 'paid', '', now(), now()),
		('po-3', 'p-2', 'cyc-20260101', 'CNY', 50, 12.5, 7.5, 30, 'canceled', '', now(), now())`); err != nil {
		t.Fatal(err)
	}
	var query string
	for _, m := range Metrics() {
		if m.Name == "gpubill_payout_amount" {
			query = m.Query
		}
	}
	rows, err := pool.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for rows.Next() {
		var status, currency string
		var v float64
		if err := rows.Scan(&status, &currency, &v); err != nil {
			t.Fatal(err)
		}
		got[status+" "+currency] = v
	}
	if rows.Err() != nil || len(got) != 2 || got["paid CNY"] != 180 || got["canceled CNY"] != 30 {
		t.Fatalf("gpubill_payout_amount: %v (%v); want paid 180 and canceled 30 (po-1's 60 is in po-2)", got, rows.Err())
	}
}
