// Package domain holds the ledger's pure rules: the chart of accounts and its
// address grammar, transactions and their balancing, the overdraft policy, the
// canonical form the hash chain covers, and segregation of client money.
package domain

import (
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/ids"
)

// Kind is an account's side of the balance sheet.
type Kind string

// Kinds (DESIGN §4).
const (
	KindAsset     Kind = "asset"
	KindLiability Kind = "liability"
	KindIncome    Kind = "income"
	// KindExpense is the house's expense (a renter's debt written off):
	// like an asset, its normal side is debits.
	KindExpense Kind = "expense"
)

// Pool is the fund pool an account's money belongs to.
type Pool string

// Pools: client money is segregated from the house's own money; tax withheld
// is owed to the tax authority.
const (
	PoolClient Pool = "client"
	PoolHouse  Pool = "house"
	PoolTax    Pool = "tax"
)

// Class is the first segment of an address (the subject of ledger.posted.{class}).
type Class string

// Account classes.
const (
	ClassBank     Class = "bank"
	ClassRenter   Class = "renter"
	ClassProvider Class = "provider"
	ClassTax      Class = "tax"
	ClassPlatform Class = "platform"
)

// Well-known addresses.
const (
	BankClient         = ids.BankClient
	BankOperating      = ids.BankOperating
	PlatformCommission = ids.PlatformCommission
	PlatformBadDebt    = ids.PlatformBadDebt
)

// Provider sub-accounts.
const (
	ProviderPending   = ids.SubPending
	ProviderAvailable = ids.SubAvailable
	ProviderInTransit = ids.SubInTransit
)

// Account is a parsed, valid address with its place in the chart.
type Account struct {
	Address string
	Class   Class
	Kind    Kind
	Pool    Pool
	// Party is the renter or provider id, or the tax jurisdiction.
	Party string
	// Sub is the provider sub-account (pending, available, in_transit).
	Sub string
	// Cycle is the settlement cycle of a provider pending account.
	Cycle string
}

// ParseAddress validates an address against the chart of accounts (DESIGN §4)
// and the one id grammar every service shares (pkg/ids).
func ParseAddress(addr string) (Account, error) {
	a, err := ids.ParseAddress(addr)
	if err != nil {
		return Account{}, err
	}
	acc := Account{Address: addr, Class: Class(a.Class), Party: a.Party, Cycle: a.Cycle}
	switch acc.Class {
	case ClassBank:
		acc.Kind, acc.Pool = KindAsset, PoolClient
		if addr == BankOperating {
			acc.Pool = PoolHouse
		}
	case ClassRenter:
		acc.Kind, acc.Pool = KindLiability, PoolClient
	case ClassProvider:
		acc.Kind, acc.Pool, acc.Sub = KindLiability, PoolClient, a.Sub
	case ClassTax:
		acc.Kind, acc.Pool = KindLiability, PoolTax
	case ClassPlatform:
		acc.Kind, acc.Pool = KindIncome, PoolHouse
		if addr == PlatformBadDebt {
			acc.Kind = KindExpense
		}
	default:
		return Account{}, fmt.Errorf("address %q: class %q has no place in the chart", addr, a.Class)
	}
	return acc, nil
}

// CheckCycleID checks the cyc-YYYYMMDD form.
func CheckCycleID(id string) error { return ids.CheckCycleID(id) }

// RenterWallet is renter:{id}:wallet.
func RenterWallet(renter string) string { return ids.RenterWallet(renter) }

// ProviderPendingAddr is provider:{id}:pending:{cycle}.
func ProviderPendingAddr(provider, cycle string) string {
	return ids.ProviderPending(provider, cycle)
}

// NormalBalance is an account's balance on its normal side: what the platform
// owes a client (liability) or has earned (income) is credits − debits; cash
// held (asset) is debits − credits.
func (a Account) NormalBalance(debits, credits decimal.Decimal) decimal.Decimal {
	if a.DebitNormal() {
		return debits.Sub(credits)
	}
	return credits.Sub(debits)
}

// DebitNormal tells whether the account's normal side is debits (an asset,
// an expense).
func (a Account) DebitNormal() bool { return a.Kind == KindAsset || a.Kind == KindExpense }

// MayGoNegative is the overdraft policy: only renter wallets may go negative
// (usage keeps accruing until the scheduler stops the renter's leases); every
// other account may be taken below zero only by a reversal.
func (a Account) MayGoNegative() bool { return a.Class == ClassRenter }
