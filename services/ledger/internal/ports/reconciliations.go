package ports

import (
	"context"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// ReconciliationServer is the gRPC ReconciliationService.
type ReconciliationServer struct {
	ledgerv1.UnimplementedReconciliationServiceServer
	Reconciliations *app.Reconciliations
}

// RunReconciliation implements ReconciliationService. The stack's service
// identity is the daily schedule; anyone else asked for it. A summary-only
// request is answered each run's counts without its items.
func (s *ReconciliationServer) RunReconciliation(ctx context.Context, r *ledgerv1.RunReconciliationRequest) (*ledgerv1.RunReconciliationResponse, error) {
	trigger, by := domain.ReconByRequest, caller(ctx)
	if p, ok := auth.FromContext(ctx); ok && p.Role == auth.RoleService {
		trigger = domain.ReconBySchedule
	}
	run := s.Reconciliations.RunKeyed
	if r.GetSummaryOnly() {
		run = s.Reconciliations.RunKeyedSummary
	}
	runs, err := run(ctx, r.GetCurrency(), trigger, by, strings.TrimSpace(r.GetIdempotencyKey()))
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.RunReconciliationResponse{Reconciliations: make([]*ledgerv1.Reconciliation, 0, len(runs))}
	for _, run := range runs {
		out.Reconciliations = append(out.Reconciliations, toProtoRun(run, !r.GetSummaryOnly()))
	}
	return out, nil
}

// caller is the role and subject of the caller ("" when unknown).
func caller(ctx context.Context) string {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return ""
	}
	if p.Subject != "" {
		return p.Role + ":" + p.Subject
	}
	return p.Role
}

// ResolveReconciliationItems implements ReconciliationService.
func (s *ReconciliationServer) ResolveReconciliationItems(ctx context.Context, r *ledgerv1.ResolveReconciliationItemsRequest) (*ledgerv1.ResolveReconciliationItemsResponse, error) {
	lines := make([]domain.LineRef, 0, len(r.GetLines()))
	for _, l := range r.GetLines() {
		lines = append(lines, domain.LineRef{StatementID: l.GetStatementId(), LineNo: int(l.GetLineNo())})
	}
	res, err := s.Reconciliations.ResolveItems(ctx, r.GetReconciliationId(), r.GetAction(), r.GetReason(), caller(ctx), lines, r.GetTransactionIds())
	if err != nil {
		return nil, err
	}
	app.BoundResolution(res)
	return &ledgerv1.ResolveReconciliationItemsResponse{Resolution: toProtoResolution(res, amountIn(res.Currency))}, nil
}

// VoidReconciliationResolution implements ReconciliationService.
func (s *ReconciliationServer) VoidReconciliationResolution(ctx context.Context, r *ledgerv1.VoidReconciliationResolutionRequest) (*ledgerv1.VoidReconciliationResolutionResponse, error) {
	res, err := s.Reconciliations.VoidResolution(ctx, r.GetReconciliationId(), r.GetResolutionId(), r.GetReason(), caller(ctx))
	if err != nil {
		return nil, err
	}
	app.BoundResolution(res)
	return &ledgerv1.VoidReconciliationResolutionResponse{Resolution: toProtoResolution(res, amountIn(res.Currency))}, nil
}

