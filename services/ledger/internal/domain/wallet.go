package domain

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/subjects"
)

// Wallet is one currency of a renter's wallet as lease control sees it:
// the balance on its normal side (what the renter holds; negative = owed),
// the credit limit (the wallet may go down to minus it) and the burn rate
// (usage charged over the last hour).
type Wallet struct {
	RenterID, Currency string
	Balance            decimal.Decimal
	CreditLimit        decimal.Decimal
	BurnPerHour        decimal.Decimal
	// Foreign: the renter is known to be billed in another currency, so
	// this wallet pays for no GPU time and never stops or warns the renter
	// (a top-up in the wrong currency, reversed, stopped every GPU of a
	// renter whose own wallet was full, and nothing resumed them).
	Foreign bool
	// Closed: the renter was closed (metering's PATCH /v1/renters/{id}):
	// nothing it holds pays for GPU time any more, so every wallet of it is
	// stopped whatever its balance, and never resumed.
	Closed bool
}

// runwayPlaces is the precision runway hours are stated with.
const runwayPlaces = 2

// Available is what the renter can still spend: balance + credit limit.
func (w Wallet) Available() decimal.Decimal { return w.Balance.Add(w.CreditLimit) }

// OverLimit reports a balance below minus the credit limit: charges still
// post (the usage happened), and the renter is flagged.
func (w Wallet) OverLimit() bool { return w.Available().IsNegative() }

// Runway is the hours until the wallet reaches minus its credit limit at
// the burn rate (0 when nothing is left); ok is false when nothing burns.
func (w Wallet) Runway() (hours decimal.Decimal, ok bool) {
	if !w.BurnPerHour.IsPositive() {
		return decimal.Zero, false
	}
	if !w.Available().IsPositive() {
		return decimal.Zero, true
	}
	return w.Available().DivRound(w.BurnPerHour, runwayPlaces+4).Truncate(runwayPlaces), true
}

// RunwayString is Runway as the API states it ("" when nothing burns).
func (w Wallet) RunwayString() string {
	h, ok := w.Runway()
	if !ok {
		return ""
	}
	return h.StringFixed(runwayPlaces)
}

// LeaseState is where lease control stands with a renter's wallet.
type LeaseState string

// Lease control states: ok; warned (runway below the warning); stopped
// (the wallet reached minus its credit limit: the renter's GPUs were asked
// to stop, until a top-up).
const (
	LeaseOK      LeaseState = "ok"
	LeaseWarned  LeaseState = "warned"
	LeaseStopped LeaseState = "stopped"
)

// LeaseEventKind is what lease control tells the marketplace.
type LeaseEventKind string

// Lease control events (subjects lease.runway.low.{renter},
// lease.stop.requested.{renter}, lease.resume.allowed.{renter}).
const (
	EventRunwayLow     LeaseEventKind = "runway_low"
	EventStopRequested LeaseEventKind = "stop_requested"
	EventResumeAllowed LeaseEventKind = "resume_allowed"
)

// Subject is the event's JetStream subject for a renter.
func (k LeaseEventKind) Subject(renter string) string {
	switch k {
	case EventRunwayLow:
		return subjects.LeaseRunwayLow.Of(renter)
	case EventStopRequested:
		return subjects.LeaseStopRequested.Of(renter)
	default:
		return subjects.LeaseResumeAllowed.Of(renter)
	}
}

// Lease is lease control's record of one wallet.
type Lease struct {
	State LeaseState
	// Crossing counts the stops so far; a stop and the resume after it share
	// one crossing, so each crossing is announced once.
	Crossing int64
	// Warnings counts the low-runway warnings so far (each announced once).
	Warnings int64
	// OverLimitSince is when the wallet last went below minus its credit
	// limit (zero while it is not).
	OverLimitSince time.Time
}

