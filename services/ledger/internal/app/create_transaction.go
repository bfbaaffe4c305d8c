package app

import (
	"context"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// CreateTransactionInput is a manual entry.
type CreateTransactionInput struct {
	IdempotencyKey string
	Description    string
	EffectiveAt    *time.Time // nil: now
	Metadata       map[string]string
	Postings       []domain.RawPosting
}

// CreateTransaction posts a manual entry (or a settlement's postings).
func (a *App) CreateTransaction(ctx context.Context, in CreateTransactionInput) (*domain.Transaction, error) {
	var vs []domain.Violation
	key := strings.TrimSpace(in.IdempotencyKey)
	if key == "" || len(key) > domain.IdempotencyKeyMax {
		vs = append(vs, domain.Violation{Field: "idempotency_key", Reason: "required, at most 256 characters"})
	}
	if len(in.Description) > domain.DescriptionMax {
		vs = append(vs, domain.Violation{Field: "description", Reason: "at most 1024 characters"})
	}
	vs = append(vs, domain.CheckMetadata(in.Metadata)...)
	postings, pvs := domain.ParsePostings(in.Postings)
	vs = append(vs, pvs...)
	if err := invalid(vs); err != nil {
		return nil, err
	}
	now := a.now()
	eff, effStr := now, ""
	if in.EffectiveAt != nil {
		eff = in.EffectiveAt.UTC().Truncate(time.Microsecond)
		effStr = eff.Format(time.RFC3339Nano)
	}
	hash, err := domain.RequestHash("transaction", map[string]any{
		"description": in.Description, "effective_at": effStr, "metadata": in.Metadata,
		"postings": domain.CanonicalPostings(postings),
	})
	if err != nil {
		return nil, err
	}
	t := &domain.Transaction{
		ID: ids.New(""), IdempotencyKey: key, Kind: domain.TxManual, Description: in.Description,
		EffectiveAt: eff, CreatedAt: now, Metadata: in.Metadata, Postings: postings, RequestHash: hash,
	}
	// Its audit record, as the interceptor would store it for this
	// answer (CreateTransactionResponse: the request's ids and the
	// transaction's id), goes into the write's own transaction when the
	// group commits in one (PostNew).
	return a.postGrouped(ctx, t, audited(audit.ClaimFrom(ctx), "transaction_id="+t.ID))
}
