package grpcclients

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/pkg/money"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Ledger is app.Ledger on the ledger's LedgerService, InvoiceService and
// ReconciliationService.
type Ledger struct {
	ledger   ledgerv1.LedgerServiceClient
	invoices ledgerv1.InvoiceServiceClient
	recon    ledgerv1.ReconciliationServiceClient
}

var _ app.Ledger = (*Ledger)(nil)

// NewLedger returns the ledger's client on conn.
func NewLedger(conn grpc.ClientConnInterface) *Ledger {
	return &Ledger{
		ledger:   ledgerv1.NewLedgerServiceClient(conn),
		invoices: ledgerv1.NewInvoiceServiceClient(conn),
		recon:    ledgerv1.NewReconciliationServiceClient(conn),
	}
}

// CloseCycle closes the cycle in the ledger (new charges go to the next open cycle).
func (l *Ledger) CloseCycle(ctx context.Context, cycle string) error {
	if _, err := l.ledger.CloseLedgerCycle(ctx, &ledgerv1.CloseLedgerCycleRequest{CycleId: cycle}); err != nil {
		return classify("close ledger cycle "+cycle, err)
	}
	return nil
}

// CycleBalances is one page of the cycle's pending balances; an amount
// that does not parse is Rejected.
func (l *Ledger) CycleBalances(ctx context.Context, cycle string, pageSize int, token string) ([]domain.Balance, string, error) {
	resp, err := l.ledger.ListCycleBalances(ctx, &ledgerv1.ListCycleBalancesRequest{CycleId: cycle, PageSize: int32(pageSize), PageToken: token})
	if err != nil {
		return nil, "", classify("list cycle balances of "+cycle, err)
	}
	rows := make([]domain.Balance, 0, len(resp.Balances))
	for _, b := range resp.Balances {
		amt, err := money.ParseDecimal(b.Amount)
		if err != nil {
			return nil, "", app.Rejected(fmt.Errorf("balance of %s %s: %w", b.ProviderId, b.Currency, err))
		}
		rows = append(rows, domain.Balance{ProviderID: b.ProviderId, Currency: b.Currency, Amount: amt})
	}
	return rows, resp.NextPageToken, nil
}

// CreateTransaction posts tx, its amounts formatted in its currency.
func (l *Ledger) CreateTransaction(ctx context.Context, tx app.LedgerTx) (string, error) {
	postings := make([]*ledgerv1.Posting, 0, len(tx.Legs))
	for _, g := range tx.Legs {
		postings = append(postings, &ledgerv1.Posting{Account: g.Account, Direction: g.Direction, Amount: tx.Currency.Format(g.Amount), Currency: tx.Currency.Code})
	}
	resp, err := l.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: tx.Key, Description: tx.Description, Metadata: tx.Metadata, Postings: postings,
	})
	if err != nil {
		return "", classify("post ledger transaction "+tx.Key, err)
	}
	return resp.GetTransaction().GetTransactionId(), nil
}

// StatementLines asks the ledger for a statement's lines: one query there
// (the statement read every page of the account's transactions, 500 at a
// time, in the provider's one-minute step: 9 s for 20 000 charges).
func (l *Ledger) StatementLines(ctx context.Context, account, currency string, exclude []string) ([]domain.Line, error) {
	resp, err := l.ledger.ListStatementLines(ctx, &ledgerv1.ListStatementLinesRequest{Account: account, Currency: currency,
		ExcludeTransactionIds: exclude})
	if err != nil {
		return nil, classify("statement lines of "+account, err)
	}
	out := make([]domain.Line, 0, len(resp.Lines))
	for _, x := range resp.Lines {
		d := x.Description
		switch {
		case x.LeaseId != "":
			d = fmt.Sprintf("%d charges", x.Postings)
			if x.Postings == 1 {
				d = "1 charge"
			}
		case d == "":
			// An entry with no text, or text the provider may not read (the
			// entry moves another party's accounts too: the ledger withholds it).
			d = domain.LineAdjustment
		}
		out = append(out, domain.Line{TransactionID: x.TransactionId, LeaseID: x.LeaseId, RenterID: x.RenterId, GPUModel: x.GpuModel,
			GPUHours: x.GpuHours, Amount: x.Amount, Description: d})
	}
	return out, nil
}

// IssueInvoices asks the ledger to issue a month's renter invoices.
func (l *Ledger) IssueInvoices(ctx context.Context, period string) (app.IssueResult, error) {
	resp, err := l.invoices.IssueInvoices(ctx, &ledgerv1.IssueInvoicesRequest{Period: period})
	if err != nil {
		return app.IssueResult{}, classify("issue invoices of "+period, err)
	}
	return app.IssueResult{Period: resp.Period, Issued: int(resp.Issued), AlreadyIssued: int(resp.AlreadyIssued)}, nil
}

// RunReconciliation asks the ledger to reconcile every currency with an
// imported statement, under key, for the runs' counts only: the answer
// with every item (~141 B each) outgrew the connection's 4 MiB receive
// limit at ~30 000 items, and ResourceExhausted is retried.
func (l *Ledger) RunReconciliation(ctx context.Context, key string) ([]app.ReconciliationSummary, error) {
	resp, err := l.recon.RunReconciliation(ctx, &ledgerv1.RunReconciliationRequest{SummaryOnly: true, IdempotencyKey: key})
	if err != nil {
		return nil, classify("run the bank reconciliation", err)
	}
	out := make([]app.ReconciliationSummary, 0, len(resp.GetReconciliations()))
	for _, r := range resp.GetReconciliations() {
		out = append(out, app.ReconciliationSummary{ReconciliationID: r.GetReconciliationId(), Currency: r.GetCurrency(),
			Verdict: r.GetVerdict(), Matched: int(r.GetMatchedCount()), UnmatchedInBank: int(r.GetUnmatchedInBankCount()),
			UnmatchedInLedger: int(r.GetUnmatchedInLedgerCount()), OutstandingInLedger: int(r.GetOutstandingInLedgerCount()),
			StatementBreaks: int(r.GetStatementBreakCount()), CashDifferences: int(r.GetCashDifferenceCount())})
	}
	return out, nil
}
