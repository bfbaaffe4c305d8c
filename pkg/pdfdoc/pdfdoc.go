// Package pdfdoc writes the plain business documents gpubill renders as PDF
// (invoices, reports) with go-pdf/fpdf: a title, label/value rows and
// tables with right-aligned amount columns, on A4. Text Windows-1252 holds
// is in the core Helvetica (nothing embedded); any other text, Chinese
// above all, in an embedded WenQuanYi Micro Hei (fonts/, only the glyphs
// used go into the PDF); a rune neither has prints as its code point,
// [U+0E01]. A cell's text wraps inside its column, never cut. Output is
// deterministic for the same content and time (the document's dates are
// the one given).
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
	w   *Writer
}

// New starts an A4 portrait document with its title, subject and date.
func New(title, subject string, at time.Time) *Doc {
	p := fpdf.New("P", "mm", "A4", "")
	p.SetMargins(marginMM, marginMM, marginMM)
	p.SetAutoPageBreak(true, marginMM)
	p.SetTitle(title, true)
	p.SetSubject(subject, true)
	p.SetCreator("gpubill", false)
	p.SetCreationDate(at)
	p.SetModificationDate(at)
	p.AliasNbPages("")
	d := &Doc{pdf: p, w: NewWriter(p)}
	foot := NewWriter(p) // a writer of its own: a page may start inside one of d.w's rows
	p.SetFooterFunc(func() {
		p.SetY(-marginMM)
		foot.SetFont("", bodyPt-1)
		foot.Line(0, lineMM, fmt.Sprintf("%s - page %d of {nb}", title, p.PageNo()), "", 0, "C")
	})
	p.AddPage()
	d.w.SetFont("B", titlePt)
	d.w.Row([]Cell{{Text: title}}, lineMM*1.5, "")
	p.Ln(lineMM / 2)
	return d
}

// Heading writes a section heading.
func (d *Doc) Heading(s string) {
	d.pdf.Ln(lineMM / 2)
	d.w.SetFont("B", headingPt)
	d.w.Row([]Cell{{Text: s}}, lineMM, "")
}

// Field writes one "label  value" row, the value wrapped inside what is
// left of the line.
func (d *Doc) Field(label, value string) {
	d.w.SetFont("", bodyPt)
	d.w.Row([]Cell{{Text: label, Width: labelWidthMM}, {Text: value, Bold: true}}, lineMM, "")
}

// Text writes a paragraph.
func (d *Doc) Text(s string) {
	d.w.SetFont("", bodyPt)
	d.w.Row([]Cell{{Text: s}}, lineMM-1, "")
}

// Table writes a table with a header row, repeated at the top of each page
// it goes on to; each row has one cell per column, its text wrapped inside
// the column (an amount is first written smaller, to stay on one line).
func (d *Doc) Table(cols []Column, rows [][]string) {
	hdr := make([]Cell, len(cols))
	for i, c := range cols {
		hdr[i] = Cell{Text: c.Header, Width: c.Width * contentWidth, Amount: c.Right}
	}
	header := func() {
		d.w.SetFont("B", bodyPt)
		d.w.Row(hdr, lineMM, "B")
		d.w.SetFont("", bodyPt)
	}
	d.pdf.SetCellMargin(cellPaddingMM)
	// A header with no row under it goes to the next page with the rows.
	if _, pageH := d.pdf.GetPageSize(); d.pdf.GetY()+2*lineMM > pageH-marginMM {
		d.pdf.AddPage()
	}
	header()
	d.w.SetPaging(d.w.bottom, func() { d.pdf.AddPage(); header() })
	defer d.w.SetPaging(d.w.bottom, d.pdf.AddPage)
	for _, r := range rows {
		cells := make([]Cell, len(cols))
		for i, c := range cols {
			cells[i] = Cell{Width: c.Width * contentWidth, Amount: c.Right}
			if i < len(r) {
				cells[i].Text = r[i]
			}
		}
		d.w.Row(cells, lineMM, "")
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

// minFitPt is the smallest font an amount is shrunk to before it wraps.
const minFitPt = 4

// FitSize is the font size, at most the current one and at least minFitPt,
// at which text (as fpdf takes it in the current font) fits a cell w wide
// (its margins taken off).
func FitSize(p *fpdf.Fpdf, text string, w float64) float64 {
	pt, _ := p.GetFontSize()
	return fitPt(pt, w-2*p.GetCellMargin(), p.GetStringWidth(text))
}

// fitPt is the font size, at most pt and at least minFitPt, at which a text
// width wide at pt fits room.
func fitPt(pt, room, width float64) float64 {
	if width <= room || width == 0 {
		return pt
	}
	// The width of a string scales with the font size.
	return max(minFitPt, pt*room/width)
}

// Bytes finishes the document and returns it.
func (d *Doc) Bytes() ([]byte, error) {
	var b bytes.Buffer
	if err := d.pdf.Output(&b); err != nil {
		return nil, fmt.Errorf("pdf: %w", err)
	}
	return b.Bytes(), nil
}
