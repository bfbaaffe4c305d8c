package app

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
)

// closedCountingStore answers RenterClosedAt from closed and counts the reads.
type closedCountingStore struct {
	Store
	closed map[string]time.Time
	reads  int
}

func (s *closedCountingStore) RenterClosedAt(_ context.Context, renterID string) (time.Time, error) {
	s.reads++
	return s.closed[renterID], nil
}

// A finance entry's closed-renter check reads ledger.renters once per
// openRenterTTL for an open renter and once for good for a closed one: read
// for every entry crediting a wallet, it took the ledger API's figure from
// 0.71 to 0.50 of ceiling_autocommit.
func TestRenterClosedAtReadsOncePerTTL(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	st := &closedCountingStore{closed: map[string]time.Time{}}
	a := New(st, clk, cycles.Calendar{}, nil)
	for range 100 {
		if at, err := a.renterClosedAt(ctx, "r-1"); err != nil || !at.IsZero() {
			t.Fatalf("r-1: %v, %v; want open", at, err)
		}
	}
	if st.reads != 1 {
		t.Fatalf("100 checks of open r-1 within %s read ledger.renters %d times; want 1", openRenterTTL, st.reads)
	}
	closedAt := clk.Now()
	st.closed["r-1"] = closedAt
	clk.Advance(openRenterTTL)
	if at, err := a.renterClosedAt(ctx, "r-1"); err != nil || !at.Equal(closedAt) {
		t.Fatalf("r-1 closed, read after %s: %v, %v; want closed at %v", openRenterTTL, at, err, closedAt)
	}
	clk.Advance(time.Hour)
	for range 10 {
		if at, err := a.renterClosedAt(ctx, "r-1"); err != nil || !at.Equal(closedAt) {
			t.Fatalf("closed r-1 an hour later: %v, %v; want closed at %v", at, err, closedAt)
		}
	}
	if st.reads != 2 {
		t.Fatalf("closed r-1 read %d times; want 2 (once open, once closed, then never)", st.reads)
	}
}
