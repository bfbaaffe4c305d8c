package testkit

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pdfread "github.com/ledongthuc/pdf"
)

// PDFCells reads a PDF back (ledongthuc/pdf's plain-text walk) and returns
// its text cell by cell: each text run pkg/pdfdoc writes (a label, a value,
// a table cell) comes out on a line of its own.
func PDFCells(t testing.TB, b []byte) []string {
	t.Helper()
	r, err := pdfread.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("read pdf: %v", err)
	}
	tr, err := r.GetPlainText()
	if err != nil {
		t.Fatalf("pdf text: %v", err)
	}
	txt, err := io.ReadAll(tr)
	if err != nil {
		t.Fatalf("pdf text: %v", err)
	}
	var out []string
	for _, l := range strings.Split(string(txt), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// CellAfter is the cell after the first one equal to label ("" if none):
// the value of a label/value row.
func CellAfter(cells []string, label string) string {
	for i, c := range cells {
		if c == label && i+1 < len(cells) {
			return cells[i+1]
		}
	}
	return ""
}

// PDFWord is a word of a PDF page as pdftotext places it: its page (from
// 1), its box in millimetres from the page's top left corner, and its text.
type PDFWord struct {
	Page                   int
	XMin, YMin, XMax, YMax float64
	Text                   string
}

// PDFWords reads a PDF back with pdftotext -bbox (Debian's poppler-utils,
// which .ci/run installs) and returns every word with its box: where a
// text ends, not only what it says (text that runs over its column, or off
// the page, still reads back whole).
func PDFWords(t testing.TB, b []byte) []PDFWord {
	t.Helper()
	if _, err := exec.LookPath("pdftotext"); err != nil {
		t.Fatal("pdftotext (poppler-utils) is needed to read the PDF back: apt-get install poppler-utils (.ci/run installs it)")
	}
	path := filepath.Join(t.TempDir(), "doc.pdf")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pdftotext", "-bbox", path, "-").Output()
	if err != nil {
		t.Fatalf("pdftotext -bbox: %v", err)
	}
	// The output is XHTML: <page width=…><word xMin=… yMin=… xMax=… yMax=…>text</word>…</page>,
	// in points.
	var doc struct {
		Pages []struct {
			Words []struct {
				XMin float64 `xml:"xMin,attr"`
				YMin float64 `xml:"yMin,attr"`
				XMax float64 `xml:"xMax,attr"`
				YMax float64 `xml:"yMax,attr"`
				Text string  `xml:",chardata"`
			} `xml:"word"`
		} `xml:"body>doc>page"`
	}
	dec := xml.NewDecoder(bytes.NewReader(out))
	dec.Strict = false
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("pdftotext -bbox output: %v", err)
	}
	const mmPerPt = 25.4 / 72
	var words []PDFWord
	for i, p := range doc.Pages {
		for _, w := range p.Words {
			words = append(words, PDFWord{Page: i + 1, XMin: w.XMin * mmPerPt, YMin: w.YMin * mmPerPt,
				XMax: w.XMax * mmPerPt, YMax: w.YMax * mmPerPt, Text: w.Text})
		}
	}
	if len(words) == 0 {
		t.Fatalf("pdftotext -bbox found no words:\n%.500s", out)
	}
	return words
}
