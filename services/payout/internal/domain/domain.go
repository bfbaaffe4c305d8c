// Package domain holds payout's pure rules (DESIGN §6): the payout state
// machine, the KYC / payout method / hold gate, the minimum payout per
// currency, payout methods (validation, masking) and the ledger movements
// of each step. No pgx, NATS, protobuf or Temporal here.
package domain

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
)

// Payout statuses.
const (
	StatusActionRequired = "action_required"
	StatusCreated        = "created"
	StatusSubmitted      = "submitted"
	StatusInTransit      = "in_transit"
	StatusPaid           = "paid"
	StatusFailed         = "failed"
	StatusCanceled       = "canceled"
	StatusReturned       = "returned"
	// StatusSettledOutside: a failed or returned payout finance paid by
	// hand, outside any rail (a ledger entry of its own); final but for
	// that entry being reversed in the ledger: failed again.
	StatusSettledOutside = "settled_outside"
)

// KYC statuses.
const (
	KYCVerified = "verified"
	KYCRejected = "rejected"
	KYCPending  = "pending"
)

// ErrIllegalTransition is a status change the state machine does not allow.
var ErrIllegalTransition = errors.New("illegal payout transition")

// transitions is the state machine: from → the statuses it may move to.
// Before submission a payout may wait (action_required), proceed (created)
// or be canceled; once submitted only the rail moves it, but for a cancel
// while its bank transfer still waits in the bank-file queue (nothing sent
// to the bank: CanceledInQueue); a failed or returned payout may be
// retried (back to created, a new attempt) or recorded as paid by hand
// outside gpubill (settled_outside).
var transitions = map[string][]string{
	StatusActionRequired: {StatusCreated, StatusCanceled},
	StatusCreated:        {StatusActionRequired, StatusSubmitted, StatusFailed, StatusCanceled},
	StatusSubmitted:      {StatusInTransit, StatusPaid, StatusFailed, StatusCanceled},
	StatusInTransit:      {StatusPaid, StatusFailed},
	StatusPaid:           {StatusReturned},
	StatusFailed:         {StatusCreated, StatusSettledOutside},
	StatusReturned:       {StatusCreated, StatusSettledOutside},
	StatusCanceled:       nil,
	StatusSettledOutside: {StatusFailed}, // its ledger entry reversed (app.CheckSettledOutside)
}

// Statuses lists every payout status.
func Statuses() []string {
	out := make([]string, 0, len(transitions))
	for s := range transitions {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// ValidStatus reports whether s is a payout status.
func ValidStatus(s string) bool { _, ok := transitions[s]; return ok }

// CheckTransition refuses a change the state machine does not allow.
func CheckTransition(from, to string) error {
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	return fmt.Errorf("%w: %s → %s", ErrIllegalTransition, from, to)
}

// Submitted reports whether a payout in status s has reached the rail (it
// can no longer be canceled or held).
func Submitted(s string) bool {
	switch s {
	case StatusSubmitted, StatusInTransit, StatusPaid, StatusReturned:
		return true
	}
	return false
}

// CanceledInQueue reports whether p was canceled after its submission,
// its bank transfer taken out of the bank-file queue before any cut: its
// amount goes back from in_transit to available. A payout canceled before
// submission has no rail reference (a retry clears its last attempt's)
// and moved nothing.
func CanceledInQueue(p Payout) bool {
	return p.Status == StatusCanceled && p.RailRef != ""
}

// Final reports whether the workflow of a payout in status s has nothing
// left to do (a paid payout still watches for a return).
func Final(s string) bool {
	return s == StatusFailed || s == StatusCanceled || s == StatusReturned || s == StatusSettledOutside
}

// Minimums are the minimum payout per currency: a smaller amount stays in
// provider:{id}:available and joins the next payout.
type Minimums map[string]decimal.Decimal

// DefaultMinimums is DESIGN §6's 100.00 CNY / 25.00 USD.
func DefaultMinimums() Minimums {
	return Minimums{"CNY": decimal.RequireFromString("100.00"), "USD": decimal.RequireFromString("25.00")}
}

// ParseMinimums reads "CNY=100.00,USD=25.00" over the defaults.
func ParseMinimums(s string) (Minimums, error) {
	m := DefaultMinimums()
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		cur, amt, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("payout minimum %q: want CUR=amount", kv)
		}
		// As PATCH /v1/payout-settings reads one: a currency gpubill
		// supports (RMB=50 was kept beside CNY's 100.00, which applied),
		// in its minor units.
		c, err := money.Lookup(strings.ToUpper(strings.TrimSpace(cur)))
		if err != nil {
			return nil, fmt.Errorf("payout minimum %q: %w", kv, err)
		}
		d, err := c.Parse(strings.TrimSpace(amt))
		if err != nil || d.IsNegative() {
			return nil, fmt.Errorf("payout minimum %q: want a non-negative amount in %s's minor units", kv, c.Code)
		}
		m[c.Code] = d
	}
	return m, nil
}

