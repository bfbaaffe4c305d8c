package settlementstack_test

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/testkit"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
)

// 10 ETH (10^19 minor units, above int64) settles through the real tax
// service like any amount: standard 25 % commission, 20 % tax on the rest,
// the provider's pending emptied into available; not left pending.
func TestTenETHSettles(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc)
	f.ledger.Charge("p-eth", cycle1.ID, "ETH", "6.000000000000000001")
	f.ledger.Charge("p-eth", cycle1.ID, "ETH", "3.999999999999999999")
	if _, err := f.pool.Exec(context.Background(), `insert into settlement.providers (provider_id, tier) values ('p-eth', 'standard')`); err != nil {
		t.Fatal(err)
	}
	taxProfiles(t, f.pool, "p-eth")
	f.clock.Set(cycle1.End.Add(time.Hour)) // in the grace period: closing now is an early close
	runWorker(t, f.s)
	if _, err := f.s.API().CloseSettlementCycle(context.Background(), &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID}); err != nil {
		t.Fatal(err)
	}
	waitCycleSettled(t, f.s, cycle1.ID, 60*time.Second)
	var status string
	var gross, commission, tax, net decimal.Decimal
	if err := f.pool.QueryRow(context.Background(), `select status, gross, commission, tax_withheld, net
		from settlement.settlements where provider_id = 'p-eth' and currency = 'ETH'`).Scan(&status, &gross, &commission, &tax, &net); err != nil {
		t.Fatal(err)
	}
	want := []string{"10", "2.5", "1.5", "6"}
	for i, got := range []decimal.Decimal{gross, commission, tax, net} {
		if status != itemSettled || !got.Equal(decimal.RequireFromString(want[i])) {
			t.Fatalf("p-eth ETH: %s, gross/commission/tax/net %s/%s/%s/%s; want settled %v", status, gross, commission, tax, net, want)
		}
	}
	if b := f.ledger.Balance(ids.ProviderPending("p-eth", cycle1.ID), "ETH"); !b.IsZero() {
		t.Errorf("pending %s ETH after settlement, want 0", b)
	}
	if b := f.ledger.Balance(ids.ProviderAvailable("p-eth"), "ETH"); !b.Equal(decimal.NewFromInt(6)) {
		t.Errorf("available %s ETH, want 6", b)
	}
}
