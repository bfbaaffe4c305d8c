package settlement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Settlement tells the tax service when the cycle was closed, for every
// provider, one held through the close and released later too: the tax
// service applies the rule in force at the earlier of that and the cycle's
// end. Without it the rule was the one in force at the cycle's calendar
// end, so a rule set selected after an early close applied to the
// providers released after it (0.00 withheld under cn_labour from one,
// 150.00 under flat20 from the others of the same gross).
func TestWithholdingNamesWhenTheCycleClosed(t *testing.T) {
	t.Parallel()
	f := heldThroughTheClose(t) // closed at startAt, six weeks before cycle1's end; p-00001 held
	var closedAt time.Time
	if err := f.s.d.Pool.QueryRow(context.Background(), `select closed_at from settlement.cycles where cycle_id = $1`, cycle1.ID).
		Scan(&closedAt); err != nil || !closedAt.Equal(startAt) || !closedAt.Before(cycle1.End) {
		t.Fatalf("cycle closed at %v (%v); want the early close at %v", closedAt, err, startAt)
	}
	f.clock.Set(startAt.Add(48 * time.Hour)) // released two days later
	releaseAndSettle(t, f, "p-00001")
	for i := range 3 {
		key := domain.SettlementKey(cycle1.ID, fmt.Sprintf("p-%05d", i), "CNY")
		if got, asked := f.tax.ClosedAt(key); !asked || !got.Equal(startAt) {
			t.Errorf("withholding %s asked with closed_at %v (asked: %v); want %v", key, got, asked, startAt)
		}
	}
}
