package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// A usage event whose provider PUE pricing cannot read waits as pending
// (counted, alerted on), never rated as if the PUE were unknown. Metering
// took a PUE of 1e64 and published it as its 65 digits; ParseDecimal
// refused it, the error was ignored and the usage was rated with no PUE:
// no surcharge, while a quote with the same PUE charged it. The retry
// does not pick it up again (a card cannot make it readable).
func TestUsageWithUnreadablePUEWaits(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &pendStore{memStore: memStore{seen: map[string]bool{}}}
	st.cards = append(st.cards, domain.StoredCard{ID: "rc-cny", Currency: "CNY", EffectiveFrom: from, Seq: 1,
		Body: domain.CardInput{Currency: "CNY", EffectiveFrom: from, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.80"}},
			PUE: &domain.PUEInput{Threshold: "1.5", PerGPUHour: "0.05"}}})
	a := New(st, nil, clock.NewManual(from.Add(48*time.Hour)))
	ev := func(id, pue string) domain.UsageEvent {
		return domain.UsageEvent{ID: id, LeaseID: "l-" + id, ProviderID: "p-1", RenterID: "r-1", GPUModel: "RTX_4090", GPUCount: 1,
			Start: from.Add(time.Hour), End: from.Add(2 * time.Hour), Currency: "CNY", CycleID: "cyc-20260101", ProviderPUE: pue}
	}
	bad := "1" + strings.Repeat("0", 64)
	ctx := context.Background()
	if err := a.RateMessages(ctx, []UsageMessage{{ID: "m-1", Events: []domain.UsageEvent{ev("ev-ok", "1.6"), ev("ev-bad", bad)}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range st.rated {
		for _, id := range c.EventIDs {
			if id == "ev-bad" {
				t.Fatalf("ev-bad was charged %s (its PUE %s unread); want it pending", c.Amount, bad)
			}
		}
	}
	if len(st.rated) != 1 || st.rated[0].Amount.String() != "2.85" {
		t.Fatalf("%d charges %v; want ev-ok's alone, 2.85 (2.80 + the PUE surcharge 0.05)", len(st.rated), st.rated)
	}
	if len(st.pending) != 1 || st.pending[0].Event.ID != "ev-bad" || !strings.Contains(st.pending[0].Reason, "provider PUE") {
		t.Fatalf("pending %v; want ev-bad, its reason naming its provider PUE", st.pending)
	}
	if n, err := a.RetryPending(ctx); err != nil || n != 0 || len(st.pending) != 1 {
		t.Fatalf("retry rated %d (%v), %d pending; want none rated, ev-bad still waiting", n, err, len(st.pending))
	}
}
