package invoicepdf_test

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/invoicepdf"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// invoice is a CNY invoice with the given charge lines and deposits.
func invoice(lines []domain.InvoiceLine, deposits []domain.InvoiceDeposit) domain.Invoice {
	at := time.Date(2026, 11, 1, 1, 0, 0, 0, time.UTC)
	inv := domain.Invoice{ID: "inv-01", Number: "2026-000001", RenterID: "r-001", Currency: "CNY", Period: "2026-10",
		TimeZone: "Asia/Shanghai", PeriodStart: at.AddDate(0, -1, 0), PeriodEnd: at, IssuedAt: at,
		Lines: lines, DepositEntries: deposits}
	for _, l := range lines {
		inv.Charges = inv.Charges.Add(l.Amount)
	}
	for _, d := range deposits {
		inv.Deposits = inv.Deposits.Add(d.Amount)
	}
	inv.Closing = inv.Deposits.Sub(inv.Charges)
	return inv
}

func usage(band, tier, amount string) domain.InvoiceLine {
	return domain.InvoiceLine{Kind: domain.InvoiceLineUsage, GPUModel: "RTX_4090", Band: band, Tier: tier,
		GPUHours: decimal.RequireFromString("3"), Amount: decimal.RequireFromString(amount)}
}

func deposit(ref, amount string) domain.InvoiceDeposit {
	return domain.InvoiceDeposit{TransactionID: "tx-1", PostedAt: time.Date(2026, 10, 9, 2, 0, 0, 0, time.UTC),
		Amount: decimal.RequireFromString(amount), Reference: ref}
}

// A CNY rate card's bands and tiers named in Chinese, and a deposit's
// external_ref in Chinese, read back as written: the core font's cp1252
// printed each of them as dots (夜间 and 峰时 both "..", so the renter could
// not tell the night line from the peak line).
func TestInvoicePDFShowsChineseBandsAndReferences(t *testing.T) {
	t.Parallel()
	const ref = "支付宝充值-2026年10月-订单88"
	inv := invoice([]domain.InvoiceLine{usage("夜间", "阶梯一", "7.66"), usage("峰时", "", "12.00")}, []domain.InvoiceDeposit{deposit(ref, "100.00")})
	b, err := invoicepdf.Render(inv)
	if err != nil {
		t.Fatal(err)
	}
	// pdftotext reads the embedded font's text back (ledongthuc/pdf, under
	// testkit.PDFCells, does not: it decodes only the last byte of fpdf's
	// ToUnicode range).
	words := testkit.PDFWords(t, b)
	find := func(text string, fromMM float64) *testkit.PDFWord {
		for i := range words {
			if words[i].Text == text && words[i].XMin >= fromMM {
				return &words[i]
			}
		}
		return nil
	}
	var missing, all []string
	for _, want := range []string{"夜间", "阶梯一", "峰时", ref} {
		if find(want, 0) == nil {
			missing = append(missing, want)
		}
	}
	for _, w := range words {
		all = append(all, w.Text)
	}
	if len(missing) > 0 {
		t.Errorf("the PDF does not show %q:\n%s", missing, strings.Join(all, " "))
	}
	// The reference is on the line of its amount, in the Amount column
	// (from 159 mm: 15 mm margin, Posted 30 % and Reference 50 % of 180 mm).
	if r, a := find(ref, 0), find("100.00", 159); r == nil || a == nil || math.Abs((r.YMin+r.YMax)/2-(a.YMin+a.YMax)/2) > 1 {
		t.Errorf("the deposit %q is not on the line of its amount 100.00: %+v, %+v", ref, r, a)
	}
}

// A deposit's external_ref may be 248 characters long, a band's name is free
// text: each prints whole, wrapped inside its column. A 200-character
// reference ran over the Amount column and off the page in a font shrunk to
// 4 pt, and a long band name into the Tier column.
func TestInvoicePDFWrapsLongTextInsideItsColumn(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	for i := 0; sb.Len() < 200; i++ {
		sb.WriteString(strings.ToUpper(string(rune('a'+i%26))) + "0123456789")
	}
	ref := sb.String()[:200]
	const band = "weekday-offpeak-night-discounted-22:00-06:00"
	inv := invoice([]domain.InvoiceLine{usage(band, "100+ GPU-h", "7.66")}, []domain.InvoiceDeposit{deposit(ref, "100.00")})
	b, err := invoicepdf.Render(inv)
	if err != nil {
		t.Fatal(err)
	}
	// The reference's lines are the cells between the posting time and the
	// amount (each line of a cell is a text run of its own).
	cells := testkit.PDFCells(t, b)
	at := slices.Index(cells, "2026-10-09 10:00")
	end := slices.Index(cells, "100.00")
	if at < 0 || end <= at+1 || strings.Join(cells[at+1:end], "") != ref {
		t.Fatalf("the reference does not print whole between its posting time and its amount; want\n%s\n%s", ref, strings.Join(cells, " | "))
	}

	// Columns as invoicepdf lays them out on A4 with 15 mm margins (180 mm
	// of content): charges Item 22 %, GPU model 18 %, Band 12 %, Tier 16 %;
	// deposits Posted 30 %, Reference 50 %, Amount 20 %.
	const left, content, pageRight = 15.0, 180.0, 195.0
	bandFrom, bandTo := left+0.40*content, left+0.52*content
	refFrom, refTo := left+0.30*content, left+0.80*content
	const slack = 0.3 // pdftotext's boxes are a glyph's advance, rounded
	words := testkit.PDFWords(t, b)
	for _, w := range words {
		if w.XMax > pageRight+slack {
			t.Errorf("%q on page %d ends %.1f mm from the left, past the right margin at %.0f mm", w.Text, w.Page, w.XMax, pageRight)
		}
	}
	for _, col := range []struct {
		name, text string
		from, to   float64
		linesMin   int
	}{{"Band", band, bandFrom, bandTo, 2}, {"Reference", ref, refFrom, refTo, 3}} {
		// The text's words that start in its column, top to bottom, left to
		// right, are the text again, and each ends inside the column.
		var in []testkit.PDFWord
		for _, w := range words {
			if w.XMin >= col.from && w.XMin < col.to && len(w.Text) >= 3 && strings.Contains(col.text, w.Text) {
				in = append(in, w)
			}
		}
		slices.SortStableFunc(in, func(a, b testkit.PDFWord) int {
			if a.YMin != b.YMin {
				return cmp.Compare(a.YMin, b.YMin)
			}
			return cmp.Compare(a.XMin, b.XMin)
		})
		var got strings.Builder
		for _, w := range in {
			got.WriteString(w.Text)
			if w.XMax > col.to+slack {
				t.Errorf("%q starts in the %s column (%.1f–%.1f mm) and ends at %.1f mm, over the next column", w.Text, col.name, col.from, col.to, w.XMax)
			}
		}
		if got.String() != col.text || len(in) < col.linesMin {
			t.Errorf("the %s column holds %q in %d words; want %q on at least %d lines", col.name, got.String(), len(in), col.text, col.linesMin)
		}
	}
}