// ListReconciliations implements ReconciliationService.
func (s *ReconciliationServer) ListReconciliations(ctx context.Context, r *ledgerv1.ListReconciliationsRequest) (*ledgerv1.ListReconciliationsResponse, error) {
	runs, next, err := s.Reconciliations.List(ctx, r.GetCurrency(), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListReconciliationsResponse{Reconciliations: make([]*ledgerv1.ReconciliationSummary, 0, len(runs)), NextPageToken: next}
	for i := range runs {
		r := toProtoRun(&runs[i], false)
		out.Reconciliations = append(out.Reconciliations, &ledgerv1.ReconciliationSummary{
			ReconciliationId: r.ReconciliationId, Currency: r.Currency, Trigger: r.Trigger, RequestedBy: r.RequestedBy,
			CreatedAt: r.CreatedAt, PreviousReconciliationId: r.PreviousReconciliationId, JournalHeadHash: r.JournalHeadHash,
			JournalHeadPosition: r.JournalHeadPosition, StatementIds: r.StatementIds, BankClosingBalance: r.BankClosingBalance,
			LedgerBankClient: r.LedgerBankClient, Verdict: r.Verdict, MatchedCount: r.MatchedCount,
			UnmatchedInBankCount: r.UnmatchedInBankCount, UnmatchedInLedgerCount: r.UnmatchedInLedgerCount,
			OutstandingInLedgerCount: r.OutstandingInLedgerCount, StatementBreakCount: r.StatementBreakCount,
			CashDifferenceCount: r.CashDifferenceCount,
		})
	}
	return out, nil
}

// GetReconciliation implements ReconciliationService.
func (s *ReconciliationServer) GetReconciliation(ctx context.Context, r *ledgerv1.GetReconciliationRequest) (*ledgerv1.GetReconciliationResponse, error) {
	run, err := s.Reconciliations.Get(ctx, r.GetReconciliationId())
	if err != nil {
		return nil, err
	}
	return &ledgerv1.GetReconciliationResponse{Reconciliation: toProtoRun(run, true)}, nil
}

// ListReconciliationItems implements ReconciliationService.
func (s *ReconciliationServer) ListReconciliationItems(ctx context.Context, r *ledgerv1.ListReconciliationItemsRequest) (*ledgerv1.ListReconciliationItemsResponse, error) {
	currency, items, next, err := s.Reconciliations.Items(ctx, r.GetReconciliationId(), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListReconciliationItemsResponse{Items: make([]*ledgerv1.ReconciliationItem, 0, len(items)), NextPageToken: next}
	f := amountIn(currency)
	for _, x := range items {
		it := &ledgerv1.ReconciliationItem{Status: x.Status, Reason: x.Reason, Outstanding: x.Outstanding, TransactionIds: []string{}}
		if x.Status != domain.ReconItemUnmatchedInLedger {
			protoLine(it, x.Line, f)
		}
		if x.Status != domain.ReconItemUnmatchedInBank {
			protoMove(it, x.Movement, f)
		}
		out.Items = append(out.Items, it)
	}
	return out, nil
}

// ListReconciliationStatementBreaks implements ReconciliationService.
func (s *ReconciliationServer) ListReconciliationStatementBreaks(ctx context.Context, r *ledgerv1.ListReconciliationStatementBreaksRequest) (*ledgerv1.ListReconciliationStatementBreaksResponse, error) {
	run, next, err := s.Reconciliations.Findings(ctx, r.GetReconciliationId(), domain.ReconItemStatementBreak, r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &ledgerv1.ListReconciliationStatementBreaksResponse{StatementBreaks: protoBreaks(run.Result.Breaks, amountIn(run.Currency)),
		NextPageToken: next}, nil
}

// ListReconciliationCashDifferences implements ReconciliationService.
func (s *ReconciliationServer) ListReconciliationCashDifferences(ctx context.Context, r *ledgerv1.ListReconciliationCashDifferencesRequest) (*ledgerv1.ListReconciliationCashDifferencesResponse, error) {
	run, next, err := s.Reconciliations.Findings(ctx, r.GetReconciliationId(), domain.ReconItemCashDifference, r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &ledgerv1.ListReconciliationCashDifferencesResponse{CashDifferences: protoCashDifferences(run.Result.CashDifferences, amountIn(run.Currency)),
		NextPageToken: next}, nil
}

// ListReconciliationResolutions implements ReconciliationService.
func (s *ReconciliationServer) ListReconciliationResolutions(ctx context.Context, r *ledgerv1.ListReconciliationResolutionsRequest) (*ledgerv1.ListReconciliationResolutionsResponse, error) {
	currency, res, next, err := s.Reconciliations.ResolutionPage(ctx, r.GetReconciliationId(), r.GetReopened(), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	f := amountIn(currency)
	out := &ledgerv1.ListReconciliationResolutionsResponse{Resolutions: make([]*ledgerv1.ReconciliationResolution, 0, len(res)), NextPageToken: next}
	for i := range res {
		out.Resolutions = append(out.Resolutions, toProtoResolution(&res[i], f))
	}
	return out, nil
}

// ListReconciliationResolutionItems implements ReconciliationService.
func (s *ReconciliationServer) ListReconciliationResolutionItems(ctx context.Context, r *ledgerv1.ListReconciliationResolutionItemsRequest) (*ledgerv1.ListReconciliationResolutionItemsResponse, error) {
	currency, items, next, err := s.Reconciliations.ResolutionItems(ctx, r.GetReconciliationId(), r.GetResolutionId(), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	f := amountIn(currency)
	out := &ledgerv1.ListReconciliationResolutionItemsResponse{Items: make([]*ledgerv1.ReconciliationItem, 0, len(items)), NextPageToken: next}
	for _, x := range items {
		// As a resolution lists them: a line, or a movement; no status.
		it := &ledgerv1.ReconciliationItem{}
		if x.Status == domain.ReconItemUnmatchedInBank {
			protoLine(it, x.Line, f)
		} else {
			protoMove(it, x.Movement, f)
		}
		out.Items = append(out.Items, it)
	}
	return out, nil
}

func protoLine(it *ledgerv1.ReconciliationItem, l domain.BankLine, f func(decimal.Decimal) string) {
	it.StatementId, it.LineNo, it.Reference, it.BankAmount = l.StatementID, int32(l.LineNo), l.Reference, f(l.Amount)
	if !l.BookedOn.IsZero() {
		it.BookedOn = l.BookedOn.Format(time.DateOnly)
	}
}

func protoMove(it *ledgerv1.ReconciliationItem, m domain.Movement, f func(decimal.Decimal) string) {
	it.MovementKind, it.MovementKey, it.LedgerAmount, it.TransactionIds = m.Kind, m.Key, f(m.Amount), m.TransactionIDs
}

func toProtoRun(r *domain.ReconRun, items bool) *ledgerv1.Reconciliation {
	f := amountIn(r.Currency)
	out := &ledgerv1.Reconciliation{
		ReconciliationId: r.ID, Currency: r.Currency, Trigger: r.Trigger, RequestedBy: r.RequestedBy,
		CreatedAt: timestamppb.New(r.CreatedAt), PreviousReconciliationId: r.PreviousID,
		JournalHeadHash: r.HeadHash, JournalHeadPosition: r.HeadPosition, StatementIds: r.StatementIDs,
		LedgerBankClient: f(r.LedgerBankClient), Verdict: r.Verdict, MatchedCount: int32(r.MatchedCount),
		UnmatchedInBankCount: int32(r.UnmatchedBankN), UnmatchedInLedgerCount: int32(r.UnmatchedLedgerN),
		OutstandingInLedgerCount: int32(r.OutstandingN), StatementBreakCount: int32(r.BreakN),
		CashDifferenceCount: int32(r.CashDifferenceN),
	}
	if out.StatementIds == nil {
		out.StatementIds = []string{}
	}
	if r.BankClosing != nil {
		out.BankClosingBalance = f(*r.BankClosing)
	}
	if !items {
		return out
	}
	out.ItemsNextPageToken = r.ItemsNext
	out.StatementBreaksNextPageToken, out.CashDifferencesNextPageToken = r.BreaksNext, r.CashDifferencesNext
	out.ResolutionsNextPageToken, out.ReopenedResolutionsNextPageToken = r.ResolutionsNext, r.ReopenedNext
	out.ResolutionCount, out.ReopenedResolutionCount = int32(max(r.ResolutionN, len(r.Resolutions))), int32(max(r.ReopenedN, len(r.Reopened)))
	line := func(it *ledgerv1.ReconciliationItem, l domain.BankLine) { protoLine(it, l, f) }
	move := func(it *ledgerv1.ReconciliationItem, m domain.Movement) { protoMove(it, m, f) }
	out.Matched = make([]*ledgerv1.ReconciliationItem, 0, len(r.Result.Matched))
	for _, x := range r.Result.Matched {
		it := &ledgerv1.ReconciliationItem{}
		line(it, x.Line)
		move(it, x.Movement)
		out.Matched = append(out.Matched, it)
	}
	out.UnmatchedInBank = make([]*ledgerv1.ReconciliationItem, 0, len(r.Result.UnmatchedBank))
	for _, x := range r.Result.UnmatchedBank {
		it := &ledgerv1.ReconciliationItem{Reason: x.Reason}
		line(it, x.Line)
		out.UnmatchedInBank = append(out.UnmatchedInBank, it)
	}
	out.UnmatchedInLedger = make([]*ledgerv1.ReconciliationItem, 0, len(r.Result.UnmatchedLedger))
	for _, x := range r.Result.UnmatchedLedger {
		it := &ledgerv1.ReconciliationItem{Reason: x.Reason, TransactionIds: []string{}, Outstanding: x.Outstanding}
		move(it, x.Movement)
		out.UnmatchedInLedger = append(out.UnmatchedInLedger, it)
	}
	out.StatementBreaks = protoBreaks(r.Result.Breaks, f)
	out.CashDifferences = protoCashDifferences(r.Result.CashDifferences, f)
	out.Resolutions = make([]*ledgerv1.ReconciliationResolution, 0, len(r.Resolutions))
	for i := range r.Resolutions {
		out.Resolutions = append(out.Resolutions, toProtoResolution(&r.Resolutions[i], f))
	}
	out.ReopenedResolutions = make([]*ledgerv1.ReconciliationResolution, 0, len(r.Reopened))
	for i := range r.Reopened {
		out.ReopenedResolutions = append(out.ReopenedResolutions, toProtoResolution(&r.Reopened[i], f))
	}
	return out
}

func protoBreaks(bs []domain.StatementBreak, f func(decimal.Decimal) string) []*ledgerv1.StatementBreak {
	out := make([]*ledgerv1.StatementBreak, 0, len(bs))
	for _, b := range bs {
		out = append(out, &ledgerv1.StatementBreak{Account: b.Account, PreviousStatementId: b.PreviousID,
			PreviousClosingBalance: f(b.PreviousClosing), StatementId: b.StatementID, OpeningBalance: f(b.Opening), Difference: f(b.Difference), Reason: b.Reason})
	}
	return out
}

func protoCashDifferences(ds []domain.CashDifference, f func(decimal.Decimal) string) []*ledgerv1.CashDifference {
	out := make([]*ledgerv1.CashDifference, 0, len(ds))
	for _, d := range ds {
		out = append(out, &ledgerv1.CashDifference{StatementId: d.StatementID, Account: d.Account,
			ClosingAt: timestamppb.New(d.ClosingAt), BankClosingBalance: f(d.Bank), LedgerBankClient: f(d.Ledger),
			InTransitBank: f(d.InBank), InTransitLedger: f(d.InLedger), Difference: f(d.Difference), Reason: d.Reason})
	}
	return out
}

func toProtoResolution(r *domain.ReconResolution, f func(decimal.Decimal) string) *ledgerv1.ReconciliationResolution {
	out := &ledgerv1.ReconciliationResolution{ResolutionId: r.ID, ReconciliationId: r.ReconciliationID, Action: r.Action, Reason: r.Reason,
		ResolvedBy: r.ResolvedBy, CreatedAt: timestamppb.New(r.CreatedAt), Items: make([]*ledgerv1.ReconciliationItem, 0, len(r.Lines)+len(r.Movements)),
		ItemCount: int32(max(r.ItemN, len(r.Lines)+len(r.Movements))), ItemsNextPageToken: r.ItemsNext}
	if r.Void != nil {
		out.VoidedAt, out.VoidedBy, out.VoidReason = timestamppb.New(r.Void.VoidedAt), r.Void.VoidedBy, r.Void.Reason
	}
	for _, l := range r.Lines {
		it := &ledgerv1.ReconciliationItem{StatementId: l.StatementID, LineNo: int32(l.LineNo), Reference: l.Reference, BankAmount: f(l.Amount)}
		if !l.BookedOn.IsZero() {
			it.BookedOn = l.BookedOn.Format(time.DateOnly)
		}
		out.Items = append(out.Items, it)
	}
	for _, m := range r.Movements {
		out.Items = append(out.Items, &ledgerv1.ReconciliationItem{MovementKind: m.Kind, MovementKey: m.Key, LedgerAmount: f(m.Amount), TransactionIds: m.TransactionIDs})
	}
	return out
}

// amountIn formats amounts in the currency's minor units (as given when
// the currency is unknown).
func amountIn(currency string) func(decimal.Decimal) string { return domain.AmountFormat(currency) }