// LeaseEvent is one announcement, with the wallet that caused it.
type LeaseEvent struct {
	Kind     LeaseEventKind
	Wallet   Wallet
	Crossing int64 // the stop it belongs to (a warning: the stops before it)
	Seq      int64 // the crossing of a stop or resume, the warning's number
	At       time.Time
	// Epoch is the ledger schema's restore epoch (pkg/pg.RestoreEpoch):
	// crossing and warning counts restart from a snapshot's at a restore,
	// the epoch does not repeat.
	Epoch string
}

// ID is the event's idempotency key: one per renter, currency, crossing (or
// warning), kind and restore epoch.
func (e LeaseEvent) ID() string {
	return fmt.Sprintf("lease-%s-%s-%d-%s-r%s", e.Wallet.RenterID, e.Wallet.Currency, e.Seq, e.Kind, e.Epoch)
}

// NextLease moves lease control for a wallet: a closed renter, or nothing
// left to spend (the wallet at or below minus its credit limit), stops the
// renter; a stopped wallet with money again is resumed unless closed; a runway under warn warns once until
// the runway recovers. It returns the new record and what to announce.
func NextLease(prev Lease, w Wallet, warn time.Duration, now time.Time) (Lease, []LeaseEvent) {
	next := prev
	if next.State == "" {
		next.State = LeaseOK
	}
	switch over := w.OverLimit(); {
	case over && prev.OverLimitSince.IsZero():
		next.OverLimitSince = now
	case !over:
		next.OverLimitSince = time.Time{}
	}
	var evs []LeaseEvent
	emit := func(k LeaseEventKind) {
		seq := next.Crossing
		if k == EventRunwayLow {
			seq = next.Warnings
		}
		evs = append(evs, LeaseEvent{Kind: k, Wallet: w, Crossing: next.Crossing, Seq: seq, At: now})
	}
	if w.Closed { // before Foreign: a closed renter's foreign wallet is not resumed
		if prev.State != LeaseStopped {
			next.State = LeaseStopped
			next.Crossing++
			emit(EventStopRequested)
		}
		return next, evs
	}
	if w.Foreign {
		if prev.State == LeaseStopped {
			emit(EventResumeAllowed)
		}
		next.State = LeaseOK
		return next, evs
	}
	if !w.Available().IsPositive() {
		if prev.State != LeaseStopped {
			next.State = LeaseStopped
			next.Crossing++
			emit(EventStopRequested)
		}
		return next, evs
	}
	if prev.State == LeaseStopped {
		emit(EventResumeAllowed)
		next.State = LeaseOK
	}
	hours, burns := w.Runway()
	low := burns && hours.LessThan(decimal.NewFromInt(int64(warn)).Div(decimal.NewFromInt(int64(time.Hour))))
	switch {
	case low && next.State == LeaseOK:
		next.State = LeaseWarned
		next.Warnings++
		emit(EventRunwayLow)
	case !low && next.State == LeaseWarned:
		next.State = LeaseOK
	}
	return next, evs
}

// BurnMatters reports whether NextLease can use the wallet's burn rate:
// not for a wallet already stopped that still has nothing to spend, or whose
// renter is closed (it stays stopped and announces nothing). Lease control reads the burn rate, the
// costliest part of a wallet, only where it matters.
func BurnMatters(prev Lease, w Wallet) bool {
	return (w.Available().IsPositive() && !w.Closed) || prev.State != LeaseStopped
}

// WalletKey names one currency of a renter's wallet.
type WalletKey struct{ RenterID, Currency string }

// WalletStatus is a wallet with where lease control stands with it.
type WalletStatus struct {
	Wallet
	Lease Lease
}

// LeaseWebhook is one lease control announcement queued for the
// marketplace scheduler's webhook.
type LeaseWebhook struct {
	EventID, RenterID, Kind string
	Payload                 []byte
	Attempts                int
	// ClaimedUntil is when the claim that read it lapses: its outcome is
	// recorded only while the row still holds this claim.
	ClaimedUntil time.Time
}
