package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// claimsStore lists claims (or fails with listErr) and fails every Update
// with updateErr.
type claimsStore struct {
	Store
	claims    []SettledOutsideClaim
	listErr   error
	updateErr error
}

func (s *claimsStore) SettledOutsideClaims(context.Context) ([]SettledOutsideClaim, error) {
	return s.claims, s.listErr
}

func (s *claimsStore) Update(context.Context, func(Tx) error) error { return s.updateErr }

// someEntries answers the entries it holds; any other read fails with err.
type someEntries struct {
	held map[string]domain.LedgerEntry
	err  error
}

func (e someEntries) Entry(_ context.Context, id string) (domain.LedgerEntry, error) {
	if x, ok := e.held[id]; ok {
		return x, nil
	}
	return domain.LedgerEntry{}, e.err
}

// A settled-outside check that cannot read the ledger, cannot list the
// claims or cannot move a payout whose entry was reversed back to failed
// is counted on /metrics, by step (GpubillPayoutSettledOutsideCheckFailing):
// only an ERROR line said so, and a payout whose hand payment was reversed
// read paid forever, unseen.
func TestSettledOutsideCheckFailuresAreCounted(t *testing.T) {
	down := errors.New("rpc error: code = Unavailable desc = ledger down")
	claims := []SettledOutsideClaim{{PayoutID: "po-1", TransactionID: "tx-1"}, {PayoutID: "po-2", TransactionID: "tx-2"},
		{PayoutID: "po-3", TransactionID: "tx-3"}}
	reversed := domain.LedgerEntry{ID: "tx-3", ReversedBy: "tx-r"}
	tests := []struct {
		name      string
		give      Store
		entries   LedgerEntries
		wantSteps map[string]float64
	}{
		{"claims not listed", &claimsStore{listErr: fmt.Errorf("list claims: %w", errors.New("conn refused"))},
			someEntries{}, map[string]float64{"claims": 1}},
		{"no ledger reader", &claimsStore{claims: claims}, nil, map[string]float64{"claims": 1}},
		{"two entries not read", &claimsStore{claims: claims},
			someEntries{held: map[string]domain.LedgerEntry{"tx-3": {ID: "tx-3"}}, err: down}, map[string]float64{"read": 2}},
		{"one entry not found", &claimsStore{claims: claims[:1]},
			someEntries{err: fmt.Errorf("ledger transaction tx-1: %w", apperr.ErrNotFound)}, map[string]float64{"read": 1}},
		{"reversed, not moved back", &claimsStore{claims: claims[2:], updateErr: errors.New("deadlock detected")},
			someEntries{held: map[string]domain.LedgerEntry{"tx-3": reversed}}, map[string]float64{"move": 1}},
		{"nothing failing", &claimsStore{claims: claims[:1]},
			someEntries{held: map[string]domain.LedgerEntry{"tx-1": {ID: "tx-1"}}}, map[string]float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := map[string]float64{}
			for _, s := range settledOutsideCheckSteps {
				before[s] = testutil.ToFloat64(settledOutsideCheckFailures.WithLabelValues(s))
			}
			a := &Payouts{Store: tt.give, Entries: tt.entries, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			err := a.CheckSettledOutside(context.Background())
			if (err != nil) != (len(tt.wantSteps) > 0) {
				t.Fatalf("CheckSettledOutside: %v; want an error: %v", err, len(tt.wantSteps) > 0)
			}
			for _, s := range settledOutsideCheckSteps {
				if got := testutil.ToFloat64(settledOutsideCheckFailures.WithLabelValues(s)) - before[s]; got != tt.wantSteps[s] {
					t.Errorf("gpubill_payout_settled_outside_check_failures_total{step=%q} rose by %v; want %v", s, got, tt.wantSteps[s])
				}
			}
		})
	}
}
