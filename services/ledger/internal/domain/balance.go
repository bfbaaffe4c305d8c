package domain

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// BalanceChange is the effect of one write on one (account, currency).
type BalanceChange struct {
	Account  Account
	Currency string
	Delta    decimal.Decimal // normal side
	After    decimal.Decimal // normal side, after the write
	Created  bool            // the balance row was created by this write
	Reversal bool            // every posting on it came from reversals
}

// Before is the balance before the write.
func (c BalanceChange) Before() decimal.Decimal { return c.After.Sub(c.Delta) }

// Totals are the debits and credits of an account in one currency.
type Totals struct {
	Currency        string
	Debits, Credits decimal.Decimal
}

// CycleBalance is a provider's pending balance in a cycle.
type CycleBalance struct {
	Account  string
	Currency string
	Amount   decimal.Decimal
}

// TxCursor is a position in an account's transactions, (created_at, id)
// order. XID is the Postgres transaction that wrote it (late ones only:
// TxPage).
type TxCursor struct {
	CreatedAt time.Time
	ID        string
	XID       uint64
}

// TxPage is a page of a transaction listing read under one Postgres
// snapshot. Late are the transactions committed since the previous page's
// snapshot (TxLate) that sort at or before its cursor, in (XID, ID) order:
// a transaction's id and created_at are taken before its commit, so one can
// commit after a later one was listed. Next are the ones after the cursor,
// in order. Snapshot is the page's own (pg_snapshot text), for the next
// page's TxLate. Refused says the late part was not read: TxLate's
// snapshots are none the journal can have had lately (ahead of the present,
// or too far behind it).
type TxPage struct {
	Late, Next []TxCursor
	Snapshot   string
	Refused    bool
}

// TxLate is where a page's late part starts: the transactions not visible
// in Seen (pg_snapshot text; "" on a listing's first page: none), visible in
// Upper ("": the page's own snapshot), after (XID, ID) in (xid, id) order
// (0 and "": from the first). A run of late transactions longer than a page
// goes on under the first page's snapshot as Upper, so the run is a fixed
// set paged in one order: none skipped, none repeated.
type TxLate struct {
	Seen, Upper string
	XID         uint64
	ID          string
}

// WalletDepletion is billing.wallet.depleted.{renter}: a debit took a renter
// wallet from above zero (or from nothing) to zero or below.
type WalletDepletion struct {
	RenterID      string
	Currency      string
	Balance       decimal.Decimal
	TransactionID string // the write's last transaction on the wallet
	At            time.Time
}

// NeedsJudging says which balances a write must show to its judges before it
// commits: the overdraft policy (an account that may not go negative taken
// below zero, reversals aside: Draws says where) and Depletions (a renter
// wallet taken to zero or below). A change of delta to acc (drawn: Draws
// holds its lowest point) needs judging if the balance it leaves is below
// zero, or at zero too when orZero; judge is false when no balance it can
// leave does. A wallet's depletion is judged on the write's net change, an
// overdraft at the lowest point Draws found.
func NeedsJudging(acc Account, delta decimal.Decimal, drawn bool) (judge, orZero bool) {
	switch {
	case acc.Class == ClassRenter:
		return delta.IsNegative(), true
	case !acc.MayGoNegative():
		return drawn, false
	}
	return false, false
}

// BalanceKey names an (account, currency) balance in Draws.
type BalanceKey struct{ Address, Currency string }

// Draws are, for each balance of an account that may not go negative which
// one of txs (not a reversal) lowers, the lowest change from the balance
// before txs that txs reach right after such a draw, applying them one at a
// time in their order (normal side). A write of several transactions (a
// group commit) is judged as if each had been posted alone in its turn:
// judged on the write's net change, a draw from an account already below
// zero passed behind a smaller credit (-50, +20, -10 is a net rise), and one
// taking an account below zero passed ahead of a larger credit (50, -80,
// +40 nets to 10), both refused alone. A balance is overdrawn when the one
// before txs plus its draw is below zero (Overdrawn).
func Draws(txs []*Transaction) map[BalanceKey]decimal.Decimal {
	var lowest map[BalanceKey]decimal.Decimal
	running := map[BalanceKey]decimal.Decimal{}
	for _, t := range txs {
		for k, d := range netChanges(t) {
			running[k] = running[k].Add(d)
			if !d.IsNegative() || t.Kind == TxReversal {
				continue
			}
			if low, seen := lowest[k]; !seen || running[k].LessThan(low) {
				if lowest == nil {
					lowest = map[BalanceKey]decimal.Decimal{}
				}
				lowest[k] = running[k]
			}
		}
	}
	return lowest
}

