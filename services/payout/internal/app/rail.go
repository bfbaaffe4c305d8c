// Package app holds payout's use cases: the payout workflow (one per
// payout, payout-{id}) and the rail it drives.
package app

import (
	"context"
	"errors"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Rail states of a transfer, as a rail reports them.
const (
	RailAccepted  = "accepted"   // taken, not yet sent
	RailInTransit = "in_transit" // sent to the receiving bank or wallet
	RailPaid      = "paid"
	RailFailed    = "failed"
	RailReturned  = "returned" // paid, then bounced back
	// RailCanceled: taken back before it was sent (a bank transfer whose
	// payout finance canceled in the bank-file queue); it moves no payout.
	RailCanceled = "canceled"
)

// ErrUnknownReference is a rail's answer to a query for a reference it has
// never accepted: only then may the transfer be submitted.
var ErrUnknownReference = errors.New("rail: unknown reference")

// ErrRailUnavailable is an outage: the result is unknown, query again later.
var ErrRailUnavailable = errors.New("rail: unavailable")

// Transfer is one payout attempt as a rail receives it.
type Transfer struct {
	Reference  string // the payout id (or payout id-attempt): the rail's idempotency key
	ProviderID string
	Currency   string
	Amount     decimal.Decimal
	Method     domain.Method
}

// RailStatus is what a rail knows about a reference.
type RailStatus struct {
	Rail            string // the rail that answered ("" : the one called)
	Reference       string
	State           string // Rail*
	FailureCode     string // failed or returned: e.g. account_frozen
	Message         string
	ExpectedArrival time.Time // zero when unknown
	// Held is the reason finance holds the provider's payouts when the
	// rail keeps the transfer out of what it sends for it (the bank-file
	// rail: queued, left out of every cut until the release; no arrival
	// date meanwhile); "" when not held.
	Held string
	// Currency and Amount are what the rail holds under the reference,
	// when it says (Currency "": it does not). A payout made again after a
	// restore reaches its rail under the reference the rail already knows,
	// possibly at another net than the rail was sent (railAmountMismatch).
	Currency string
	Amount   decimal.Decimal
}

// railAmountMismatch reports whether the rail holds p's reference at
// another amount or currency than p's net (false when the rail does not
// say what it holds).
func railAmountMismatch(p domain.Payout, rs RailStatus) bool {
	return rs.Currency != "" && (rs.Currency != p.Currency || !rs.Amount.Equal(p.Net))
}

// Rail is a payout rail (bank, Alipay, WeChat Pay, the sandbox). Submit is
// idempotent by reference; a caller that did not get an answer must Query
// the reference before submitting again, and never submit the same payout
// attempt under another reference. Both return ErrRailUnavailable (or any
// other error) when the outcome is unknown.
type Rail interface {
	Name() string
	Submit(ctx context.Context, t Transfer) (RailStatus, error)
	Query(ctx context.Context, reference string) (RailStatus, error)
}

// RoutingRail is a rail over several (Router): each payout attempt is
// handed to one of them, named by RailFor at the gate and recorded on the
// attempt, and only that one is asked about its reference and given it.
type RoutingRail interface {
	Rail
	RailFor(methodType string) string
	QueryOn(ctx context.Context, rail, reference string) (RailStatus, error)
	SubmitTo(ctx context.Context, rail string, t Transfer) (RailStatus, error)
}

// Notifier is told when a rail has news about a reference (its asynchronous
// callback); the workflow then queries the rail.
type Notifier func(reference string)