// GateInput is what decides whether a payout may go to the rail.
type GateInput struct {
	KYC       string // "" when none
	HasMethod bool
	Held      string // finance's hold reason, "" when not held
	Currency  string
	Amount    decimal.Decimal
}

// Gate decides whether a payout not yet submitted may proceed (created) or
// must wait (action_required, with the reason the provider sees).
func (m Minimums) Gate(in GateInput) (status, reason string) {
	switch {
	case in.Held != "":
		return StatusActionRequired, HeldReasonPrefix + in.Held
	case in.KYC != KYCVerified:
		kyc := in.KYC
		if kyc == "" {
			kyc = "missing"
		}
		return StatusActionRequired, fmt.Sprintf("kyc not verified (%s)", kyc)
	case !in.HasMethod:
		return StatusActionRequired, "no payout method"
	}
	if min, ok := m[in.Currency]; ok && in.Amount.LessThan(min) {
		return StatusActionRequired, UnderMinimumReason(min, in.Currency)
	}
	return StatusCreated, ""
}

// UnderMinimumReason is the reason of a payout under the minimum.
func UnderMinimumReason(min decimal.Decimal, currency string) string {
	return fmt.Sprintf("under minimum %s %s: stays available and joins the next payout", inCurrency(min, currency), currency)
}

// inCurrency is an amount with its currency's minor units (two decimals
// printed 0.004 ETH as 0.00, and 99.999999 USDC as 100.00).
func inCurrency(d decimal.Decimal, currency string) string {
	if c, err := money.Lookup(currency); err == nil {
		return c.Format(d)
	}
	return d.String()
}

// ReasonInsufficientAvailable starts the reason of a payout that waits
// because provider:{id}:available no longer covers it (a reversal took
// part of it): it goes on its own once available covers it again.
const ReasonInsufficientAvailable = "insufficient_available"

// InsufficientAvailableReason is the reason of a payout available does not cover.
func InsufficientAvailableReason(available, net decimal.Decimal, currency string) string {
	return fmt.Sprintf("%s: available %s %s does not cover the payout's %s; it waits until it does",
		ReasonInsufficientAvailable, inCurrency(available, currency), currency, inCurrency(net, currency))
}

// ReasonLedgerRefused starts the reason of a payout that waits because the
// ledger refused moving it to in_transit while available covered it.
const ReasonLedgerRefused = "ledger_refused"

// LedgerRefusedReason is the reason of a payout the ledger refused for
// another reason than available (the payout service logs its answer).
const LedgerRefusedReason = ReasonLedgerRefused + ": the ledger refused moving the payout to in_transit while available covers it; it is tried again at the gate"

// FailRailAmountMismatch is the failure_code of a payout whose rail holds
// its reference at another amount or currency than the payout's net: a
// payout made again after a restore or a recovery, at another net than the
// one the rail was sent before the disaster. It is neither recorded paid
// or in transit (the rail moved another amount) nor sent again (the rail
// has the reference): it stays submitted, its net in in_transit, for
// finance to review; only the rail failing the reference moves it on.
const FailRailAmountMismatch = "rail_amount_mismatch"

// RailAmountMismatchMessage is the failure_message of a payout
// FailRailAmountMismatch marks: both amounts.
func RailAmountMismatchMessage(rail, ref string, railAmount decimal.Decimal, railCurrency string, net decimal.Decimal, currency string) string {
	return fmt.Sprintf("%s holds %s at %s %s, the payout is %s %s: not recorded paid or sent again; for finance to review",
		rail, ref, inCurrency(railAmount, railCurrency), railCurrency, inCurrency(net, currency), currency)
}

// AvailableAccount is provider:{id}:available (DESIGN §4).
func AvailableAccount(provider string) string { return ids.ProviderAvailable(provider) }

// InTransitAccount is provider:{id}:in_transit.
func InTransitAccount(provider string) string { return ids.ProviderInTransit(provider) }

// ClientBank is the segregated client-money bank account.
const ClientBank = ids.BankClient

// Movement is one ledger transaction of a payout step: Dr Debit, Cr Credit.
type Movement struct{ Debit, Credit string }

