// Package domain holds settlement's pure types and rules: cycle statuses,
// ledger account addresses, and the check that a split sums back to gross.
package domain

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/ids"
)

// A provider's state in a cycle, all its currencies together (settlement's
// table: ProviderStates).
const (
	ProviderPending = ""        // some currency still pending
	ProviderHeld    = "held"    // held (its rows are held)
	ProviderSettled = "settled" // every currency settled
)

// Cycle statuses (DESIGN §5, §7).
const (
	CycleOpen    = "open"
	CycleClosing = "closing"
	CycleSettled = "settled"
)

// Settlement row statuses: the gross is snapshotted at close (pending), a
// finance hold keeps it pending in the ledger (held), then it is settled.
const (
	ItemPending = "pending"
	ItemHeld    = "held"
	ItemSettled = "settled"
)

// Ledger account addresses (DESIGN §4).
const (
	AccountCommission    = ids.PlatformCommission
	AccountBankClient    = ids.BankClient
	AccountBankOperating = ids.BankOperating
)

// PendingAccount is the provider's earnings held in a cycle.
func PendingAccount(provider, cycle string) string { return ids.ProviderPending(provider, cycle) }

// AvailableAccount is the provider's settled net awaiting payout.
func AvailableAccount(provider string) string { return ids.ProviderAvailable(provider) }

// TaxAccount is the tax withheld for a jurisdiction.
func TaxAccount(jurisdiction string) string { return ids.TaxWithheld(jurisdiction) }

// CycleWorkflowID and ProviderWorkflowID are deterministic (DESIGN §5).
func CycleWorkflowID(cycle string) string { return "settle-" + cycle }

// ProviderWorkflowID names the child that settles one provider in a cycle.
func ProviderWorkflowID(cycle, provider string) string { return "settle-" + cycle + "-" + provider }

// SettlementKey is the ledger idempotency key of a provider's settlement
// transaction in one currency: the workflow id plus the currency.
func SettlementKey(cycle, provider, currency string) string {
	return ProviderWorkflowID(cycle, provider) + ":" + currency
}

// SweepKey is the idempotency key of the commission sweep that follows it.
func SweepKey(cycle, provider, currency string) string {
	return SettlementKey(cycle, provider, currency) + ":sweep"
}

// Split is gross divided into commission, tax and net.
type Split struct {
	Currency       string
	Gross          decimal.Decimal
	CommissionRate decimal.Decimal
	Commission     decimal.Decimal
	Tax            decimal.Decimal
	Net            decimal.Decimal
	Jurisdiction   string
}

// Check asserts the invariant money rests on: no part negative, and
// commission + tax + net = gross exactly.
func (s Split) Check() error {
	for _, p := range []decimal.Decimal{s.Commission, s.Tax, s.Net} {
		if p.IsNegative() {
			return fmt.Errorf("split of %s %s has a negative part", s.Gross, s.Currency)
		}
	}
	if !s.Commission.Add(s.Tax).Add(s.Net).Equal(s.Gross) {
		return fmt.Errorf("split %s + %s + %s != gross %s %s", s.Commission, s.Tax, s.Net, s.Gross, s.Currency)
	}
	if s.Jurisdiction == "" && s.Tax.IsPositive() {
		return fmt.Errorf("tax %s %s withheld without a jurisdiction", s.Tax, s.Currency)
	}
	return nil
}

// Line is one statement line: a charge behind the gross.
type Line struct {
	TransactionID string `json:"transaction_id"`
	LeaseID       string `json:"lease_id,omitempty"`
	RenterID      string `json:"renter_id,omitempty"`
	GPUModel      string `json:"gpu_model,omitempty"`
	GPUHours      string `json:"gpu_hours,omitempty"`
	Amount        string `json:"amount"`
	Description   string `json:"description,omitempty"`
}

// LineAdjustment labels a statement line of one entry whose text the
// provider may not read (the ledger withholds the description and renter of
// an entry that moves another party's accounts too), or that has none.
const LineAdjustment = "adjustment"

// Posting directions.
const (
	Debit  = "debit"
	Credit = "credit"
)

// Leg is one posting of a ledger transaction.
type Leg struct {
	Account, Direction string
	Amount             decimal.Decimal
}

// SettlementLegs are a provider's settlement in a cycle (DESIGN §4): Dr
// provider:{id}:pending:{cycle} gross; Cr platform:revenue:commission,
// tax:withheld:{j} and provider:{id}:available net, each only with an
// amount.
func SettlementLegs(provider, cycle string, sp Split) []Leg {
	legs := []Leg{{Account: PendingAccount(provider, cycle), Direction: Debit, Amount: sp.Gross}}
	for _, l := range []Leg{
		{Account: AccountCommission, Direction: Credit, Amount: sp.Commission},
		{Account: TaxAccount(sp.Jurisdiction), Direction: Credit, Amount: sp.Tax},
		{Account: AvailableAccount(provider), Direction: Credit, Amount: sp.Net},
	} {
		if l.Amount.IsPositive() {
			legs = append(legs, l)
		}
	}
	return legs
}

// SweepLegs move the earned commission out of the client account (DESIGN
// §4): Dr bank:operating, Cr bank:client; none without a commission.
func SweepLegs(sp Split) []Leg {
	if !sp.Commission.IsPositive() {
		return nil
	}
	return []Leg{
		{Account: AccountBankOperating, Direction: Debit, Amount: sp.Commission},
		{Account: AccountBankClient, Direction: Credit, Amount: sp.Commission},
	}
}

// ProviderTier is one row of the tier read model.
type ProviderTier struct {
	ProviderID string
	Tier       string
	Version    int64
}

// Balance is one provider's gross in one currency at close.
type Balance struct {
	ProviderID string
	Currency   string
	Amount     decimal.Decimal
}

// PreparedItem is a provider's row in one currency.
type PreparedItem struct {
	Currency string
	Gross    decimal.Decimal
	Status   string
}

// Settled is what Finalize records for one provider, cycle and currency.
type Settled struct {
	CycleID, ProviderID, Tier string
	Split                     Split
	RuleSet, RuleVersion      string
	WithholdingID             string
	TransactionID, SweepID    string
	Lines                     []Line
}

// Unswept is a settled provider's commission whose sweep bank:client could
// not fund when it settled (its statement has no sweep transaction yet).
type Unswept struct {
	CycleID, ProviderID, Currency string
	Commission                    decimal.Decimal
	SettledAt                     time.Time
}

// Total is a cycle's total in one currency.
type Total struct {
	Currency                    string
	Gross, Commission, Tax, Net decimal.Decimal
	GrossUnsettled              decimal.Decimal // of the providers not settled yet
	Providers, ProvidersSettled int
}

// Cycle is a cycle row with its totals.
type Cycle struct {
	ID                         string
	Status                     string
	StartsAt, EndsAt, ClosesAt time.Time
	ClosedAt, SettledAt        *time.Time
	Totals                     []Total
}

// Hold is a provider's hold in a cycle.
type Hold struct {
	CycleID, ProviderID string
	Held                bool
	Reason              string
	UpdatedAt           time.Time
}

// Statement is a settled row.
type Statement struct {
	Settled
	CreatedAt time.Time
}

// StatementPos is a statement's place in the statements' order (cycle
// descending, then currency): a page of statements starts after it.
type StatementPos struct{ CycleID, Currency string }
