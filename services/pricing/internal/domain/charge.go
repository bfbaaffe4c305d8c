package domain

import (
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// UsageEvent is a recorded usage event as metering publishes it
// (usage.recorded), with the parties' fields pricing needs.
type UsageEvent struct {
	ID, LeaseID, ProviderID, RenterID, GPUModel string
	GPUCount                                    int32
	Start, End                                  time.Time
	Region, Workload                            string
	Currency                                    string // the renter's
	ProviderTier, ProviderPUE                   string // PUE: decimal string, "" when unknown
	CycleID                                     string
	ReceivedAt                                  time.Time // zero when not stated
}

// PendingUsage is an event no rate card prices yet, kept until one does.
type PendingUsage struct {
	Event     UsageEvent
	MessageID string // the message (or pending row) it came from
	Reason    string
}

// RenterMonth names a renter's volume-tier month (2006-01).
type RenterMonth struct{ RenterID, Month string }

// LeaseCurrency names a lease's cumulative rounding state.
type LeaseCurrency struct{ LeaseID, Currency string }

// Charge is a rated charge: a lease's usage of one rating in one cycle,
// rounded cumulatively, with its lines.
type Charge struct {
	ID, SourceID, LeaseID, RenterID, ProviderID, CycleID string
	Currency                                             money.Currency
	Amount                                               decimal.Decimal // billed (rounded) now
	ExactAmount                                          decimal.Decimal // at ExactScale
	ExactPS                                              decimal.Decimal // price-seconds
	EventIDs                                             []string
	EffectiveAt                                          time.Time
	Lines                                                []ChargeLine
}

// ChargeLine is one line of a charge: the pieces of its events that price
// alike. EventID is the first event the line prices.
type ChargeLine struct {
	EventID, Kind, GPUModel string
	GPUCount                int32
	Band, Tier, RateCardID  string
	Start, End              time.Time
	// Decimals as exact strings without trailing zeros.
	GPUHours, UnitPrice, Multiplier, Amount string
}

// ChargeBatch is one provider's charges of one rating (charges.rated.{provider}).
type ChargeBatch struct {
	ID, ProviderID string
	Charges        []*Charge
}

// StoredCard is a rate card version as stored: its input, normalised.
type StoredCard struct {
	ID            string
	Currency      string
	EffectiveFrom time.Time
	Body          CardInput // ID empty, Currency the card's code, models canonical
	Seq           int64
	CreatedAt     time.Time
}
