package domain

import (
	"fmt"
	"strings"

	"github.com/shopspring/decimal"
)

// LedgerTransactionID is ledger transaction id in the form the ledger
// keeps and answers it: trimmed, in lower case. The ledger reads an id in
// any letter case (its transactionID: a UUID of 36 characters, answered in
// lower case; at that length case is the only other spelling), so a claim
// compared as typed let one entry typed twice, once in upper case, pay two
// payouts, or the same part of one net twice.
func LedgerTransactionID(id string) string {
	return strings.ToLower(strings.TrimSpace(id))
}

// LedgerEntry is a ledger transaction as the payout service reads it: the
// entry finance posted paying a payout by hand.
type LedgerEntry struct {
	ID, Reverses, ReversedBy string
	Metadata                 map[string]string
	Postings                 []LedgerPosting
}

// LedgerPosting is one leg of a LedgerEntry.
type LedgerPosting struct {
	Account, Direction, Currency string
	Amount                       decimal.Decimal
}

// CheckSettledOutside says why e is not the entry paying p by hand ("" when
// it is): a manual entry, not reversed, whose net effect in p's currency is
// p's net out of its provider's available and out of bank:client (what a
// paid payout moves, in_transit aside), and in no other currency. A
// payout's own steps (their metadata kind payout) are not: a later payout's
// submission debits available too.
func CheckSettledOutside(p Payout, e LedgerEntry) string {
	moved, why := settledOutsidePart(p, e)
	if why != "" {
		return why
	}
	if !moved.Equal(p.Net) {
		return fmt.Sprintf("transaction %s takes %s out of %s and out of %s; payout %s's net is %s",
			e.ID, FormatAmount(moved, p.Currency), AvailableAccount(p.ProviderID), ClientBank, p.ID, FormatAmount(p.Net, p.Currency))
	}
	return ""
}

// CheckSettledOutsideAll says why es are not the entries paying p by hand
// ("" when they are): one entry is CheckSettledOutside's; several (the net
// paid in several bank transfers) are each a manual entry, not reversed,
// taking as much out of p's provider's available as out of bank:client,
// more than nothing, in p's currency alone, and their sum is p's net.
func CheckSettledOutsideAll(p Payout, es []LedgerEntry) string {
	if len(es) == 1 {
		return CheckSettledOutside(p, es[0])
	}
	sum := decimal.Zero
	ids := make([]string, 0, len(es))
	for _, e := range es {
		moved, why := settledOutsidePart(p, e)
		if why != "" {
			return why
		}
		if !moved.IsPositive() {
			return fmt.Sprintf("transaction %s takes %s out of %s: it paid nothing of payout %s", e.ID,
				FormatAmount(moved, p.Currency), AvailableAccount(p.ProviderID), p.ID)
		}
		sum = sum.Add(moved)
		ids = append(ids, e.ID)
	}
	if !sum.Equal(p.Net) {
		return fmt.Sprintf("transactions %s take %s in total out of %s and out of %s; payout %s's net is %s",
			strings.Join(ids, ", "), FormatAmount(sum, p.Currency), AvailableAccount(p.ProviderID), ClientBank, p.ID,
			FormatAmount(p.Net, p.Currency))
	}
	return ""
}

// settledOutsidePart is what e takes out of p's provider's available and
// out of bank:client, the same amount, or why it is no payment by hand of
// p.
func settledOutsidePart(p Payout, e LedgerEntry) (decimal.Decimal, string) {
	switch {
	case e.Reverses != "":
		return decimal.Zero, fmt.Sprintf("transaction %s reverses %s: name the entry that paid the net", e.ID, e.Reverses)
	case e.ReversedBy != "":
		return decimal.Zero, fmt.Sprintf("transaction %s was reversed by %s: its money did not leave", e.ID, e.ReversedBy)
	case e.Metadata["kind"] == "payout":
		return decimal.Zero, fmt.Sprintf("transaction %s is payout %s's own step, not a payment by hand", e.ID, e.Metadata["payout_id"])
	}
	available := AvailableAccount(p.ProviderID)
	var availableOut, bankOut decimal.Decimal
	for _, q := range e.Postings {
		if q.Currency != p.Currency {
			return decimal.Zero, fmt.Sprintf("transaction %s moves %s; payout %s is in %s", e.ID, q.Currency, p.ID, p.Currency)
		}
		signed := q.Amount
		if q.Direction != "debit" {
			signed = signed.Neg()
		}
		switch q.Account {
		case available:
			availableOut = availableOut.Add(signed)
		case ClientBank:
			bankOut = bankOut.Sub(signed)
		}
	}
	if !availableOut.Equal(bankOut) {
		return decimal.Zero, fmt.Sprintf("transaction %s takes %s out of %s and %s out of %s; payout %s's net is %s",
			e.ID, FormatAmount(availableOut, p.Currency), available, FormatAmount(bankOut, p.Currency), ClientBank,
			p.ID, FormatAmount(p.Net, p.Currency))
	}
	return availableOut, ""
}
