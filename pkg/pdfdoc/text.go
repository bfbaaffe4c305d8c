package pdfdoc

import (
	_ "embed" // the font below
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode"

	"github.com/go-pdf/fpdf"
)

// uniTTF is WenQuanYi Micro Hei cut to Latin, Greek, Cyrillic, kana, the
// CJK Unified Ideographs and CJK and fullwidth punctuation (3 MB;
// fonts/subset.sh says why not Hangul; Apache-2.0, fonts/NOTICE). fpdf
// parses it when a document first needs it and embeds only the glyphs the
// document uses.
//
//go:embed fonts/wqy-microhei-subset.ttf
var uniTTF []byte

const (
	// coreFamily is the font of text Windows-1252 holds: the PDF viewer's
	// own Helvetica, nothing embedded.
	coreFamily = "Helvetica"
	// uniFamily is the embedded font, for a text with a rune Windows-1252
	// does not hold (Chinese above all). It has no bold face: bold text in
	// it is its outline stroked over its fill (boldStrokeEm).
	uniFamily = "WQYMicroHei"
	// boldStrokeEm is the stroke drawn around the embedded font's glyphs
	// for bold, as a share of the font size.
	boldStrokeEm = 0.04
	// wrapSlackMM absorbs float rounding where lines are fitted to a page.
	wrapSlackMM = 1e-6
)

// cp1252 maps each rune above ASCII that the core fonts print to its byte in
// Windows-1252, fpdf's code page for them (read from fpdf's own map, so
// what is checked here is what fpdf would print).
var cp1252 = sync.OnceValue(func() map[rune]byte {
	tr := fpdf.New("P", "mm", "A4", "").UnicodeTranslatorFromDescriptor("")
	m := make(map[rune]byte, 128)
	// Windows-1252's highest code point is U+2122 (the trade mark sign).
	for r := rune(0x80); r <= 0x2122; r++ {
		if b := tr(string(r)); len(b) == 1 && b[0] >= 0x80 {
			m[r] = b[0]
		}
	}
	return m
})

// runeSet is a set of runes of the Basic Multilingual Plane.
type runeSet [0x10000 / 64]uint64

func (s *runeSet) has(r rune) bool { return r >= 0 && r < 0x10000 && s[r/64]&(1<<(r%64)) != 0 }

// uniRunes is the runes the embedded font has a glyph for.
var uniRunes = sync.OnceValues(func() (*runeSet, error) { return cmapRunes(uniTTF) })

// cmapRunes reads the runes a TrueType font maps to a glyph from its
// Unicode BMP cmap (platform 3, encoding 1, format 4: the one fpdf reads).
func cmapRunes(ttf []byte) (*runeSet, error) {
	bad := false
	u16 := func(off int) int {
		if off < 0 || off+2 > len(ttf) {
			bad = true
			return 0
		}
		return int(binary.BigEndian.Uint16(ttf[off:]))
	}
	u32 := func(off int) int { return u16(off)<<16 | u16(off+2) }
	cmap := -1
	for i, n := 0, u16(4); i < n && !bad; i++ {
		if rec := 12 + 16*i; u32(rec) == 'c'<<24|'m'<<16|'a'<<8|'p' {
			cmap = u32(rec + 8)
		}
	}
	sub := -1
	for i, n := 0, u16(cmap+2); cmap >= 0 && i < n && !bad; i++ {
		if rec := cmap + 4 + 8*i; u16(rec) == 3 && u16(rec+2) == 1 && u16(cmap+u32(rec+4)) == 4 {
			sub = cmap + u32(rec+4)
		}
	}
	if sub < 0 || bad {
		return nil, errors.New("font: no Unicode BMP cmap (3, 1, format 4)")
	}
	var set runeSet
	segs := u16(sub+6) / 2
	ends, starts, deltas, offsets := sub+14, sub+16+2*segs, sub+16+4*segs, sub+16+6*segs
	for i := 0; i < segs && !bad; i++ {
		end, start, delta, ro := u16(ends+2*i), u16(starts+2*i), u16(deltas+2*i), u16(offsets+2*i)
		for c := start; c <= end && c < 0xFFFF; c++ {
			g := c + delta
			if ro != 0 {
				if g = u16(offsets + 2*i + ro + 2*(c-start)); g != 0 {
					g += delta
				}
			}
			if g&0xFFFF != 0 {
				set[c/64] |= 1 << (c % 64)
			}
		}
	}
	if bad {
		return nil, errors.New("font: cmap runs past the end of the file")
	}
	return &set, nil
}

