// Package pdfdoc writes the plain business documents gpubill renders as PDF
// (invoices, reports) with go-pdf/fpdf: a title, label/value rows and
// tables with right-aligned amount columns, on A4 in the core Helvetica
// font (text is Latin-1; other runes print as '?'). Output is deterministic
// for the same content and time (the document's dates are the one given).
package pdfdoc

import (
	"bytes"
	"fmt"
	"time"

	"github.com/go-pdf/fpdf"
)

// Layout, in millimetres and points.
const (
	marginMM      = 15
	lineMM        = 6
	titlePt       = 16
	headingPt     = 11
	bodyPt        = 9
	labelWidthMM  = 50
	pageWidthMM   = 210
	contentWidth  = pageWidthMM - 2*marginMM
	cellPaddingMM = 1.5
)

// Column of a table: its header, its share of the page width (the shares of
// a table's columns should add up to 1) and whether it holds amounts
// (right-aligned).
type Column struct {
	Header string
	Width  float64
	Right  bool
}

// Doc is a document being written.
type Doc struct {
	pdf *fpdf.Fpdf
	tr  func(string) string
}

// New starts an A4 portrait document with its title, subject and date.
func New(title, subject string, at time.Time) *Doc {
	p := fpdf.New("P", "mm", "A4", "")
	p.SetMargins(marginMM, marginMM, marginMM)
	p.SetAutoPageBreak(true, marginMM)
	p.SetTitle(title, false)
	p.SetSubject(subject, false)
	p.SetCreator("gpubill", false)
	p.SetCreationDate(at)
	p.SetModificationDate(at)
	p.AliasNbPages("")
	d := &Doc{pdf: p, tr: p.UnicodeTranslatorFromDescriptor("")}
	p.SetFooterFunc(func() {
		p.SetY(-marginMM)
		p.SetFont("Helvetica", "", bodyPt-1)
		p.CellFormat(0, lineMM, d.tr(fmt.Sprintf("%s - page %d of {nb}", title, p.PageNo())), "", 0, "C", false, 0, "")
	})
	p.AddPage()
	p.SetFont("Helvetica", "B", titlePt)
	p.CellFormat(0, lineMM*1.5, d.tr(title), "", 1, "L", false, 0, "")
	p.Ln(lineMM / 2)
	return d
}

// Heading writes a section heading.
func (d *Doc) Heading(s string) {
	d.pdf.Ln(lineMM / 2)
	d.pdf.SetFont("Helvetica", "B", headingPt)
	d.pdf.CellFormat(0, lineMM, d.tr(s), "", 1, "L", false, 0, "")
}

// Field writes one "label  value" row.
func (d *Doc) Field(label, value string) {
	d.pdf.SetFont("Helvetica", "", bodyPt)
	d.pdf.CellFormat(labelWidthMM, lineMM, d.tr(label), "", 0, "L", false, 0, "")
	d.pdf.SetFont("Helvetica", "B", bodyPt)
	d.pdf.CellFormat(0, lineMM, d.tr(value), "", 1, "L", false, 0, "")
}

// Text writes a paragraph.
func (d *Doc) Text(s string) {
	d.pdf.SetFont("Helvetica", "", bodyPt)
	d.pdf.MultiCell(0, lineMM-1, d.tr(s), "", "L", false)
}

// Table writes a table with a header row; each row has one cell per column.
func (d *Doc) Table(cols []Column, rows [][]string) {
	row := func(cells []string, style string, border string) {
		d.pdf.SetFont("Helvetica", style, bodyPt)
		for i, c := range cols {
			align := "L"
			if c.Right {
				align = "R"
			}
			text := ""
			if i < len(cells) {
				text = cells[i]
			}
			FitCell(d.pdf, c.Width*contentWidth, lineMM, d.tr(text), border, 0, align)
		}
		d.pdf.Ln(-1)
	}
	hdr := make([]string, len(cols))
	for i, c := range cols {
		hdr[i] = c.Header
	}
	d.pdf.SetCellMargin(cellPaddingMM)
	row(hdr, "B", "B")
	for _, r := range rows {
		row(r, "", "")
	}
}

// cellWidth is the width of a cell CellFormat is given w for: w, or to the
// right margin for 0.
func cellWidth(p *fpdf.Fpdf, w float64) float64 {
	if w != 0 {
		return w
	}
	pageW, _ := p.GetPageSize()
	_, _, right, _ := p.GetMargins()
	return pageW - right - p.GetX()
}

// minFitPt is the smallest font FitCell shrinks a cell's text to.
const minFitPt = 4

// FitSize is the font size, at most the current one and at least minFitPt,
// at which text fits a cell w wide (its margins taken off).
func FitSize(p *fpdf.Fpdf, text string, w float64) float64 {
	pt, _ := p.GetFontSize()
	room := w - 2*p.GetCellMargin()
	width := p.GetStringWidth(text)
	if width <= room || width == 0 {
		return pt
	}
	// The width of a string scales with the font size.
	return max(minFitPt, pt*room/width)
}

// FitCell writes a cell as CellFormat does (no fill, no link), its text in
// a smaller font when it is wider than the cell (w 0: to the right
// margin): an amount of 18 decimals
// in a column sized for yuan printed over its neighbours' figures.
func FitCell(p *fpdf.Fpdf, w, h float64, text, border string, ln int, align string) {
	pt, _ := p.GetFontSize()
	if size := FitSize(p, text, cellWidth(p, w)); size < pt {
		p.SetFontSize(size)
		defer p.SetFontSize(pt)
	}
	p.CellFormat(w, h, text, border, ln, align, false, 0, "")
}

// Bytes finishes the document and returns it.
func (d *Doc) Bytes() ([]byte, error) {
	var b bytes.Buffer
	if err := d.pdf.Output(&b); err != nil {
		return nil, fmt.Errorf("pdf: %w", err)
	}
	return b.Bytes(), nil
}
