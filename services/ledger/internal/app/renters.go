package app

import (
	"context"

	"github.com/gpubill/gpubill/pkg/readmodel"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// RentersConsumer records party.updated message ids in the ledger's inbox
// (the durable consumer's name).
const RentersConsumer = "ledger-renters"

// RenterUpdate is one party.updated message for the renters' read model
// (Keep false: a provider's).
type RenterUpdate = readmodel.Update[domain.RenterLimit]

// RenterStore keeps the read model of renters' currencies and credit limits
// (metering owns the parties; adapters/postgres.RenterStore implements it).
type RenterStore interface {
	// WithRenterTx runs fn in one transaction.
	WithRenterTx(ctx context.Context, fn func(RenterTx) error) error
}

// RenterTx is the read model's writes inside one transaction.
type RenterTx interface {
	// Claim records consumer's message ids in the inbox and returns those
	// not seen before.
	Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error)
	// UpsertRenters stores the renters whose versions are newer than those
	// held.
	UpsertRenters(ctx context.Context, rs []domain.RenterLimit) error
}

// Renters applies party.updated to the credit limits lease control reads.
type Renters struct {
	Store RenterStore
}

// Apply applies one batch exactly once: every id is claimed, and the
// renters of the fresh updates are upserted in the same transaction.
func (r *Renters) Apply(ctx context.Context, ups []RenterUpdate) error {
	ids := readmodel.IDs(ups)
	return r.Store.WithRenterTx(ctx, func(tx RenterTx) error {
		fresh, err := tx.Claim(ctx, RentersConsumer, ids)
		if err != nil {
			return err
		}
		rows, anyFresh := readmodel.Fresh(ups, fresh)
		if !anyFresh {
			return nil
		}
		return tx.UpsertRenters(ctx, rows)
	})
}
