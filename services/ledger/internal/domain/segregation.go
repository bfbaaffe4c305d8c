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
// between the client and house pools only by the settlement service's own
// movements, named by their metadata kind (which only the service identity
// may give, so a finance entry of the same shape is a breach):
//   - settlement (kind settlement): Dr provider:*:pending:* ; Cr
//     platform:revenue:commission, tax:withheld:*, provider:*:available;
//   - the commission sweep (kind commission_sweep): Dr bank:operating, Cr
//     bank:client;
//   - both in one transaction (kind settlement: settlement posts them
//     together when bank:client can fund the sweep, else the sweep
//     follows on its own and the report's memo names the commission until
//     it does), the sweep legs equal per currency to the commission credited;
//
// by finance's two entries of the house's own money into the client pool,
// named by their transaction kind (which CreateTransaction gives only to
// an entry of the shape, with a reason):
//   - client money funding (TxClientMoneyFunding): Dr bank:client, Cr
//     bank:operating, the house making good a client-money shortfall;
//   - a bad debt write-off (TxBadDebtWriteOff): Dr platform:expense:bad_debt,
//     Cr renter:*:wallet, a renter's debt the house bears;
//
// and by a reversal, the exact mirror of a transaction: of a settlement or a
// sweep by its shape, of finance's funding or write-off by the kind of the
// entry it reverses (MetaReversesKind, which the ledger alone gives a
// reversal) and that entry's shape mirrored; the same movement posted
// otherwise, money back from the client pool to the house, stays a
// breach. Anything else
// touching both pools is a breach, reported per house-pool posting: by
// shape alone, a finance entry Dr bank:operating / Cr bank:client of any
// amount passed as a sweep, and one taking a whole gross as commission as
// a settlement.
func SegregationBreaches(t *Transaction) []Breach {
	return breaches(t.Postings, sanctioned(t))
}

// SegregationBreachesByShape is the rule before migration ledger/0019: a
// movement of a sanctioned shape (or its mirror) passed, whoever posted it.
// Verify applies it to a journal whose breaches were recorded under it (a
// snapshot taken before, restored), so it names no breach its recorder
// never recorded as altered.
func SegregationBreachesByShape(t *Transaction) []Breach {
	ps := t.Postings
	ok := isSettlement(ps, false) || isSettlement(ps, true) || isSweep(ps, false) || isSweep(ps, true) ||
		isSettlementWithSweep(ps, false) || isSettlementWithSweep(ps, true)
	return breaches(ps, ok)
}

// HouseNetDebit is the breach's house-pool posting as debits - credits, as
// breaches reads its direction: money arriving in the house debits a house
// asset or credits house income, money leaving does the opposite. A row on
// any other account (breaches records none) is in no house-pool balance:
// zero.
func (b Breach) HouseNetDebit() decimal.Decimal {
	acc, err := ParseAddress(b.Account)
	if err != nil || acc.Pool != PoolHouse {
		return decimal.Zero
	}
	if (acc.Kind == KindAsset) == (b.ToPool == PoolHouse) {
		return b.Amount
	}
	return b.Amount.Neg()
}

