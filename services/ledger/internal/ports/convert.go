// Package ports adapts the ledger's use cases to gRPC (and through the
// gateway, REST) and to the charges.rated JetStream stream.
package ports

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/money"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

func toProtoTx(t *domain.Transaction) *ledgerv1.Transaction {
	md := t.Metadata
	if md == nil {
		md = map[string]string{}
	}
	out := &ledgerv1.Transaction{
		TransactionId: t.ID, IdempotencyKey: t.IdempotencyKey, Description: t.Description,
		EffectiveAt: timestamppb.New(t.EffectiveAt), CreatedAt: timestamppb.New(t.CreatedAt),
		Metadata: md, Reverses: t.Reverses, ReversedBy: t.ReversedBy, Hash: t.Hash,
	}
	for _, p := range t.Postings {
		amt := p.Amount.String()
		if c, err := money.Lookup(p.Currency); err == nil {
			amt = c.Format(p.Amount)
		}
		out.Postings = append(out.Postings, &ledgerv1.Posting{Account: p.Account.Address, Direction: string(p.Direction), Amount: amt, Currency: p.Currency})
	}
	return out
}

func toProtoAccount(v app.AccountView) *ledgerv1.Account {
	out := &ledgerv1.Account{Address: v.Account.Address, Kind: string(v.Account.Kind), FundPool: string(v.Account.Pool),
		Balances: []*ledgerv1.Balance{}}
	for _, b := range v.Balances {
		out.Balances = append(out.Balances, &ledgerv1.Balance{Currency: b.Currency, Amount: b.Format()})
	}
	return out
}

func fromProtoPostings(ps []*ledgerv1.Posting) []domain.RawPosting {
	out := make([]domain.RawPosting, len(ps))
	for i, p := range ps {
		out[i] = domain.RawPosting{Account: p.GetAccount(), Direction: p.GetDirection(), Amount: p.GetAmount(), Currency: p.GetCurrency()}
	}
	return out
}
