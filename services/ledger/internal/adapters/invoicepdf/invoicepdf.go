// Package invoicepdf renders an invoice as PDF (pkg/pdfdoc, go-pdf/fpdf).
package invoicepdf

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/pdfdoc"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// hoursPlaces is how many decimals GPU-hours show.
const hoursPlaces = 4

// Renderer implements invoicing.Renderer with Render.
type Renderer struct{}

// Render implements invoicing.Renderer.
func (Renderer) Render(inv domain.Invoice) ([]byte, error) { return Render(inv) }

// Render writes the invoice: header, the balance summary (the figures the
// ledger holds), the charge lines and the deposits.
func Render(inv domain.Invoice) ([]byte, error) {
	cur, err := money.Lookup(inv.Currency)
	if err != nil {
		return nil, fmt.Errorf("invoice %s: %w", inv.ID, err)
	}
	amt := func(d decimal.Decimal) string { return cur.Format(d) + " " + cur.Code }
	loc, err := time.LoadLocation(inv.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	d := pdfdoc.New("Invoice "+inv.Number, "gpubill invoice "+inv.ID, inv.IssuedAt)
	d.Field("Invoice number", inv.Number)
	d.Field("Invoice id", inv.ID)
	d.Field("Renter", inv.RenterID)
	d.Field("Period", fmt.Sprintf("%s (%s to %s, %s)", inv.Period, inv.PeriodStart.In(loc).Format("2006-01-02 15:04"),
		inv.PeriodEnd.In(loc).Format("2006-01-02 15:04"), inv.TimeZone))
	d.Field("Issued", inv.IssuedAt.UTC().Format(time.RFC3339))
	d.Field("Currency", inv.Currency)

	d.Heading("Summary")
	d.Field("Opening balance", amt(inv.Opening))
	d.Field("Deposits", amt(inv.Deposits))
	d.Field("Charges", amt(inv.Charges))
	d.Field("  of which volume-tier discounts", amt(inv.TierDiscounts.Neg()))
	d.Field("  of which surcharges", amt(inv.Surcharges))
	d.Field("Adjustments", amt(inv.Adjustments))
	d.Field("Closing balance", amt(inv.Closing))

	d.Heading("Charges")
	cols := []pdfdoc.Column{{Header: "Item", Width: 0.22}, {Header: "GPU model", Width: 0.18}, {Header: "Band", Width: 0.12},
		{Header: "Tier", Width: 0.16}, {Header: "GPU-hours", Width: 0.1, Right: true}, {Header: "Discount", Width: 0.1, Right: true},
		{Header: "Amount", Width: 0.12, Right: true}}
	var rows [][]string
	for _, l := range inv.Lines {
		item := map[string]string{domain.InvoiceLineUsage: "GPU usage", domain.InvoiceLinePUE: "PUE surcharge", domain.InvoiceLineRounding: "Rounding"}[l.Kind]
		if item == "" {
			item = l.Kind
		}
		hours, disc := "", ""
		if l.Kind != domain.InvoiceLineRounding {
			hours = l.GPUHours.StringFixed(hoursPlaces)
		}
		if l.TierDiscount.IsPositive() {
			disc = "-" + cur.Format(l.TierDiscount)
		}
		rows = append(rows, []string{item, l.GPUModel, l.Band, l.Tier, hours, disc, cur.Format(l.Amount)})
	}
	rows = append(rows, []string{"Total charges", "", "", "", "", "", cur.Format(inv.Charges)})
	d.Table(cols, rows)

	if len(inv.DepositEntries) > 0 {
		d.Heading("Deposits")
		var drs [][]string
		for _, e := range inv.DepositEntries {
			drs = append(drs, []string{e.PostedAt.In(loc).Format("2006-01-02 15:04"), e.Reference, cur.Format(e.Amount)})
		}
		d.Table([]pdfdoc.Column{{Header: "Posted", Width: 0.3}, {Header: "Reference", Width: 0.5}, {Header: "Amount", Width: 0.2, Right: true}}, drs)
	}
	d.Text("")
	d.Text("Amounts are the renter wallet's movements in the period by posting time; the closing balance is the wallet's balance at the period's end. A negative balance is owed by the renter.")
	return d.Bytes()
}
