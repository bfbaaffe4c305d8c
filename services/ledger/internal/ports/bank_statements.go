package ports

import (
	"context"
	"encoding/hex"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/money"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// BankStatementServer is the gRPC BankStatementService.
type BankStatementServer struct {
	ledgerv1.UnimplementedBankStatementServiceServer
	Statements *app.Statements
}

// ImportBankStatement implements BankStatementService.
func (s *BankStatementServer) ImportBankStatement(ctx context.Context, r *ledgerv1.ImportBankStatementRequest) (*ledgerv1.ImportBankStatementResponse, error) {
	by := ""
	if p, ok := auth.FromContext(ctx); ok {
		by = p.Role
		if p.Subject != "" {
			by += ":" + p.Subject
		}
	}
	st, err := s.Statements.Import(ctx, app.ImportStatementInput{
		StatementID: r.GetStatementId(), Currency: r.GetCurrency(), Account: r.GetAccount(), Format: r.GetFormat(),
		Content: r.GetContent(), ImportedBy: by,
	})
	if err != nil {
		return nil, err
	}
	return &ledgerv1.ImportBankStatementResponse{Statement: toProtoStatement(st)}, nil
}

// ListBankStatements implements BankStatementService.
func (s *BankStatementServer) ListBankStatements(ctx context.Context, r *ledgerv1.ListBankStatementsRequest) (*ledgerv1.ListBankStatementsResponse, error) {
	sts, next, err := s.Statements.List(ctx, r.GetCurrency(), r.GetAccount(), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListBankStatementsResponse{Statements: []*ledgerv1.BankStatement{}, NextPageToken: next}
	for _, st := range sts {
		out.Statements = append(out.Statements, toProtoStatement(st))
	}
	return out, nil
}

func toProtoStatement(st app.StoredStatement) *ledgerv1.BankStatement {
	f := func(d interface{ String() string }) string { return d.String() }
	open, closing := f(st.Opening), f(st.Closing)
	if c, err := money.Lookup(st.Currency); err == nil {
		open, closing = c.Format(st.Opening), c.Format(st.Closing)
	}
	return &ledgerv1.BankStatement{
		StatementId: st.ID, Account: st.Account, Currency: st.Currency, Format: st.Format,
		StatementDate: st.Date.Format(time.DateOnly), ClosingAt: timestamppb.New(st.ClosingAt),
		OpeningBalance: open, ClosingBalance: closing, LineCount: int32(st.LineCount),
		ContentSha256: hex.EncodeToString(st.ContentSHA256), ImportedAt: timestamppb.New(st.ImportedAt), ImportedBy: st.ImportedBy,
	}
}