// inCore is whether the core fonts print r.
func inCore(r rune) bool {
	if r < 0x80 {
		return r >= 0x20 && r < 0x7f
	}
	_, ok := cp1252()[r]
	return ok
}

// prepare is s as it is printed, and whether in the embedded font: in the
// core font when every rune of it is in Windows-1252, else in the embedded
// one. A rune the font it is printed in has no glyph for (an emoji, Thai),
// a control or an invisible formatting character is printed as its code
// point, [U+0E01]: never dropped, never a dot or a blank box, so two texts
// that differ never print the same. A tab prints as a space; a newline
// breaks the line.
func prepare(s string, uni *runeSet) (string, bool) {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] >= 0x20 && s[i] < 0x7f
	}
	if plain {
		return s, false
	}
	wide := false
	for _, r := range s {
		if !inCore(r) && uni.has(r) && !unicode.Is(unicode.Cf, r) {
			wide = true
			break
		}
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteRune(r)
		case r == '\t':
			b.WriteByte(' ')
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, "[U+%04X]", r)
		case wide && uni.has(r), !wide && inCore(r):
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, "[U+%04X]", r)
		}
	}
	return b.String(), wide
}

// toCore is text prepare kept in the core font, in Windows-1252 bytes.
func toCore(s string) string {
	b := make([]byte, 0, len(s))
	m := cp1252()
	for _, r := range s {
		if r < 0x80 {
			b = append(b, byte(r))
		} else {
			b = append(b, m[r])
		}
	}
	return string(b)
}

// breaksAfter is whether a line may break after r: a space (dropped at the
// break), punctuation that joins the parts of an id, or a CJK character.
func breaksAfter(r rune) bool {
	switch r {
	case ' ', '-', '/', ':', '_', '.', ',', ';', '|', '@':
		return true
	}
	return r >= 0x1100 && (unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul) ||
		r >= 0x3000 && r <= 0x303f || r >= 0xff00 && r <= 0xffef)
}

// wrap splits s into lines no wider than room (mm) as width measures them:
// at the last place a line may break (breaksAfter), or between any two
// runes of a word wider than the line. Nothing is cut: the lines are s
// again but for the spaces a line breaks at. A rune wider than room on its
// own is a line of its own.
func wrap(s string, room float64, width func(string) float64) []string {
	var lines []string
	for _, para := range strings.Split(s, "\n") {
		if width(para) <= room {
			lines = append(lines, para)
			continue
		}
		rs := []rune(para)
		for start := 0; start < len(rs); {
			end, brk, used := start, -1, 0.0
			for end < len(rs) {
				w := width(string(rs[end]))
				if end > start && used+w > room {
					break
				}
				used += w
				end++
				if breaksAfter(rs[end-1]) {
					brk = end
				}
			}
			switch {
			case end == len(rs), rs[end] == ' ':
				// The rest fits, or the line ends where a space is.
			case brk > start:
				end = brk
			}
			lines = append(lines, strings.TrimRight(string(rs[start:end]), " "))
			for start = end; start < len(rs) && rs[start] == ' '; start++ {
			}
		}
	}
	return lines
}

// Cell is one cell of a row: its text, its width in mm (0: to the right
// margin) and whether it is bold or an amount. An amount is right-aligned
// and written smaller to stay on one line (down to minFitPt) before it
// wraps: an amount of 18 decimals in a column sized for yuan.
type Cell struct {
	Text   string
	Width  float64
	Bold   bool
	Amount bool
}