// netChanges are t's changes (normal side) to the balances of accounts that
// may not go negative: one transaction is judged on its net, as alone.
func netChanges(t *Transaction) map[BalanceKey]decimal.Decimal {
	out := map[BalanceKey]decimal.Decimal{}
	for _, p := range t.Postings {
		if p.Account.MayGoNegative() {
			continue
		}
		d := p.Account.NormalBalance(p.Amount, decimal.Zero)
		if p.Direction != Debit {
			d = p.Account.NormalBalance(decimal.Zero, p.Amount)
		}
		k := BalanceKey{p.Account.Address, p.Currency}
		out[k] = out[k].Add(d)
	}
	return out
}

// Overdrawn reports whether txs, one write with its balance changes, take
// an account that may not go negative below zero, or lower one already
// below, by a transaction other than a reversal, applied one at a time in
// their order (Draws): what checking each alone would refuse.
func Overdrawn(txs []*Transaction, changes []BalanceChange) bool {
	draws := Draws(txs)
	for _, c := range changes {
		low, drawn := draws[BalanceKey{c.Account.Address, c.Currency}]
		if drawn && c.Before().Add(low).IsNegative() {
			return true
		}
	}
	return false
}

// Depletions are the wallets txs (one write, with its balance changes)
// depleted. A wallet already at or below zero before the write was announced
// when it crossed, and is not again.
func Depletions(txs []*Transaction, changes []BalanceChange, at time.Time) []WalletDepletion {
	var out []WalletDepletion
	var last map[string]string // wallet|currency → the write's last transaction on it
	for _, c := range changes {
		if c.Account.Class != ClassRenter || !c.Delta.IsNegative() || c.After.IsPositive() {
			continue
		}
		if !c.Before().IsPositive() && !c.Created {
			continue
		}
		if last == nil {
			last = make(map[string]string, len(txs))
			for _, t := range txs {
				for _, p := range t.Postings {
					if p.Account.Class == ClassRenter {
						last[p.Account.Address+"|"+p.Currency] = t.ID
					}
				}
			}
		}
		out = append(out, WalletDepletion{RenterID: c.Account.Party, Currency: c.Currency, Balance: c.After,
			TransactionID: last[c.Account.Address+"|"+c.Currency], At: at})
	}
	return out
}

// ProviderLine is a line of a provider's statement from its pending
// account: the credits of a lease, renter and GPU model summed (of a
// charge's shape: the provider's own accounts and that renter's wallet), or
// one other credit, or one posting taken from the account (a debit,
// negative).
type ProviderLine struct {
	LeaseID, RenterID, GPUModel string
	GPUHours                    *decimal.Decimal // nil: the postings name none
	Amount                      decimal.Decimal
	Description                 string
	Postings                    int
	TransactionID               string   // of a line of one posting naming no lease
	Accounts                    []string // every account that line's entry moves (ReadBy)
}

// ReadBy is the line as its provider (prefix: PartyPrefix) may read it: a
// line of one entry keeps the entry's description and renter_id only when
// the provider reads the entry whole (PartyReadsWhole, the transaction
// read's rule); otherwise both are "" and settlement labels the line.
// Finance's transfer from p-2 to p-1 showed both statements its text about
// p-2's renter, which both providers' reads of the entry withheld. A lease's
// line (its charges summed) names its own renter by design.
func (l ProviderLine) ReadBy(prefix string) ProviderLine {
	if l.TransactionID != "" && !PartyReadsWhole(prefix, l.Accounts) {
		l.Description, l.RenterID = "", ""
	}
	return l
}

// FoldLines keeps a statement to at most max lines (max ≥ 2): past max-1,
// the rest become one line summing them, so the lines still add up to the
// gross. One line per lease made a provider of 45 000 leases a statement
// past gRPC's 4 MiB answer, and its settlement retried it for a day.
func FoldLines(ls []ProviderLine, max int) []ProviderLine {
	if len(ls) <= max {
		return ls
	}
	rest := ProviderLine{}
	for _, l := range ls[max-1:] {
		rest.Amount = rest.Amount.Add(l.Amount)
		rest.Postings += l.Postings
	}
	rest.Description = fmt.Sprintf("%d more lines (%d postings): the journal of the account lists them", len(ls)-max+1, rest.Postings)
	return append(ls[:max-1:max-1], rest)
}
