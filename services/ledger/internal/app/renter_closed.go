package app

import (
	"context"
	"sync"
	"time"
)

// openRenterTTL is how long an answer "open" stands before the renter is
// read again. The ledger learns of a close from party.updated, later than
// metering (gpubill_consumer_oldest_unacked_age_seconds{consumer="ledger-renters"}),
// and this adds at most this much to that. A close is final: a closed
// answer stands for good.
const openRenterTTL = 2 * time.Second

// renterStates remembers what ledger.renters said of each renter a finance
// entry credits (checkClosedCredits): read for every such entry, it cost
// a database round trip before the group commit and took the ledger API's
// figure from 0.71 to 0.50 of ceiling_autocommit.
type renterStates struct {
	mu sync.Mutex
	m  map[string]renterState
}

type renterState struct {
	closedAt time.Time // zero: open when read
	readAt   time.Time
}

// renterClosedAt is Store.RenterClosedAt, answered from what was read
// before: a closed renter's close for good, an open renter's state for
// openRenterTTL.
func (a *App) renterClosedAt(ctx context.Context, renterID string) (time.Time, error) {
	now := a.Clock.Now()
	a.renters.mu.Lock()
	s, ok := a.renters.m[renterID]
	a.renters.mu.Unlock()
	if ok && (!s.closedAt.IsZero() || now.Sub(s.readAt) < openRenterTTL) {
		return s.closedAt, nil
	}
	closedAt, err := a.Store.RenterClosedAt(ctx, renterID)
	if err != nil {
		return time.Time{}, err
	}
	a.renters.mu.Lock()
	if a.renters.m == nil {
		a.renters.m = map[string]renterState{}
	}
	a.renters.m[renterID] = renterState{closedAt: closedAt, readAt: now}
	a.renters.mu.Unlock()
	return closedAt, nil
}
