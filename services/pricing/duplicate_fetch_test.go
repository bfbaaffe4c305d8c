package pricing_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// A fetch can hold the same message twice (a redelivery after the ack wait
// arriving beside the first delivery): it is rated once.
func TestSameMessageTwiceInOneFetchRatesOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.card(t, "CNY", "2.80")
	end := now.Add(-time.Hour)
	ev := domain.UsageEvent{ID: "ev-dup", LeaseID: "lease-dup", ProviderID: "p-000", RenterID: "r-000", GPUModel: "RTX_4090",
		GPUCount: 1, Start: end.Add(-time.Hour), End: end, Currency: "CNY", ProviderTier: "pro", CycleID: cycles.Default().ForUsageEnd(end).ID}
	msg := app.UsageMessage{ID: "ub-dup", Events: []domain.UsageEvent{ev}}
	if err := s.pricing.RateMessages(context.Background(), []app.UsageMessage{msg, msg}); err != nil {
		t.Fatal(err)
	}
	var events int
	var amount string
	var right bool
	if err := s.deps.Pool.QueryRow(context.Background(), `select coalesce(sum(cardinality(event_ids)), 0), coalesce(sum(amount), 0)::text,
		coalesce(sum(amount), 0) = 2.80 from pricing.charges`).Scan(&events, &amount, &right); err != nil {
		t.Fatal(err)
	}
	if events != 1 || !right {
		t.Fatalf("charged %d events for %s; want ev-dup once for 2.80 (1 GPU-hour at 2.80)", events, amount)
	}
}
