package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

var _ app.PartyStore = (*Store)(nil)

// WithPartyTx runs fn in one READ COMMITTED transaction.
func (s *Store) WithPartyTx(ctx context.Context, fn func(app.PartyTx) error) error {
	return pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error { return fn(partyTx{s: s, tx: tx}) })
}

type partyTx struct {
	s  *Store
	tx pgx.Tx
}

func (t partyTx) Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error) {
	return outbox.Claim(ctx, t.tx, Schema, consumer, ids)
}

func (t partyTx) UpsertTiers(ctx context.Context, rows []domain.ProviderTier) error {
	return t.s.UpsertTiers(ctx, t.tx, rows)
}
