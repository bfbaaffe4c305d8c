package domain

import (
	"time"

	"github.com/shopspring/decimal"
)

// RenterCharge is a rated charge as a renter reads it: what its wallet was
// charged for one lease, and the lines that explain the amount.
type RenterCharge struct {
	ChargeID, LeaseID, RenterID, ProviderID, CycleID, Currency string
	Amount, ExactAmount                                        decimal.Decimal
	EffectiveAt                                                time.Time
	Lines                                                      []RenterChargeLine
}

// RenterChargeLine is one line of a charge: a GPU model's hours in one
// time band and volume tier, or a PUE surcharge. Decimals are exact strings.
type RenterChargeLine struct {
	Kind, GPUModel                             string
	GPUCount                                   int32
	Band, Tier, RateCardID                     string
	Start, End                                 time.Time
	GPUHours, UnitPrice, Multiplier, AmountDec string
}
