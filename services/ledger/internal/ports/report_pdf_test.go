package ports

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
)

// Two client ids of the longest a party id may be, differing only at their
// end, print whole and so distinctly (they were cut to 36 characters and
// printed identically); a bank statement's id and account in Chinese print
// as the bank wrote them (the core font printed dots).
func TestSegregatedFundsPDFPrintsIdsWhole(t *testing.T) {
	t.Parallel()
	stem := strings.Repeat("provider-of-gpus-", 4)[:ids.PartyIDLenMax-2]
	id1, id2 := stem+"01", stem+"02"
	const stID, account = "工商银行-对账单-2026年11月30日", "中国工商银行 客户备付金专户"
	longAccount := "provider:" + id2 + ":available"
	asOf := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	r := &ledgerv1.SegregatedFundsReport{AsOf: timestamppb.New(asOf), Currency: "CNY", ClientMoneyRequirement: "150.00",
		TaxWithheldUnremitted: "0.00", ClientMoneyResource: "150.00", BankStatementBalance: "150.00", Difference: "0.00",
		LedgerDifference: "0.00", Verdict: "balanced", JournalHeadHash: strings.Repeat("ab", 32), JournalHeadPosition: 7,
		Lines: []*ledgerv1.SegregatedFundsLine{{Section: "provider", Account: longAccount, Description: "available earnings", Amount: "50.00"}},
		BankStatements: []*ledgerv1.SegregatedFundsStatement{{StatementId: stID, Account: account,
			ClosingAt: timestamppb.New(asOf), ClosingBalance: "150.00"}},
		Clients: []*ledgerv1.SegregatedFundsClient{
			{Kind: "provider", ClientId: id1, Pending: "100.00", Available: "0.00", InTransit: "0.00", Total: "100.00"},
			{Kind: "provider", ClientId: id2, Pending: "0.00", Available: "50.00", InTransit: "0.00", Total: "50.00"},
		},
	}
	b, err := reportPDF(r, func(int, int) {})
	if err != nil {
		t.Fatal(err)
	}
	// Each line of a cell is a text run of its own: a wrapped id's lines
	// follow one another.
	text := strings.Join(testkit.PDFCells(t, b), "")
	var missing []string
	for _, want := range []string{id1 + "100.00", id2 + "0.00", longAccount} {
		if !strings.Contains(text, want) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the PDF does not show %q whole:\n%s", missing, text)
	}
	// The embedded font's text reads back with pdftotext (ledongthuc/pdf,
	// under PDFCells, decodes only the last byte of fpdf's ToUnicode range).
	words := testkit.PDFWords(t, b)
	seen := map[string]bool{}
	var all []string
	for _, w := range words {
		seen[w.Text] = true
		all = append(all, w.Text)
	}
	for _, want := range append([]string{stID}, strings.Fields(account)...) {
		if !seen[want] {
			t.Errorf("the PDF does not show the bank's %q:\n%s", want, strings.Join(all, " "))
		}
	}
	// Nothing runs off the page (A4, 210 mm wide) or into its right margin
	// (10 mm).
	for _, w := range words {
		if w.XMax > 200.3 {
			t.Errorf("%q on page %d ends %.1f mm from the left, past the right margin at 200 mm", w.Text, w.Page, w.XMax)
		}
	}
}