// MovementFor returns the ledger movement that enters status to (DESIGN
// §4), and whether there is one: submission moves available to in_transit;
// paid leaves the client bank; failed, or canceled in the bank-file queue
// (CanceledInQueue; canceled before submission it moved nothing), puts
// in_transit back to available; a return brings the cash back to the
// client bank and to available.
func MovementFor(provider, to string) (Movement, bool) {
	switch to {
	case StatusSubmitted:
		return Movement{AvailableAccount(provider), InTransitAccount(provider)}, true
	case StatusPaid:
		return Movement{InTransitAccount(provider), ClientBank}, true
	case StatusFailed, StatusCanceled:
		return Movement{InTransitAccount(provider), AvailableAccount(provider)}, true
	case StatusReturned:
		return Movement{ClientBank, AvailableAccount(provider)}, true
	}
	return Movement{}, false
}

// LedgerKey is the idempotency key of a payout step's ledger transaction:
// one per payout, attempt and step, so a retried activity replays it.
func LedgerKey(payoutID string, attempt int, step string) string {
	return fmt.Sprintf("payout-%s-%d-%s", payoutID, attempt, step)
}

// RailReference is the reference the rail knows a payout attempt by: the
// payout id for the first attempt, then payout id + "-" + attempt (a retry
// after a definite failure; never after an unknown result).
func RailReference(payoutID string, attempt int) string {
	if attempt <= 1 {
		return payoutID
	}
	return fmt.Sprintf("%s-%d", payoutID, attempt)
}

// RailReferencePayout is the payout id of RailReference ref of a retry
// (payout id + "-" + attempt); any other ref as it is. A payout id whose
// last part is all digits reads as a retry's: look both up.
func RailReferencePayout(ref string) string {
	i := strings.LastIndexByte(ref, '-')
	if i < 0 || i == len(ref)-1 || strings.Trim(ref[i+1:], "0123456789") != "" {
		return ref
	}
	return ref[:i]
}

// TaskQueue is the Temporal task queue payout workers poll.
const TaskQueue = "payout"

// WorkflowID is the Temporal workflow of a payout on TaskQueue.
func WorkflowID(payoutID string) string { return "payout-" + payoutID }

// WorkflowIDOn is the workflow of a payout whose worker polls queue:
// WorkflowID on TaskQueue, and the queue in it on any other. Payout ids
// are derived from the settlement (PayoutID), so two deployments on one
// Temporal namespace — each test stack has a task queue of its own —
// make the same ids, and the second's start found the first's run.
func WorkflowIDOn(queue, payoutID string) string {
	if queue == "" || queue == TaskQueue {
		return WorkflowID(payoutID)
	}
	return "payout-" + queue + "-" + payoutID
}

// HeldReasonPrefix starts the reason of a payout finance holds.
const HeldReasonPrefix = "held by finance: "

// HeldQueuedNote is the status reason (and history note) of a submitted
// payout whose bank transfer, queued for a cutoff, a hold keeps out of the
// bank file: it stays queued and goes in the first cut after the release.
func HeldQueuedNote(reason string) string {
	return HeldReasonPrefix + reason + " (its bank transfer stays queued, out of the bank file, until the hold is released)"
}

// HoldReleasedQueuedNote is the note of a submitted payout whose queued
// bank transfer a released hold lets go.
const HoldReleasedQueuedNote = "hold released by finance: its queued bank transfer goes in the next bank file"

// KYCRejectedQueuedNote is the status reason (and history note) of a
// submitted payout whose bank transfer, queued for a cutoff, its
// provider's KYC rejected by finance keeps out of the bank file, as a hold
// does (HeldQueuedNote).
const KYCRejectedQueuedNote = "kyc rejected by finance (its bank transfer stays queued, out of the bank file, until finance changes the verdict)"

// KYCRejectedHeld is what the bank-file rail answers as the hold (the
// rail status's Held) of a transfer queued for a provider whose KYC
// finance rejected and does not hold otherwise: the cut leaves it out.
const KYCRejectedHeld = "kyc rejected"

// KYCReleasedQueuedNote is the note of a submitted payout whose queued
// bank transfer finance's change of a rejected KYC lets go.
const KYCReleasedQueuedNote = "kyc no longer rejected by finance: its queued bank transfer goes in the next bank file"

// BankBatchLockKey is the Postgres advisory lock (transaction-scoped)
// under which the bank-file rail cuts a batch (exclusive) and a hold is
// placed or released (shared): a hold placed as a batch is cut is either
// seen by the cut (its provider's queued transfers stay out) or placed
// after it (they are batched, and the hold answers them in flight).
const BankBatchLockKey int64 = 0x62616e6b66696c65 // "bankfile"
