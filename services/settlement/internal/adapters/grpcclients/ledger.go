package grpcclients

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// entriesPageSize is the page of an account's transactions Entries reads
// per call (the ledger's largest).
const entriesPageSize = 500

// Entries reads every transaction of the account, page after page (the
// ledger lists oldest first), and returns its postings to it in currency
// (lease, renter, GPU model and hours from the charge's metadata). It read
// only the first 200 before: a busy provider's statement lost the rest of
// its lines, which then did not add up to its gross.
func (l *Ledger) Entries(ctx context.Context, account, currency string) ([]domain.Entry, error) {
	var out []domain.Entry
	token := ""
	for {
		resp, err := l.ledger.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{Account: account, PageSize: entriesPageSize, PageToken: token})
		if err != nil {
			if status.Code(err) == codes.NotFound {
				return nil, nil
			}
			return nil, classify("list charges of "+account, err)
		}
		for _, tx := range resp.Transactions {
			for _, p := range tx.Postings {
				if p.Account != account || p.Currency != currency {
					continue
				}
				md := tx.Metadata
				out = append(out, domain.Entry{
					TransactionID: tx.TransactionId, Direction: p.Direction, Amount: p.Amount, LeaseID: md["lease_id"],
					RenterID: md["renter_id"], GPUModel: md["gpu_model"], GPUHours: md["gpu_hours"], Description: tx.Description,
				})
			}
		}
		if token = resp.NextPageToken; token == "" {
			return out, nil
		}
	}
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
// imported statement.
func (l *Ledger) RunReconciliation(ctx context.Context) ([]app.ReconciliationSummary, error) {
	resp, err := l.recon.RunReconciliation(ctx, &ledgerv1.RunReconciliationRequest{})
	if err != nil {
		return nil, classify("run the bank reconciliation", err)
	}
	out := make([]app.ReconciliationSummary, 0, len(resp.GetReconciliations()))
	for _, r := range resp.GetReconciliations() {
		out = append(out, app.ReconciliationSummary{ReconciliationID: r.GetReconciliationId(), Currency: r.GetCurrency(),
			Verdict: r.GetVerdict(), Matched: int(r.GetMatchedCount()), UnmatchedInBank: int(r.GetUnmatchedInBankCount()),
			UnmatchedInLedger: int(r.GetUnmatchedInLedgerCount())})
	}
	return out, nil
}
