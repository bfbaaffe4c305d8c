package settlement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/testkit"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Providers settled per second when a cycle closes, on a real Temporal dev
// server, with the real tax service and settlement's Postgres; the ledger is
// the in-memory fake (gRPC), so the figure is settlement's own throughput.
func TestBenchSettlement(t *testing.T) {
	for _, b := range []struct {
		figure    string
		providers int
	}{{"settlement_1k", 1000}, {"settlement", 10000}, {"settlement_30k", 30000}} {
		t.Run(b.figure, func(t *testing.T) {
			testkit.Bench(t, b.figure)
			tc := dialTemporal(t, testkit.NewTemporal(t))
			f := newFixtureWith(t, tc, true)
			f.seed(t, cycle1.ID, b.providers)
			f.clock.Set(cycle1.End.Add(time.Hour))
			runWorker(t, f.s)
			ctx := context.Background()
			start := time.Now()
			if _, err := f.s.api.CloseSettlementCycle(ctx, &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID}); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 30*time.Minute, func() bool {
				c, err := f.s.store.GetCycle(ctx, cycle1.ID)
				return err == nil && c.Status == domain.CycleSettled
			}, "cycle settled")
			elapsed := time.Since(start)
			if n := f.count(t, `select count(distinct provider_id) from settlement.settlements where status = 'settled'`); n != b.providers {
				t.Fatalf("settled %d providers, want %d", n, b.providers)
			}
			testkit.Report(t, testkit.Figure{Bench: b.figure, Value: float64(b.providers) / elapsed.Seconds(), Unit: "providers/s", N: b.providers,
				Note: fmt.Sprintf("close to settled in %s; real Temporal dev server + tax service, in-memory ledger", elapsed.Round(time.Millisecond))})
		})
	}
}
