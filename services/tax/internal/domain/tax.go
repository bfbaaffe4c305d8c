// Package domain holds the tax service's entities and rules: a
// withholding (the split of a provider's gross into commission, tax and
// net by a rule set's version), the remittance of a month's withholdings
// to an authority, and the defaults for a provider without a profile. The
// rule sets' arithmetic (flat rate, CN labour brackets) is pkg/split, which
// pricing's quotes share.
package domain

import (
	"time"

	"github.com/shopspring/decimal"
)

// Profile is a provider's tax profile (read model of party.updated).
type Profile struct {
	ProviderID   string
	TaxProfile   string
	Jurisdiction string
	Version      int64
}

// Rule is a version of a rule set.
type Rule struct {
	RuleSet, Version, Jurisdiction string
	EffectiveFrom                  time.Time
	EffectiveUntil                 *time.Time
	IsDefault                      bool
	Description                    string
}

// Withholding is a recorded withholding (also its certificate).
type Withholding struct {
	ID, IdempotencyKey, ProviderID, CycleID, Currency string
	Gross, Commission, TaxableBase, Tax, Net          decimal.Decimal
	CommissionRate                                    *decimal.Decimal
	TaxProfile, Jurisdiction, RuleSet, RuleVersion    string
	CertificateID                                     string
	CreatedAt                                         time.Time
}

// Remittance is a payment of withheld tax to an authority.
type Remittance struct {
	ID, Period, Jurisdiction, Currency string
	Amount                             decimal.Decimal
	Status, TransactionID              string // Status: RemittancePending, RemittanceRemitted or RemittanceReversed
	CreatedAt                          time.Time
	RemittedAt                         *time.Time
	// ReversedBy is the ledger transaction that reversed TransactionID
	// (status RemittanceReversed), found at ReversedAt.
	ReversedBy string
	ReversedAt *time.Time
}

// The statuses of a remittance: planned and not posted yet, posted (its
// ledger transaction TransactionID), or posted and then undone by a
// reversal in the ledger. A reversed remittance holds no withholdings: they
// go back to its period's next remittance (another id, so another ledger
// key: the reversed one's would answer the reversed transaction).
const (
	RemittancePending  = "pending"
	RemittanceRemitted = "remitted"
	RemittanceReversed = "reversed"
)

// PostedTx is a ledger transaction as a remittance reads it: a withholding's
// settlement, posted under the withholding's idempotency key, or a
// remittance's own, posted under the remittance id.
type PostedTx struct {
	ID         string
	Reversed   bool                       // a reversal undid it
	ReversedBy string                     // that reversal's transaction id
	Credits    map[string]decimal.Decimal // credited amount by account + " " + currency
}

// Credited is the amount the transaction credits account in currency.
func (t PostedTx) Credited(account, currency string) decimal.Decimal {
	return t.Credits[account+" "+currency]
}

// ReportLine is the tax remitted for one provider in one remittance (of
// one period, jurisdiction and currency).
type ReportLine struct {
	RemittanceID, Period               string
	Jurisdiction, Currency, ProviderID string
	Tax                                decimal.Decimal
	Count                              int
}
