package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

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
	checked   map[string]int // transaction → the pass that last read it
	pass      int
}

// SettledOutsideClaimsDue answers the claims least recently checked (as
// payout.settled_outside's checked_at orders them), at most limit.
func (s *claimsStore) SettledOutsideClaimsDue(_ context.Context, limit int) ([]SettledOutsideClaim, error) {
	if s.listErr != nil {
		return nil, s.listErr
	}
	out := slices.Clone(s.claims)
	slices.SortStableFunc(out, func(a, b SettledOutsideClaim) int { return s.checked[a.TransactionID] - s.checked[b.TransactionID] })
	return out[:min(limit, len(out))], nil
}

// MarkSettledOutsideChecked records ids read (a later pass reads them last).
func (s *claimsStore) MarkSettledOutsideChecked(_ context.Context, ids []string, _ time.Time) error {
	if s.checked == nil {
		s.checked = map[string]int{}
	}
	s.pass++
	for _, id := range ids {
		s.checked[id] = s.pass
	}
	return nil
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

func (e someEntries) Entries(_ context.Context, ids []string) ([]domain.LedgerEntry, error) {
	var out []domain.LedgerEntry
	for _, id := range ids {
		x, ok := e.held[id]
		if !ok && e.err != nil && !errors.Is(e.err, apperr.ErrNotFound) {
			return nil, e.err
		}
		if ok {
			out = append(out, x)
		}
	}
	return out, nil
}

// countingEntries answers the entries it holds and counts the ledger
// calls made (one per Entry, one per Entries).
type countingEntries struct {
	held  map[string]domain.LedgerEntry
	calls int
}

func (e *countingEntries) Entry(_ context.Context, id string) (domain.LedgerEntry, error) {
	e.calls++
	if x, ok := e.held[id]; ok {
		return x, nil
	}
	return domain.LedgerEntry{}, fmt.Errorf("ledger transaction %s: %w", id, apperr.ErrNotFound)
}

func (e *countingEntries) Entries(_ context.Context, ids []string) ([]domain.LedgerEntry, error) {
	e.calls++
	if len(ids) > LedgerEntriesPerRead {
		return nil, fmt.Errorf("%d ids in one read, the ledger takes %d", len(ids), LedgerEntriesPerRead)
	}
	var out []domain.LedgerEntry
	for _, id := range ids {
		if x, ok := e.held[id]; ok {
			out = append(out, x)
		}
	}
	return out, nil
}

// A settled-outside pass asks the ledger once per LedgerEntriesPerRead
// claims: it asked once per claim (GetTransaction), every five minutes, on
// every replica, a cost growing with every payout ever settled outside.
// 250 claims (one reversed) are 3 calls, and the reversed one still fails
// its payout again.
func TestSettledOutsideCheckReadsTheLedgerInPages(t *testing.T) {
	var claims []SettledOutsideClaim
	held := map[string]domain.LedgerEntry{}
	for i := range 250 {
		c := SettledOutsideClaim{PayoutID: fmt.Sprintf("po-%03d", i), TransactionID: fmt.Sprintf("tx-%03d", i)}
		claims = append(claims, c)
		held[c.TransactionID] = domain.LedgerEntry{ID: c.TransactionID}
	}
	held["tx-123"] = domain.LedgerEntry{ID: "tx-123", ReversedBy: "tx-r"}
	moved := &movesStore{claimsStore: claimsStore{claims: claims}}
	e := &countingEntries{held: held}
	a := &Payouts{Store: moved, Entries: e, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := a.CheckSettledOutside(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := 3; e.calls != want {
		t.Errorf("a pass over %d claims made %d ledger calls; want %d (one per %d claims)", len(claims), e.calls, want, LedgerEntriesPerRead)
	}
	if moved.updates != 1 {
		t.Errorf("%d payouts moved back to failed; want 1 (po-123, its tx-123 reversed)", moved.updates)
	}
}

// A settled-outside pass reads a window of the claims, the least recently
// read first, not every claim ever made: claims of final payouts stay for
// good, and a pass asking the ledger once per 100 of them cost more every
// cycle, without bound (a reversal of a claimed entry is acted on at once
// through ledger.reversed, ConsumeReversals; the pass is the backstop).
// Over 5 000 claims a pass makes at most SettledOutsideCheckWindow/100
// calls, and passes in turn read every claim: the reversed one, read by
// the last of them, fails its payout again.
func TestSettledOutsideCheckReadsAWindowNotAllHistory(t *testing.T) {
	const n = 5000
	var claims []SettledOutsideClaim
	held := map[string]domain.LedgerEntry{}
	for i := range n {
		c := SettledOutsideClaim{PayoutID: fmt.Sprintf("po-%04d", i), TransactionID: fmt.Sprintf("tx-%04d", i)}
		claims = append(claims, c)
		held[c.TransactionID] = domain.LedgerEntry{ID: c.TransactionID}
	}
	held["tx-4999"] = domain.LedgerEntry{ID: "tx-4999", ReversedBy: "tx-r"}
	moved := &movesStore{claimsStore: claimsStore{claims: claims}}
	e := &countingEntries{held: held}
	a := &Payouts{Store: moved, Entries: e, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	const window = 500 // SettledOutsideCheckWindow
	for pass := 1; pass <= n/window; pass++ {
		before := e.calls
		if err := a.CheckSettledOutside(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, want := e.calls-before, window/LedgerEntriesPerRead; got > want {
			t.Fatalf("pass %d over %d claims made %d ledger calls; want at most %d (a window of %d claims)", pass, n, got, want, window)
		}
		if pass < n/window && moved.updates != 0 {
			t.Fatalf("pass %d moved %d payouts; want 0 (tx-4999 read by the last pass)", pass, moved.updates)
		}
	}
	if moved.updates != 1 {
		t.Errorf("after %d passes %d payouts moved back to failed; want 1 (po-4999, its tx-4999 reversed)", n/window, moved.updates)
	}
	for _, c := range claims {
		if moved.checked[c.TransactionID] == 0 {
			t.Fatalf("claim %s never read in %d passes", c.TransactionID, n/window)
		}
	}
}

// movesStore is claimsStore counting its Updates (each succeeding, doing
// nothing).
type movesStore struct {
	claimsStore
	updates int
}

func (s *movesStore) Update(context.Context, func(Tx) error) error { s.updates++; return nil }

// heldLock is a SessionLock another replica holds (held) or free.
type heldLock struct {
	held     bool
	err      error
	released int
}

func (l *heldLock) TryLock(context.Context) (func(), bool, error) {
	if l.err != nil || l.held {
		return nil, false, l.err
	}
	l.held = true
	return func() { l.held = false; l.released++ }, true, nil
}

// One replica at a time runs the settled-outside pass
// (SettledOutsideCheckLock): while another holds the lock, a pass lists no
// claim and asks the ledger nothing; the replica holding it runs the pass
// and lets the lock go. A lock not taken for an error is counted (step
// claims) and the pass not run.
func TestSettledOutsideCheckRunsOnOneReplica(t *testing.T) {
	claims := []SettledOutsideClaim{{PayoutID: "po-1", TransactionID: "tx-1"}}
	e := &countingEntries{held: map[string]domain.LedgerEntry{"tx-1": {ID: "tx-1"}}}
	lock := &heldLock{held: true}
	a := &Payouts{Store: &claimsStore{claims: claims}, Entries: e, SettledOutsideCheckLock: lock, Clock: clock.System{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := a.CheckSettledOutside(context.Background()); err != nil || e.calls != 0 {
		t.Fatalf("a pass while another replica holds the lock: %v, %d ledger calls; want nil, 0", err, e.calls)
	}
	lock.held = false
	if err := a.CheckSettledOutside(context.Background()); err != nil || e.calls != 1 || lock.held || lock.released != 1 {
		t.Fatalf("a pass holding the lock: %v, %d ledger calls, lock held after: %v; want nil, 1 call, released", err, e.calls, lock.held)
	}
	before := testutil.ToFloat64(settledOutsideCheckFailures.WithLabelValues("claims"))
	lock.err = errors.New("lock gpubill.payout.settled_outside_check: conn refused")
	if err := a.CheckSettledOutside(context.Background()); err == nil || e.calls != 1 {
		t.Fatalf("a pass whose lock failed: %v, %d ledger calls; want an error, no call", err, e.calls)
	}
	if got := testutil.ToFloat64(settledOutsideCheckFailures.WithLabelValues("claims")) - before; got != 1 {
		t.Fatalf("a lock not taken rose step=claims by %v, want 1", got)
	}
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
		{"the ledger down: every claim of the read not read", &claimsStore{claims: claims},
			someEntries{held: map[string]domain.LedgerEntry{"tx-3": {ID: "tx-3"}}, err: down}, map[string]float64{"read": 3}},
		{"two entries not answered", &claimsStore{claims: claims},
			someEntries{held: map[string]domain.LedgerEntry{"tx-3": {ID: "tx-3"}}, err: apperr.ErrNotFound}, map[string]float64{"read": 2}},
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
