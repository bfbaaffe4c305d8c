package domain

import (
	"time"

	"github.com/shopspring/decimal"
)

// RenterLimit is the ledger's read model of a renter (metering owns it):
// its currency and credit limit, and when it was closed (zero: open).
type RenterLimit struct {
	RenterID, Currency string
	CreditLimit        decimal.Decimal
	Version            int64
	UpdatedAt          time.Time
	ClosedAt           time.Time
}