// breaches are the house-pool postings of a transaction touching both
// pools, unless it is sanctioned.
func breaches(ps []Posting, sanctioned bool) []Breach {
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
	if sanctioned {
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

// sanctioned tells whether t is one of the movements that may cross.
func sanctioned(t *Transaction) bool {
	ps, mirror := t.Postings, t.Kind == TxReversal
	switch {
	case mirror:
		return isSettlement(ps, true) || isSweep(ps, true) || isSettlementWithSweep(ps, true) || reversesHouseEntry(t)
	case t.Metadata["kind"] == KindSettlement:
		return isSettlement(ps, false) || isSettlementWithSweep(ps, false)
	case t.Metadata["kind"] == KindCommissionSweep:
		return isSweep(ps, false)
	case t.Kind == TxClientMoneyFunding:
		return IsClientMoneyFunding(ps)
	case t.Kind == TxBadDebtWriteOff:
		return IsBadDebtWriteOff(ps)
	}
	return false
}

// MetaReversesKind is the metadata key of a reversal of finance's funding
// or write-off: the reversed entry's kind. ReverseTransaction sets it from
// the journal; on any entry but a reversal it sanctions nothing.
const MetaReversesKind = "reverses_kind"

// reversesHouseEntry: t, a reversal, mirrors a client money funding or a
// bad debt write-off, as its MetaReversesKind says, exactly.
func reversesHouseEntry(t *Transaction) bool {
	switch t.Metadata[MetaReversesKind] {
	case KindClientMoneyFunding:
		return IsClientMoneyFunding(Mirror(t.Postings))
	case KindBadDebtWriteOff:
		return IsBadDebtWriteOff(Mirror(t.Postings))
	}
	return false
}

// The metadata kinds of settlement's postings (a settlement with its sweep,
// and a sweep posted on its own).
const (
	KindSettlement      = "settlement"
	KindCommissionSweep = "commission_sweep"
)

// The metadata kinds of finance's entries of house money into the client
// pool (CreateTransaction gives them their transaction kinds).
const (
	KindClientMoneyFunding = "client_money_funding"
	KindBadDebtWriteOff    = "bad_debt_write_off"
)

// KindRailRefund is the metadata kind of finance's entry recording a
// refund a rail (Alipay, WeChat Pay) already made of a renter's top-up:
// Dr renter:{id}:wallet / Cr bank:client, naming the deposit's
// external_ref. The money has left, so it may take the wallet below zero;
// any other refund may not (app.checkRefunds).
const KindRailRefund = "rail_refund"

// IsRenterRefund: money paid out of client money to a renter, Dr renter
// wallets / Cr bank:client only.
func IsRenterRefund(ps []Posting) bool {
	for _, p := range ps {
		if p.Direction == Debit && p.Account.Class != ClassRenter || p.Direction == Credit && p.Account.Address != BankClient {
			return false
		}
	}
	return len(ps) > 0
}

// IsClientMoneyFunding: Dr bank:client, Cr bank:operating only (house →
// client; isSweep's mirror).
func IsClientMoneyFunding(ps []Posting) bool { return len(ps) > 0 && isSweep(ps, true) }

// IsBadDebtWriteOff: Dr platform:expense:bad_debt, Cr renter wallets only.
func IsBadDebtWriteOff(ps []Posting) bool {
	for _, p := range ps {
		if p.Direction == Debit && p.Account.Address != PlatformBadDebt || p.Direction == Credit && p.Account.Class != ClassRenter {
			return false
		}
	}
	return len(ps) > 0
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

// isSettlementWithSweep: a settlement and its commission sweep in one
// transaction: the bank:operating debits and bank:client credits form a sweep,
// the rest a settlement, and per currency the sweep moves exactly the
// commission credited (mirror swaps the sides).
func isSettlementWithSweep(ps []Posting, mirror bool) bool {
	var rest, sweep []Posting
	for _, p := range ps {
		if p.Account.Class == ClassBank {
			sweep = append(sweep, p)
		} else {
			rest = append(rest, p)
		}
	}
	if len(sweep) == 0 || len(rest) == 0 || !isSweep(sweep, mirror) || !isSettlement(rest, mirror) {
		return false
	}
	type sums struct{ operating, client, commission decimal.Decimal }
	by := map[string]*sums{}
	for _, p := range ps {
		s := by[p.Currency]
		if s == nil {
			s = &sums{}
			by[p.Currency] = s
		}
		switch p.Account.Address {
		case BankOperating:
			s.operating = s.operating.Add(p.Amount)
		case BankClient:
			s.client = s.client.Add(p.Amount)
		case PlatformCommission:
			s.commission = s.commission.Add(p.Amount)
		}
	}
	for _, s := range by {
		if !s.operating.Equal(s.commission) || !s.client.Equal(s.commission) {
			return false
		}
	}
	return true
}