// Writer writes text into a document: in the core Helvetica when
// Windows-1252 holds it, else in the embedded font, so that Chinese prints
// as Chinese; rows of cells, each wrapped inside its width, all as tall as
// the tallest, starting a page where a row does not fit.
type Writer struct {
	pdf     *fpdf.Fpdf
	uni     *runeSet
	bold    bool
	bottom  float64 // where rows stop on a page, mm from its top
	newPage func()
	top     float64 // where the last page the writer started begins its rows
	cur     font    // the font use set last, while a row is written
}

// font is a font use sets; fpdf writes a font change into the page for
// every SetFont, the same font or not.
type font struct {
	set, wide, bold bool
	size            float64
}

// NewWriter writes into p, rows down to p's page break margin, a new page
// by p.AddPage. If the embedded font cannot be read, p fails with that
// error (p.Output returns it).
func NewWriter(p *fpdf.Fpdf) *Writer {
	uni, err := uniRunes()
	if err != nil {
		p.SetError(err)
		uni = &runeSet{}
	}
	_, pageH := p.GetPageSize()
	_, margin := p.GetAutoPageBreak()
	return &Writer{pdf: p, uni: uni, bottom: pageH - margin, newPage: p.AddPage, top: -1}
}

// SetFont sets the font of what follows: Helvetica in style ("" or "B")
// at size (pt); text that needs it in the embedded font at that size.
func (w *Writer) SetFont(style string, size float64) {
	w.bold = strings.Contains(style, "B")
	w.pdf.SetFont(coreFamily, style, size)
	w.begin()
}

// SetPaging makes rows stop at bottom (mm from the page's top) and start
// a page with newPage (which may write a table's header on it).
func (w *Writer) SetPaging(bottom float64, newPage func()) {
	w.bottom, w.newPage = bottom, newPage
}

// use sets the font a prepared text is written in, unless it is the one
// use set last since begin.
func (w *Writer) use(wide, bold bool, size float64) {
	want := font{set: true, wide: wide, bold: bold, size: size}
	if w.cur == want {
		return
	}
	w.cur = want
	if !wide {
		style := ""
		if bold {
			style = "B"
		}
		w.pdf.SetFont(coreFamily, style, size)
		return
	}
	w.pdf.AddUTF8FontFromBytes(uniFamily, "", uniTTF) // parsed once per document; after that a lookup
	w.pdf.SetFont(uniFamily, "", size)
}

// begin starts a row or a line: the font may have been set by anyone since
// the last.
func (w *Writer) begin() { w.cur = font{} }

// width is how wide a prepared text is in the current font.
func (w *Writer) width(s string, wide bool) float64 {
	if wide {
		return w.pdf.GetStringWidth(s)
	}
	return w.pdf.GetStringWidth(toCore(s))
}

// text writes one line of a prepared text in a cell as CellFormat does,
// in the font use set.
func (w *Writer) text(width, h float64, s string, wide, bold bool, border string, ln int, align string) {
	if !wide {
		w.pdf.CellFormat(width, h, toCore(s), border, ln, align, false, 0, "")
		return
	}
	if bold {
		pt, _ := w.pdf.GetFontSize()
		lw := w.pdf.GetLineWidth()
		w.pdf.SetLineWidth(pt * boldStrokeEm / w.pdf.GetConversionRatio())
		w.pdf.SetTextRenderingMode(2) // fill, then stroke
		defer func() {
			w.pdf.SetTextRenderingMode(0)
			w.pdf.SetLineWidth(lw)
		}()
	}
	w.pdf.CellFormat(width, h, s, border, ln, align, false, 0, "")
}

// Line writes one line of text in a cell as CellFormat does (no fill, no
// link; w 0: to the right margin), in a smaller font when it is wider than
// the cell, never below minFitPt. For a page's footer: it never wraps and
// never starts a page.
func (w *Writer) Line(width, h float64, s, border string, ln int, align string) {
	pt, _ := w.pdf.GetFontSize()
	text, wide := prepare(s, w.uni)
	w.begin()
	w.use(wide, w.bold, pt) // to measure it
	w.use(wide, w.bold, fitPt(pt, cellWidth(w.pdf, width)-2*w.pdf.GetCellMargin(), w.width(text, wide)))
	w.text(width, h, text, wide, w.bold, border, ln, align)
	w.use(false, w.bold, pt)
}

