package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/readmodel"
)

// ReadModelStore is a readmodel.Store on PostgreSQL: the claim goes to
// Schema's inbox and Upsert writes the rows, in one READ COMMITTED
// transaction.
type ReadModelStore[R any] struct {
	Pool   *pgxpool.Pool
	Schema string
	Upsert func(ctx context.Context, tx pgx.Tx, rows []R) error
}

var _ readmodel.Store[int] = ReadModelStore[int]{}

// WithTx runs fn in one transaction.
func (s ReadModelStore[R]) WithTx(ctx context.Context, fn func(readmodel.Tx[R]) error) error {
	return pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error { return fn(readModelTx[R]{s: s, tx: tx}) })
}

type readModelTx[R any] struct {
	s  ReadModelStore[R]
	tx pgx.Tx
}

func (t readModelTx[R]) Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error) {
	return Claim(ctx, t.tx, t.s.Schema, consumer, ids)
}

func (t readModelTx[R]) Upsert(ctx context.Context, rows []R) error {
	return t.s.Upsert(ctx, t.tx, rows)
}
