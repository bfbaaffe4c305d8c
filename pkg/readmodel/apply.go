package readmodel

import (
	"context"
	"fmt"
)

// Tx is a read model's writes inside one transaction.
type Tx[R any] interface {
	// Claim records consumer's message ids in the inbox and returns those
	// not seen before.
	Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error)
	// Upsert stores the rows whose versions are newer than those held.
	Upsert(ctx context.Context, rows []R) error
}

// Store runs a read model's writes in one transaction (an adapter
// implements it; pkg/outbox.ReadModelStore on PostgreSQL).
type Store[R any] interface {
	WithTx(ctx context.Context, fn func(Tx[R]) error) error
}

// Applier applies one consumer's batches of updates to a read model exactly
// once: every id is claimed, and the rows of the fresh updates are upserted
// in the same transaction.
type Applier[R any] struct {
	Store    Store[R]
	Consumer string // the durable consumer whose ids are claimed
}

// Apply applies one batch.
func (a *Applier[R]) Apply(ctx context.Context, ups []Update[R]) error {
	ids := IDs(ups)
	return a.Store.WithTx(ctx, func(tx Tx[R]) error {
		fresh, err := tx.Claim(ctx, a.Consumer, ids)
		if err != nil {
			return err
		}
		rows, anyFresh := Fresh(ups, fresh)
		if !anyFresh {
			return nil
		}
		if err := tx.Upsert(ctx, rows); err != nil {
			return fmt.Errorf("%s: upsert: %w", a.Consumer, err)
		}
		return nil
	})
}
