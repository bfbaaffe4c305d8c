package app

import (
	"context"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// CreateFromSettled creates the payout of a settled statement inside tx
// (the consumer's transaction, which also claims the message): nothing
// when the settlement left no net to pay. It returns the ids of earlier
// payouts still waiting that joined it (their workflows have nothing left
// to wait for).
func (a *Payouts) CreateFromSettled(ctx context.Context, tx Tx, p domain.Payout) ([]string, error) {
	if !p.Net.IsPositive() {
		return nil, nil // nothing to pay (a settlement with no net leaves nothing in available)
	}
	return tx.CreateFromSettled(ctx, p, a.Minimums)
}
