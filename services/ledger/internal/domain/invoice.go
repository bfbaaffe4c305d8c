package domain

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// Kinds of invoice line.
const (
	InvoiceLineUsage    = "usage"
	InvoiceLinePUE      = "pue_surcharge"
	InvoiceLineRounding = "rounding"
)

// InvoiceLine is one line of an invoice's charges, in the currency's minor
// unit.
type InvoiceLine struct {
	Kind, GPUModel, Band, Tier string
	GPUHours                   decimal.Decimal
	Amount                     decimal.Decimal
	TierDiscount               decimal.Decimal
}

// InvoiceDeposit is a top-up credited to the wallet in the period.
type InvoiceDeposit struct {
	TransactionID string
	PostedAt      time.Time
	Amount        decimal.Decimal
	Reference     string
}

// ExplainedLine is pricing's explanation of charges: lines summed per kind,
// GPU model, band and tier, at full precision.
type ExplainedLine struct {
	Kind, GPUModel, Band, Tier     string
	GPUHours, Amount, TierDiscount decimal.Decimal
}

// WalletActivity is a renter wallet's movement in one currency over a
// period, by posting time, read from the journal. Amounts are on the
// wallet's normal side (credit positive).
type WalletActivity struct {
	Opening     decimal.Decimal // balance at the period's start
	Deposits    []InvoiceDeposit
	Charges     decimal.Decimal // usage charges debited
	ChargeIDs   []string        // the charges' ids (their idempotency keys), with those billed at 0.00 (UnbilledCharge)
	Adjustments decimal.Decimal // manual entries and reversals, net
	Closing     decimal.Decimal // balance at the period's end, read on its own
}

// Invoice is a renter's monthly invoice in one currency.
type Invoice struct {
	ID, Number, RenterID, Currency, Period, TimeZone string
	PeriodStart, PeriodEnd, IssuedAt                 time.Time

	Opening, Deposits, Charges, Adjustments, Closing decimal.Decimal
	TierDiscounts, Surcharges                        decimal.Decimal

	Lines          []InvoiceLine
	DepositEntries []InvoiceDeposit
}

// InvoiceNumber formats the n-th invoice of a year: YYYY-NNNNNN.
func InvoiceNumber(year int, n int64) string { return fmt.Sprintf("%04d-%06d", year, n) }

// BuildInvoice makes the invoice of a wallet's activity and the explanation
// of its charges. It checks what a finance team would: the balance moves by
// exactly deposits − charges + adjustments, and the lines (rounded to the
// currency, plus one rounding line: charges are rounded once per lease,
// cumulatively, not per line) add up to the charges posted.
func BuildInvoice(cur money.Currency, act WalletActivity, explained []ExplainedLine) (Invoice, error) {
	inv := Invoice{Currency: cur.Code, Opening: act.Opening, Charges: act.Charges, Adjustments: act.Adjustments,
		Closing: act.Closing, DepositEntries: act.Deposits}
	for _, d := range act.Deposits {
		inv.Deposits = inv.Deposits.Add(d.Amount)
	}
	if moved := inv.Opening.Add(inv.Deposits).Sub(inv.Charges).Add(inv.Adjustments); !moved.Equal(inv.Closing) {
		return Invoice{}, fmt.Errorf("wallet %s: opening %s + deposits %s - charges %s + adjustments %s = %s, but the closing balance is %s",
			cur.Code, inv.Opening, inv.Deposits, inv.Charges, inv.Adjustments, moved, inv.Closing)
	}
	sum := decimal.Zero
	for _, e := range explained {
		l := InvoiceLine{Kind: e.Kind, GPUModel: e.GPUModel, Band: e.Band, Tier: e.Tier, GPUHours: e.GPUHours,
			Amount: cur.Round(e.Amount), TierDiscount: cur.Round(e.TierDiscount)}
		sum = sum.Add(l.Amount)
		inv.TierDiscounts = inv.TierDiscounts.Add(l.TierDiscount)
		if l.Kind == InvoiceLinePUE {
			inv.Surcharges = inv.Surcharges.Add(l.Amount)
		}
		inv.Lines = append(inv.Lines, l)
	}
	if diff := inv.Charges.Sub(sum); !diff.IsZero() {
		// Under one minor unit per charge and half of one per line; more
		// means the explanation is not of these charges.
		if diff.Abs().GreaterThan(cur.Unit().Mul(decimal.NewFromInt(int64(len(act.ChargeIDs) + len(explained))))) {
			return Invoice{}, fmt.Errorf("wallet %s: charges %s, but their lines add up to %s", cur.Code, inv.Charges, sum)
		}
		inv.Lines = append(inv.Lines, InvoiceLine{Kind: InvoiceLineRounding, Amount: diff})
	}
	return inv, nil
}

// MergeExplained sums explanations (one per page of charges) per kind, GPU
// model, band and tier, keeping the first-seen order.
func MergeExplained(pages ...[]ExplainedLine) []ExplainedLine {
	type key struct{ kind, model, band, tier string }
	idx := map[key]int{}
	var out []ExplainedLine
	for _, p := range pages {
		for _, l := range p {
			k := key{l.Kind, l.GPUModel, l.Band, l.Tier}
			i, ok := idx[k]
			if !ok {
				idx[k] = len(out)
				out = append(out, l)
				continue
			}
			out[i].GPUHours = out[i].GPUHours.Add(l.GPUHours)
			out[i].Amount = out[i].Amount.Add(l.Amount)
			out[i].TierDiscount = out[i].TierDiscount.Add(l.TierDiscount)
		}
	}
	return out
}
