package pdfdoc

import (
	"strings"
	"testing"

	"github.com/go-pdf/fpdf"
)

// An amount wider than its cell is written smaller, to fit: an ETH amount
// (18 decimals) in a column sized for yuan printed over its neighbours'
// figures. It stays on one line, and the font is as it was after the cell.
func TestFitCellShrinksWhatDoesNotFit(t *testing.T) {
	p := fpdf.New("P", "mm", "A4", "")
	p.SetMargins(marginMM, marginMM, marginMM)
	p.AddPage()
	p.SetFont("Helvetica", "", 8)
	p.SetCellMargin(cellPaddingMM)
	const eth, cny, w = "123456.000000000000000001", "1234.56", 24.0
	room := w - 2*cellPaddingMM
	if p.GetStringWidth(eth) <= room {
		t.Fatalf("the ETH amount is %.1f mm wide: it fits %.1f mm, the test shows nothing", p.GetStringWidth(eth), room)
	}
	size := FitSize(p, eth, w)
	p.SetFontSize(size)
	got := p.GetStringWidth(eth)
	p.SetFontSize(8)
	if size >= 8 || got > room+0.01 {
		t.Fatalf("the ETH amount at %.2f pt is %.1f mm wide; the cell holds %.1f mm", size, got, room)
	}
	if size := FitSize(p, cny, w); size != 8 {
		t.Fatalf("a yuan amount that fits: %.2f pt, want 8 (as it was)", size)
	}
	y := p.GetY()
	NewWriter(p).Row([]Cell{{Text: eth, Width: w, Amount: true}}, 5, "")
	if pt, _ := p.GetFontSize(); pt != 8 {
		t.Fatalf("after the cell the font is %.2f pt, want 8 again", pt)
	}
	if h := p.GetY() - y; h != 5 {
		t.Fatalf("the amount's row is %.1f mm high: wrapped, not written smaller on its one 5 mm line", h)
	}
	// A cell to the right margin (w 0) is as wide as what is left of the
	// line: from 60 mm in, 135 mm on A4 with 15 mm margins.
	p.SetX(60)
	if got := cellWidth(p, 0); got < 134.99 || got > 135.01 {
		t.Fatalf("a cell to the margin from 60 mm: %.2f mm wide, want 135", got)
	}
	long := strings.Repeat("1234567890", 12)
	if size := FitSize(p, long, cellWidth(p, 0)); size >= 8 {
		t.Fatalf("%d digits to the margin from 60 mm: %.2f pt, want smaller than 8", len(long), size)
	}
	if size := FitSize(p, eth, cellWidth(p, 0)); size != 8 {
		t.Fatalf("the ETH amount to the margin: %.2f pt, want 8 (it fits)", size)
	}
}
