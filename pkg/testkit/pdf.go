package testkit

import (
	"bytes"
	"io"
	"strings"
	"testing"

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
