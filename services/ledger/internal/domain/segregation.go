package domain

import (
	"fmt"

	"github.com/shopspring/decimal"
)

// Breach is a transaction that moved money between the client pool and the
// house pool other than by a sanctioned movement (DESIGN §4).
type Breach struct {
	Account  string // the house-pool account touched
	FromPool Pool
	ToPool   Pool
	Amount   decimal.Decimal
	Currency string
	Reason   string
}

// SegregationBreaches classifies one transaction's postings. Money may cross
// between the client and house pools only by:
//   - settlement: Dr provider:*:pending:* ; Cr platform:revenue:commission,
//     tax:withheld:*, provider:*:available;
//   - the commission sweep: Dr bank:operating, Cr bank:client;
//
// and the exact mirrors of those (their reversals). Anything else touching
// both pools is a breach, reported per house-pool posting.
func SegregationBreaches(ps []Posting) []Breach {
	var client, house bool
	for _, p := range ps {
		switch p.Account.Pool {
		case PoolClient:
			client = true
		case PoolHouse:
			house = true
		}
	}
	if !client || !house {
		return nil
	}
	if isSettlement(ps, false) || isSettlement(ps, true) || isSweep(ps, false) || isSweep(ps, true) {
		return nil
	}
	var out []Breach
	for _, p := range ps {
		if p.Account.Pool != PoolHouse {
			continue
		}
		from, to := PoolClient, PoolHouse
		// A house asset debited or house income credited: money arrived in the house.
		if (p.Account.Kind == KindAsset && p.Direction == Credit) || (p.Account.Kind != KindAsset && p.Direction == Debit) {
			from, to = PoolHouse, PoolClient
		}
		out = append(out, Breach{
			Account: p.Account.Address, FromPool: from, ToPool: to, Amount: p.Amount, Currency: p.Currency,
			Reason: fmt.Sprintf("%s %s %s %s crosses the client/house boundary outside settlement and the commission sweep",
				p.Direction, p.Account.Address, p.Amount.String(), p.Currency),
		})
	}
	return out
}

// isSettlement: debits only on provider pending; credits only on commission,
// tax withheld or provider available (mirror swaps the sides).
func isSettlement(ps []Posting, mirror bool) bool {
	for _, p := range ps {
		debit := (p.Direction == Debit) != mirror
		pending := p.Account.Class == ClassProvider && p.Account.Sub == ProviderPending
		target := p.Account.Address == PlatformCommission || p.Account.Class == ClassTax ||
			(p.Account.Class == ClassProvider && p.Account.Sub == ProviderAvailable)
		if debit && !pending || !debit && !target {
			return false
		}
	}
	return true
}

// isSweep: Dr bank:operating, Cr bank:client only (mirror swaps the sides).
func isSweep(ps []Posting, mirror bool) bool {
	for _, p := range ps {
		debit := (p.Direction == Debit) != mirror
		if debit && p.Account.Address != BankOperating || !debit && p.Account.Address != BankClient {
			return false
		}
	}
	return true
}
