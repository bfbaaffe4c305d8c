// Package sandbox is payout's sandbox rail: a local rail whose outcome a
// transfer's identifier chooses (tests and gpubill dev).
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// Sandbox defaults: a transfer is in transit after half the latency and
// settled after the latency; a returned one bounces ReturnAfter later.
const (
	SandboxLatencyDefault     = 3 * time.Second
	SandboxReturnAfterDefault = 5 * time.Second
)

// Sandbox failure codes (DESIGN §6's test accounts).
const (
	SandboxCodeFrozen   = "account_frozen"
	SandboxCodeReturned = "account_closed"
)

// Sandbox is the built-in test rail (DESIGN §6). It behaves like a real
// one: it keeps its own book of transfers by reference (in Postgres, so a
// restarted process finds them), accepts a reference once (a second
// submission of it changes nothing and is counted), settles after a
// latency, and calls back asynchronously (Notify) when a transfer moves.
// Test accounts: an account number or id ending in 0002 fails with
// account_frozen; one ending in 0003 is paid, then returned ReturnAfter
// later; anything else is paid. Outages and lost answers are injectable.
type Sandbox struct {
	Pool        *pgxpool.Pool
	Clock       clock.Clock
	Latency     time.Duration
	ReturnAfter time.Duration
	Notify      app.Notifier // may be nil: callers poll

	outage     atomic.Bool
	loseAnswer atomic.Int64
	mu         sync.Mutex
	timers     []*time.Timer
}

// Name implements app.Rail.
func (s *Sandbox) Name() string { return "sandbox" }

// SetOutage makes every call fail with app.ErrRailUnavailable (on) or work again.
func (s *Sandbox) SetOutage(on bool) { s.outage.Store(on) }

// LoseAnswers makes the next n submissions reach the rail (the transfer is
// booked) but lose their answer: the caller sees app.ErrRailUnavailable
// and must query before submitting again.
func (s *Sandbox) LoseAnswers(n int) { s.loseAnswer.Store(int64(n)) }

// Stop cancels pending callbacks.
func (s *Sandbox) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.timers {
		t.Stop()
	}
	s.timers = nil
}

func (s *Sandbox) latency() time.Duration {
	if s.Latency > 0 {
		return s.Latency
	}
	return SandboxLatencyDefault
}

func (s *Sandbox) returnAfter() time.Duration {
	if s.ReturnAfter > 0 {
		return s.ReturnAfter
	}
	return SandboxReturnAfterDefault
}

// outcome reads the test account's fate from its last four characters.
func outcome(identifier string) string {
	switch {
	case strings.HasSuffix(identifier, "0002"):
		return "failed"
	case strings.HasSuffix(identifier, "0003"):
		return "returned"
	}
	return "paid"
}

// Submit implements app.Rail: idempotent by reference.
func (s *Sandbox) Submit(ctx context.Context, t app.Transfer) (app.RailStatus, error) {
	if s.outage.Load() {
		return app.RailStatus{}, fmt.Errorf("sandbox submit %s: %w", t.Reference, app.ErrRailUnavailable)
	}
	if t.Reference == "" || !t.Amount.IsPositive() {
		return app.RailStatus{}, fmt.Errorf("sandbox submit: reference and a positive amount required")
	}
	now := s.Clock.Now()
	var fresh bool
	if err := s.Pool.QueryRow(ctx, `insert into payout.sandbox_transfers (reference, provider_id, currency, amount, outcome, submitted_at)
		values ($1, $2, $3, $4, $5, $6) on conflict (reference) do update set submissions = payout.sandbox_transfers.submissions + 1
		returning submissions = 1`, t.Reference, t.ProviderID, t.Currency, t.Amount, outcome(t.Method.Identifier()), now).Scan(&fresh); err != nil {
		return app.RailStatus{}, fmt.Errorf("sandbox submit %s: %w", t.Reference, err)
	}
	if fresh {
		s.schedule(t.Reference, outcome(t.Method.Identifier()))
	}
	if s.loseAnswer.Load() > 0 && s.loseAnswer.Add(-1) >= 0 {
		return app.RailStatus{}, fmt.Errorf("sandbox submit %s: answer lost: %w", t.Reference, app.ErrRailUnavailable)
	}
	return s.Query(ctx, t.Reference)
}

// schedule calls back when the transfer moves (in transit, settled, returned).
func (s *Sandbox) schedule(ref, outcome string) {
	if s.Notify == nil {
		return
	}
	at := []time.Duration{s.latency() / 2, s.latency()}
	if outcome == "returned" {
		at = append(at, s.latency()+s.returnAfter())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range at {
		s.timers = append(s.timers, time.AfterFunc(d, func() { s.Notify(ref) }))
	}
}

// Query implements app.Rail: the state follows the clock from submission.
func (s *Sandbox) Query(ctx context.Context, ref string) (app.RailStatus, error) {
	if s.outage.Load() {
		return app.RailStatus{}, fmt.Errorf("sandbox query %s: %w", ref, app.ErrRailUnavailable)
	}
	var out, currency string
	var amount decimal.Decimal
	var at time.Time
	err := s.Pool.QueryRow(ctx, `select outcome, submitted_at, currency, amount from payout.sandbox_transfers where reference = $1`,
		ref).Scan(&out, &at, &currency, &amount)
	if errors.Is(err, pgx.ErrNoRows) {
		return app.RailStatus{}, fmt.Errorf("sandbox %s: %w", ref, app.ErrUnknownReference)
	}
	if err != nil {
		return app.RailStatus{}, fmt.Errorf("sandbox query %s: %w", ref, err)
	}
	// What the first submission of ref booked: a later one under ref changes nothing.
	st := app.RailStatus{Reference: ref, ExpectedArrival: at.Add(s.latency()), Currency: currency, Amount: amount}
	since := s.Clock.Now().Sub(at)
	switch {
	case since < s.latency()/2:
		st.State = app.RailAccepted
	case since < s.latency():
		st.State = app.RailInTransit
	case out == "failed":
		st.State, st.FailureCode, st.Message = app.RailFailed, SandboxCodeFrozen, "the receiving account is frozen"
	case out == "returned" && since >= s.latency()+s.returnAfter():
		st.State, st.FailureCode, st.Message = app.RailReturned, SandboxCodeReturned, "returned by the receiving bank: account closed"
	default:
		st.State = app.RailPaid
	}
	return st, nil
}

// Submissions counts the submissions of a reference (tests: exactly one).
func (s *Sandbox) Submissions(ctx context.Context, ref string) (int, error) {
	var n int
	err := s.Pool.QueryRow(ctx, `select coalesce((select submissions from payout.sandbox_transfers where reference = $1), 0)`, ref).Scan(&n)
	return n, err
}