// laid is a cell of a row laid out: its lines and how they are written.
type laid struct {
	lines       []string
	wide, bold  bool
	size, width float64
	align       string
}

// layout lays a row's cells out from x (mm) in the current font size,
// leaving the font as the last cell's.
func (w *Writer) layout(cells []Cell, x float64) []laid {
	pt, _ := w.pdf.GetFontSize()
	pageW, _ := w.pdf.GetPageSize()
	_, _, right, _ := w.pdf.GetMargins()
	margin := w.pdf.GetCellMargin()
	out := make([]laid, len(cells))
	for i, c := range cells {
		l := laid{bold: w.bold || c.Bold, size: pt, width: c.Width, align: "L"}
		if l.width == 0 {
			l.width = pageW - right - x
		}
		x += l.width
		var text string
		text, l.wide = prepare(c.Text, w.uni)
		w.use(l.wide, l.bold, pt)
		room := l.width - 2*margin
		if c.Amount {
			l.align = "R"
			l.size = fitPt(pt, room, w.width(text, l.wide))
			w.use(l.wide, l.bold, l.size)
		}
		l.lines = wrap(text, room, func(s string) float64 { return w.width(s, l.wide) })
		out[i] = l
	}
	return out
}

// RowHeight is how tall Row writes cells with lines lineH high (mm).
func (w *Writer) RowHeight(cells []Cell, lineH float64) float64 {
	pt, _ := w.pdf.GetFontSize()
	w.begin()
	n := 1
	for _, l := range w.layout(cells, w.pdf.GetX()) {
		n = max(n, len(l.lines))
	}
	w.use(false, w.bold, pt)
	return float64(n) * lineH
}

// startPage starts a page with the writer's newPage.
func (w *Writer) startPage() {
	w.newPage()
	w.top = w.pdf.GetY()
	w.begin() // newPage may have written with this writer, or set a font
}

// Row writes cells side by side from the current position, each wrapped
// inside its width, lines lineH high (mm), the border (CellFormat's) drawn
// around each cell as tall as the row. A row that does not fit above the
// page's bottom starts a new page; one taller than a page goes on over as
// many as it needs. The position after it is the start of the next line.
func (w *Writer) Row(cells []Cell, lineH float64, border string) {
	p := w.pdf
	x0 := p.GetX()
	pt, _ := p.GetFontSize()
	w.begin()
	cols := w.layout(cells, x0)
	n := 1
	for _, c := range cols {
		n = max(n, len(c.lines))
	}
	// The writer places every line itself: fpdf breaking a page inside a
	// row would put the rest of its cells on the next page.
	auto, margin := p.GetAutoPageBreak()
	p.SetAutoPageBreak(false, margin)
	defer p.SetAutoPageBreak(auto, margin)
	for from := 0; from < n; {
		y := p.GetY()
		fit := int(math.Floor((w.bottom-y)/lineH + wrapSlackMM))
		atTop := math.Abs(y-w.top) < 0.01
		if (n-from > fit && from == 0 && !atTop) || (fit < 1 && !atTop) {
			w.startPage() // keep a row on one page when it can be
			continue
		}
		k := min(max(fit, 1), n-from)
		x := x0
		for _, c := range cols {
			if border != "" {
				p.SetXY(x, y)
				p.CellFormat(c.width, float64(k)*lineH, "", border, 0, "", false, 0, "")
			}
			w.use(c.wide, c.bold, c.size)
			for j := from; j < from+k && j < len(c.lines); j++ {
				p.SetXY(x, y+float64(j-from)*lineH)
				w.text(c.width, lineH, c.lines[j], c.wide, c.bold, "", 0, c.align)
			}
			x += c.width
		}
		from += k
		p.SetXY(x0, y+float64(k)*lineH)
		if from < n {
			w.startPage()
		}
	}
	w.use(false, w.bold, pt)
}
