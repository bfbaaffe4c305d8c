package ports

import (
	"context"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// LedgerServer is the gRPC LedgerService.
type LedgerServer struct {
	ledgerv1.UnimplementedLedgerServiceServer
	App *app.App
}

// checkAsOf refuses an as_of PostgreSQL cannot hold (over gRPC a
// Timestamp may name year 300000: a 500).
func checkAsOf(ts *timestamppb.Timestamp) error {
	if ts == nil {
		return nil
	}
	return apperr.CheckTime("as_of", ts.AsTime())
}

func asOf(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

// CreateDeposit implements LedgerService.
func (s *LedgerServer) CreateDeposit(ctx context.Context, r *ledgerv1.CreateDepositRequest) (*ledgerv1.CreateDepositResponse, error) {
	t, err := s.App.Deposit(ctx, app.DepositInput{RenterID: r.GetRenterId(), Amount: r.GetAmount(), Currency: r.GetCurrency(), ExternalRef: r.GetExternalRef()})
	if err != nil {
		return nil, err
	}
	return &ledgerv1.CreateDepositResponse{Transaction: toProtoTx(t)}, nil
}

// ListAccounts implements LedgerService.
func (s *LedgerServer) ListAccounts(ctx context.Context, r *ledgerv1.ListAccountsRequest) (*ledgerv1.ListAccountsResponse, error) {
	prefix, err := ownPrefix(ctx, r.GetPrefix())
	if err != nil {
		return nil, err
	}
	if err := checkAsOf(r.GetAsOf()); err != nil {
		return nil, err
	}
	vs, next, err := s.App.ListAccounts(ctx, prefix, asOf(r.GetAsOf()), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListAccountsResponse{NextPageToken: next, Accounts: []*ledgerv1.Account{}}
	for _, v := range vs {
		out.Accounts = append(out.Accounts, toProtoAccount(v))
	}
	return out, nil
}

// GetAccount implements LedgerService.
func (s *LedgerServer) GetAccount(ctx context.Context, r *ledgerv1.GetAccountRequest) (*ledgerv1.GetAccountResponse, error) {
	if err := checkOwnAccount(ctx, r.GetAddress()); err != nil {
		return nil, err
	}
	if err := checkAsOf(r.GetAsOf()); err != nil {
		return nil, err
	}
	v, err := s.App.GetAccount(ctx, r.GetAddress(), asOf(r.GetAsOf()))
	if err != nil {
		return nil, err
	}
	return &ledgerv1.GetAccountResponse{Account: toProtoAccount(v)}, nil
}

// ListTransactions implements LedgerService.
func (s *LedgerServer) ListTransactions(ctx context.Context, r *ledgerv1.ListTransactionsRequest) (*ledgerv1.ListTransactionsResponse, error) {
	_, scoped := partyPrefix(ctx)
	if scoped && r.GetAccount() == "" {
		return nil, denied(ctx, "the whole journal (name one of your accounts in ?account=)")
	}
	// A party is answered no idempotency key (partyTx), so it may not look
	// entries up by one: found or not, the answer confirmed a key it
	// guessed, and keys are finance's and the services' (they may name
	// another party: refund-r-1-to-r-2).
	if scoped && len(r.GetIdempotencyKeys()) > 0 {
		return nil, denied(ctx, "transactions by idempotency key (list ?account= alone)")
	}
	if ids := r.GetTransactionIds(); len(ids) > 0 {
		return s.transactionsByIDs(ctx, r)
	}
	if err := checkOwnAccount(ctx, r.GetAccount()); err != nil {
		return nil, err
	}
	txs, next, err := s.App.ListTransactions(ctx, r.GetAccount(), r.GetIdempotencyKeys(), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListTransactionsResponse{NextPageToken: next, Transactions: []*ledgerv1.Transaction{}}
	for _, t := range txs {
		// A party's listing names one of its accounts: every entry in it
		// moves that account.
		if pt, ok := partyTx(ctx, t); ok {
			out.Transactions = append(out.Transactions, pt)
		}
	}
	return out, nil
}

// transactionsByIDs answers ListTransactions by transaction_ids: a listing
// of its own (no account, key or page token with it), finance's, the
// auditors' and the services' alone. A provider or renter reads its
// entries one at a time (GetTransaction, which answers another party's
// entry as a missing one).
func (s *LedgerServer) transactionsByIDs(ctx context.Context, r *ledgerv1.ListTransactionsRequest) (*ledgerv1.ListTransactionsResponse, error) {
	if _, scoped := partyPrefix(ctx); scoped {
		return nil, denied(ctx, "transactions by transaction_ids (read each by GET /v1/transactions/{id})")
	}
	var v apperr.Validator
	v.Check(r.GetAccount() == "", "account", "not with transaction_ids")
	v.Check(len(r.GetIdempotencyKeys()) == 0, "idempotency_keys", "not with transaction_ids")
	v.Check(r.GetPageToken() == "", "page_token", "a listing by transaction_ids is one page")
	if err := v.Err(); err != nil {
		return nil, err
	}
	txs, err := s.App.TransactionsByIDs(ctx, r.GetTransactionIds())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListTransactionsResponse{Transactions: make([]*ledgerv1.Transaction, 0, len(txs))}
	for _, t := range txs {
		out.Transactions = append(out.Transactions, toProtoTx(t))
	}
	return out, nil
}

// GetTransaction implements LedgerService.
func (s *LedgerServer) GetTransaction(ctx context.Context, r *ledgerv1.GetTransactionRequest) (*ledgerv1.GetTransactionResponse, error) {
	t, err := s.App.GetTransaction(ctx, r.GetTransactionId())
	if err != nil {
		return nil, err
	}
	pt, ok := partyTx(ctx, t)
	if !ok {
		// Another party's entry answers what a missing one does, to the
		// byte: a different answer told a party which ids exist.
		return nil, app.TransactionNotFound(t.ID)
	}
	return &ledgerv1.GetTransactionResponse{Transaction: pt}, nil
}

// CreateTransaction implements LedgerService.
func (s *LedgerServer) CreateTransaction(ctx context.Context, r *ledgerv1.CreateTransactionRequest) (*ledgerv1.CreateTransactionResponse, error) {
	t, err := s.App.CreateTransaction(ctx, app.CreateTransactionInput{
		IdempotencyKey: r.GetIdempotencyKey(), Description: r.GetDescription(), EffectiveAt: asOf(r.GetEffectiveAt()),
		Metadata: r.GetMetadata(), Postings: fromProtoPostings(r.GetPostings()), Internal: isService(ctx),
	})
	if err != nil {
		return nil, err
	}
	return &ledgerv1.CreateTransactionResponse{Transaction: toProtoTx(t)}, nil
}

// ReverseTransaction implements LedgerService.
func (s *LedgerServer) ReverseTransaction(ctx context.Context, r *ledgerv1.ReverseTransactionRequest) (*ledgerv1.ReverseTransactionResponse, error) {
	t, err := s.App.ReverseTransaction(ctx, app.ReverseInput{TransactionID: r.GetTransactionId(), IdempotencyKey: r.GetIdempotencyKey(),
		Description: r.GetDescription(), EffectiveAt: asOf(r.GetEffectiveAt())})
	if err != nil {
		return nil, err
	}
	return &ledgerv1.ReverseTransactionResponse{Transaction: toProtoTx(t)}, nil
}

// ListCycleBalances implements LedgerService.
func (s *LedgerServer) ListCycleBalances(ctx context.Context, r *ledgerv1.ListCycleBalancesRequest) (*ledgerv1.ListCycleBalancesResponse, error) {
	bs, next, err := s.App.ListCycleBalances(ctx, r.GetCycleId(), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListCycleBalancesResponse{NextPageToken: next, Balances: []*ledgerv1.CycleBalance{}}
	for _, b := range bs {
		out.Balances = append(out.Balances, &ledgerv1.CycleBalance{ProviderId: b.ProviderID, Currency: b.Balance.Currency, Amount: b.Balance.Format()})
	}
	return out, nil
}

// ListStatementLines implements LedgerService (internal: settlement).
func (s *LedgerServer) ListStatementLines(ctx context.Context, r *ledgerv1.ListStatementLinesRequest) (*ledgerv1.ListStatementLinesResponse, error) {
	ls, err := s.App.StatementLines(ctx, r.GetAccount(), r.GetCurrency(), r.GetExcludeTransactionIds())
	if err != nil {
		return nil, err
	}
	cur, err := money.Lookup(r.GetCurrency())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListStatementLinesResponse{Lines: make([]*ledgerv1.StatementLine, 0, len(ls))}
	for _, l := range ls {
		line := &ledgerv1.StatementLine{LeaseId: l.LeaseID, RenterId: l.RenterID, GpuModel: l.GPUModel, Amount: cur.Format(l.Amount),
			Description: l.Description, Postings: int32(min(l.Postings, math.MaxInt32)), TransactionId: l.TransactionID} //nolint:gosec // bounded
		if l.GPUHours != nil {
			line.GpuHours = l.GPUHours.String()
		}
		out.Lines = append(out.Lines, line)
	}
	return out, nil
}

// CloseLedgerCycle implements LedgerService.
func (s *LedgerServer) CloseLedgerCycle(ctx context.Context, r *ledgerv1.CloseLedgerCycleRequest) (*ledgerv1.CloseLedgerCycleResponse, error) {
	at, err := s.App.CloseLedgerCycle(ctx, r.GetCycleId())
	if err != nil {
		return nil, err
	}
	return &ledgerv1.CloseLedgerCycleResponse{CycleId: r.GetCycleId(), ClosedAt: timestamppb.New(at)}, nil
}
