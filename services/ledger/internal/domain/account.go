// Package domain holds the ledger's pure rules: the chart of accounts and its
// address grammar, transactions and their balancing, the overdraft policy, the
// canonical form the hash chain covers, and segregation of client money.
package domain

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Kind is an account's side of the balance sheet.
type Kind string

// Kinds (DESIGN §4).
const (
	KindAsset     Kind = "asset"
	KindLiability Kind = "liability"
	KindIncome    Kind = "income"
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
	BankClient         = "bank:client"
	BankOperating      = "bank:operating"
	PlatformCommission = "platform:revenue:commission"
)

// Provider sub-accounts.
const (
	ProviderPending   = "pending"
	ProviderAvailable = "available"
	ProviderInTransit = "in_transit"
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

var (
	partyIDRe      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	jurisdictionRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,15}$`)
)

// ParseAddress validates an address against the chart of accounts (DESIGN §4).
func ParseAddress(addr string) (Account, error) {
	parts := strings.Split(addr, ":")
	bad := func(why string) (Account, error) {
		return Account{}, fmt.Errorf("address %q: %s", addr, why)
	}
	switch parts[0] {
	case "bank":
		if len(parts) == 2 && parts[1] == "client" {
			return Account{Address: addr, Class: ClassBank, Kind: KindAsset, Pool: PoolClient}, nil
		}
		if len(parts) == 2 && parts[1] == "operating" {
			return Account{Address: addr, Class: ClassBank, Kind: KindAsset, Pool: PoolHouse}, nil
		}
		return bad("want bank:client or bank:operating")
	case "renter":
		if len(parts) != 3 || parts[2] != "wallet" {
			return bad("want renter:{id}:wallet")
		}
		if !partyIDRe.MatchString(parts[1]) {
			return bad("renter id must be 1-64 of [A-Za-z0-9._-]")
		}
		return Account{Address: addr, Class: ClassRenter, Kind: KindLiability, Pool: PoolClient, Party: parts[1]}, nil
	case "provider":
		if len(parts) < 3 || !partyIDRe.MatchString(parts[1]) {
			return bad("want provider:{id}:pending:{cycle}, provider:{id}:available or provider:{id}:in_transit")
		}
		a := Account{Address: addr, Class: ClassProvider, Kind: KindLiability, Pool: PoolClient, Party: parts[1], Sub: parts[2]}
		switch {
		case len(parts) == 4 && parts[2] == ProviderPending:
			if err := CheckCycleID(parts[3]); err != nil {
				return bad(err.Error())
			}
			a.Cycle = parts[3]
			return a, nil
		case len(parts) == 3 && (parts[2] == ProviderAvailable || parts[2] == ProviderInTransit):
			return a, nil
		}
		return bad("want provider:{id}:pending:{cycle}, provider:{id}:available or provider:{id}:in_transit")
	case "tax":
		if len(parts) != 3 || parts[1] != "withheld" || !jurisdictionRe.MatchString(parts[2]) {
			return bad("want tax:withheld:{jurisdiction}")
		}
		return Account{Address: addr, Class: ClassTax, Kind: KindLiability, Pool: PoolTax, Party: parts[2]}, nil
	case "platform":
		if addr == PlatformCommission {
			return Account{Address: addr, Class: ClassPlatform, Kind: KindIncome, Pool: PoolHouse}, nil
		}
		return bad("want platform:revenue:commission")
	}
	return bad("unknown account class (bank, renter, provider, tax, platform)")
}

// CheckCycleID checks the cyc-YYYYMMDD form.
func CheckCycleID(id string) error {
	if len(id) != len("cyc-20060102") || !strings.HasPrefix(id, "cyc-") {
		return fmt.Errorf("cycle %q: want cyc-YYYYMMDD", id)
	}
	if _, err := time.Parse("20060102", id[4:]); err != nil {
		return fmt.Errorf("cycle %q: want cyc-YYYYMMDD", id)
	}
	return nil
}

// RenterWallet is renter:{id}:wallet.
func RenterWallet(renter string) string { return "renter:" + renter + ":wallet" }

// ProviderPendingAddr is provider:{id}:pending:{cycle}.
func ProviderPendingAddr(provider, cycle string) string {
	return "provider:" + provider + ":pending:" + cycle
}

// NormalBalance is an account's balance on its normal side: what the platform
// owes a client (liability) or has earned (income) is credits − debits; cash
// held (asset) is debits − credits.
func (a Account) NormalBalance(debits, credits decimal.Decimal) decimal.Decimal {
	if a.Kind == KindAsset {
		return debits.Sub(credits)
	}
	return credits.Sub(debits)
}

// MayGoNegative is the overdraft policy: only renter wallets may go negative
// (usage keeps accruing until the scheduler stops the renter's leases); every
// other account may be taken below zero only by a reversal.
func (a Account) MayGoNegative() bool { return a.Class == ClassRenter }
