package pdfdoc

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/gpubill/gpubill/pkg/testkit"
)

// A text is printed in the core font when Windows-1252 holds it, else in
// the embedded one; a rune the font it is printed in lacks, a control or
// an invisible format character prints as its code point (the core font
// printed a dot for each: two references differing there printed alike).
func TestPrepareKeepsWhatItCannotPrint(t *testing.T) {
	uni, err := uniRunes()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		give     string
		want     string
		wantWide bool
	}{
		{give: "bank-oct", want: "bank-oct"},
		{give: "Zürich €5 – “ok”", want: "Zürich €5 – “ok”"},
		{give: "夜间", want: "夜间", wantWide: true},
		{give: "夜间 night 22:00", want: "夜间 night 22:00", wantWide: true},
		{give: "Łódź", want: "Łódź", wantWide: true},
		{give: "ｗｘ-全角１２", want: "ｗｘ-全角１２", wantWide: true},
		{give: "emoji 😀", want: "emoji [U+1F600]"},
		{give: "夜间😀", want: "夜间[U+1F600]", wantWide: true},
		{give: "ref-ก", want: "ref-[U+0E01]"},
		{give: "한국", want: "[U+D55C][U+AD6D]"},
		{give: "a\u200bb", want: "a[U+200B]b"},
		{give: "夜\u200b间", want: "夜[U+200B]间", wantWide: true},
		{give: "a\x07b\tc", want: "a[U+0007]b c"},
		{give: "two\nlines", want: "two\nlines"},
	} {
		got, wide := prepare(tc.give, uni)
		if got != tc.want || wide != tc.wantWide {
			t.Errorf("prepare(%q) = %q, embedded font %v; want %q, %v", tc.give, got, wide, tc.want, tc.wantWide)
		}
	}
}

// The embedded font has a glyph for every CJK Unified Ideograph of GBK
// (U+4E00–U+9FA5: names and references written in China), Latin and CJK
// punctuation; its cmap is read as fpdf reads it, and a cut file is refused.
func TestEmbeddedFontCoversChinese(t *testing.T) {
	uni, err := uniRunes()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for r := rune(0x4e00); r <= 0x9fa5; r++ {
		if !uni.has(r) {
			missing = append(missing, fmt.Sprintf("U+%04X", r))
		}
	}
	for _, r := range " AZaz09-€Łё。，、（）：１ａ" {
		if !uni.has(r) {
			missing = append(missing, string(r))
		}
	}
	if len(missing) > 0 {
		t.Errorf("the embedded font has no glyph for %d runes: %v", len(missing), missing[:min(len(missing), 20)])
	}
	if uni.has(0x0e01) || uni.has(0xac00) {
		t.Errorf("the font claims Thai or Hangul, which fonts/subset.sh leaves out: the check reads nothing")
	}
	if _, err := cmapRunes(uniTTF[:len(uniTTF)/2]); err == nil {
		t.Errorf("half the font file read without an error")
	}
}

// Wrapping never loses, adds or reorders a rune (but the spaces a line
// breaks at), and every line fits unless it is one rune too wide on its
// own.
func TestWrapKeepsEveryRune(t *testing.T) {
	width := func(s string) float64 {
		w := 0.0
		for _, r := range s {
			if r < 0x80 {
				w++
			} else {
				w += 2
			}
		}
		return w
	}
	squeeze := func(s string) string { return strings.NewReplacer(" ", "", "\n", "").Replace(s) }
	rapid.Check(t, func(t *rapid.T) {
		runes := rapid.SliceOf(rapid.SampledFrom([]rune("ab0- :/夜间峰时\n"))).Draw(t, "text")
		room := float64(rapid.IntRange(1, 12).Draw(t, "room"))
		s := string(runes)
		lines := wrap(s, room, width)
		if got := squeeze(strings.Join(lines, "")); got != squeeze(s) {
			t.Fatalf("wrap(%q, %v) = %q: the runes are %q, want %q", s, room, lines, got, squeeze(s))
		}
		for _, l := range lines {
			if width(l) > room && utf8.RuneCountInString(l) > 1 {
				t.Fatalf("wrap(%q, %v) = %q: %q is %v wide", s, room, lines, l, width(l))
			}
		}
	})
	// It breaks where an id's parts join when it can, else anywhere.
	for _, tc := range []struct {
		give string
		want []string
	}{
		{"renter:r-1:wallet", []string{"renter:", "r-1:", "wallet"}},
		{"abcdefghij", []string{"abcdefg", "hij"}},
		{"ab cd ef", []string{"ab cd", "ef"}},
		{"夜间峰时夜间", []string{"夜间峰", "时夜间"}},
	} {
		if got := wrap(tc.give, 7, width); !slices.Equal(got, tc.want) {
			t.Errorf("wrap(%q, 7) = %q, want %q", tc.give, got, tc.want)
		}
	}
}

// A row taller than a page goes on over the pages after it, the table's
// header on top of each, and every line of it is printed once.
func TestTableRowOverPages(t *testing.T) {
	var words []string
	for i := range 500 {
		words = append(words, fmt.Sprintf("w%04d", i))
	}
	d := New("Long", "test", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	d.Table([]Column{{Header: "Posted", Width: 0.3}, {Header: "Reference", Width: 0.5}, {Header: "Amount", Width: 0.2, Right: true}},
		[][]string{{"2026-10-09", "short", "1.00"}, {"2026-10-10", strings.Join(words, " "), "2.00"}, {"2026-10-11", "after", "3.00"}})
	b, err := d.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	// Every word of the long cell is on a page, above its bottom margin.
	var got []string
	for _, w := range testkit.PDFWords(t, b) {
		if strings.HasPrefix(w.Text, "w") {
			got = append(got, w.Text)
			if w.YMax > 297-marginMM+0.5 {
				t.Errorf("%q on page %d ends %.1f mm from the top, in the bottom margin", w.Text, w.Page, w.YMax)
			}
		}
	}
	if !slices.Equal(got, words) {
		t.Errorf("the long cell printed %d words, want the %d in order", len(got), len(words))
	}
	cells := testkit.PDFCells(t, b)
	headers := 0
	for _, c := range cells {
		if c == "Reference" {
			headers++
		}
	}
	pages := 0
	for _, c := range cells {
		if _, err := fmt.Sscanf(c, "Long - page 1 of %d", &pages); err == nil {
			break
		}
	}
	if pages < 2 || headers != pages {
		t.Errorf("%d pages, the header on %d: want the row over at least 2 pages, the header on each\n%s", pages, headers, strings.Join(cells, " | "))
	}
	for _, want := range []string{"short", "1.00", "2.00", "after", "3.00"} {
		if !slices.Contains(cells, want) {
			t.Errorf("the table lost %q", want)
		}
	}
}
