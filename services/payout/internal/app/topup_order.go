package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
)

// Checkout is a rail renters top up on: it makes the rail's payment order
// for a renter (the renter's id travels with it and comes back in the
// rail's signed payment notification, which TopUps.Apply deposits).
type Checkout interface {
	// Order makes order orderID for amount in currency, first opened at
	// opened, and answers where the renter pays it and when the rail closes
	// it unpaid (from opened: the same order asked again is the same
	// request to the rail). A currency or amount the rail does not take is
	// an *apperr.InvalidError; the rail's refusal of the order is an
	// apperr.ErrConflict or apperr.ErrPrecondition naming its code.
	Order(ctx context.Context, renterID string, amount decimal.Decimal, currency, orderID string, opened time.Time) (payURL string, expires time.Time, err error)
	// CheckOrder refuses a currency or an amount the rail does not take
	// (an *apperr.InvalidError), before an order is kept under its key.
	CheckOrder(currency string, amount decimal.Decimal) error
	// OrderTimeout is how long after it was first opened the rail closes
	// an order unpaid.
	OrderTimeout() time.Duration
}

// TopUpOrder is a top-up a renter opened.
type TopUpOrder struct {
	ID, RenterID, Rail, Currency, PayURL string
	Amount                               decimal.Decimal
	OpenedAt                             time.Time // when the key first opened it
	ExpiresAt                            time.Time
}

// TopUpOrderInput is a renter's request to top up.
type TopUpOrderInput struct {
	RenterID, Rail, Amount, Currency, IdempotencyKey string
}

// topUpKeyLenMax bounds an idempotency key.
const topUpKeyLenMax = 128

// TopUpOrders opens renters' top-ups on the configured rails. The order
// number is derived from the renter and the idempotency key, so the same
// key answers the same order, which the rail pays once; the deposit comes
// from the rail's notification. Each order is kept as first opened: the key
// again with another rail, amount or currency is a conflict (it opened a
// second payable order on the other rail: a renter whose client switched
// rails after a lost answer paid, and was credited, twice).
type TopUpOrders struct {
	Rails  map[string]Checkout // by rail name; only the rails configured for top-ups
	Orders TopUpOrderStore
	Clock  clock.Clock
}

// TopUpOrderStore keeps the top-up orders opened.
type TopUpOrderStore interface {
	// KeepTopUpOrder stores o unless its order number is stored, and
	// returns the order stored under it.
	KeepTopUpOrder(ctx context.Context, o TopUpOrder, at time.Time) (TopUpOrder, error)
}

// ErrUnknownTopUpOrder is an order number no renter's top-up opened.
var ErrUnknownTopUpOrder = errors.New("no top-up order of this number")

// TopUpOrderReader reads the top-up orders opened: a rail's refund
// notification that names no renter (WeChat Pay's) finds its renter by the
// order number.
type TopUpOrderReader interface {
	// TopUpOrder is the order of number id as kept (its renter, rail,
	// currency and amount); ErrUnknownTopUpOrder when none was opened.
	TopUpOrder(ctx context.Context, id string) (TopUpOrder, error)
	// DepositedTopUp is a payment a rail's notification deposited, as
	// kept (its renter, currency and amount; ID the payment's id):
	// payments made before orders were kept (payout/0011) have no order.
	// ErrUnknownTopUpOrder when none was deposited.
	DepositedTopUp(ctx context.Context, rail, paymentID string) (TopUpOrder, error)
}

// Configured lists the rails top-ups may use.
func (o *TopUpOrders) Configured() []string {
	out := make([]string, 0, len(o.Rails))
	for n := range o.Rails {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TopUpOrderID is the order number of a renter's top-up under an
// idempotency key: "tu" and 30 hex digits of SHA-256 over both (32
// characters: within every rail's merchant order number).
func TopUpOrderID(renterID, key string) string {
	h := sha256.Sum256([]byte(renterID + "\x00" + key))
	return "tu" + hex.EncodeToString(h[:15])
}

// Create validates the request and makes the rail's order.
func (o *TopUpOrders) Create(ctx context.Context, in TopUpOrderInput) (TopUpOrder, error) {
	var v apperr.Validator
	if err := ids.CheckPartyID(in.RenterID); err != nil {
		v.Add("renter_id", "%s", err.Error())
	}
	rail, ok := o.Rails[in.Rail]
	if !ok {
		configured := strings.Join(o.Configured(), ", ")
		if configured == "" {
			configured = "none is configured"
		}
		v.Add("rail", "want a top-up rail: %s", configured)
	}
	key := strings.TrimSpace(in.IdempotencyKey)
	if key == "" || len(key) > topUpKeyLenMax {
		v.Add("idempotency_key", "required, at most %d characters", topUpKeyLenMax)
	}
	var amount decimal.Decimal
	cur, err := money.Lookup(in.Currency)
	if err != nil {
		v.Add("currency", "%s", err.Error())
	} else if amount, err = cur.Parse(in.Amount); err != nil {
		v.Add("amount", "%s", err.Error())
	} else if !amount.IsPositive() {
		v.Add("amount", "%s must be positive", in.Amount)
	}
	if err := v.Err(); err != nil {
		return TopUpOrder{}, err
	}
	// Refused before the order is kept: kept, a request the rail then
	// refused held its key for good, the corrected one a 409.
	if err := rail.CheckOrder(cur.Code, amount); err != nil {
		return TopUpOrder{}, err
	}
	t := TopUpOrder{ID: TopUpOrderID(in.RenterID, key), RenterID: in.RenterID, Rail: in.Rail, Currency: cur.Code, Amount: amount}
	kept, err := o.Orders.KeepTopUpOrder(ctx, t, o.Clock.Now())
	if err != nil {
		return TopUpOrder{}, fmt.Errorf("top-up %s: %w", t.ID, err)
	}
	if kept.Rail != t.Rail || kept.Currency != t.Currency || !kept.Amount.Equal(t.Amount) {
		return TopUpOrder{}, fmt.Errorf("idempotency key opened top-up %s on %s for %s %s; this request asks %s %s on %s: %w",
			t.ID, kept.Rail, kept.Amount, kept.Currency, t.Amount, t.Currency, t.Rail, apperr.ErrConflict)
	}
	t.OpenedAt = kept.OpenedAt
	// Not asked again once expired: the rail refuses a time_expire past
	// (WeChat Pay: PARAM_ERROR, a 500) or would show a closed order.
	if expires := t.OpenedAt.Add(rail.OrderTimeout()); !o.Clock.Now().Before(expires) {
		return TopUpOrder{}, fmt.Errorf("%w: top-up %s opened at %s expired at %s unpaid: open a new one with a new idempotency key",
			apperr.ErrPrecondition, t.ID, t.OpenedAt.UTC().Format(time.RFC3339), expires.UTC().Format(time.RFC3339))
	}
	if t.PayURL, t.ExpiresAt, err = rail.Order(ctx, t.RenterID, t.Amount, t.Currency, t.ID, t.OpenedAt); err != nil {
		return TopUpOrder{}, fmt.Errorf("top-up %s on %s: %w", t.ID, t.Rail, err)
	}
	return t, nil
}
