package app

import (
	"context"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// SettledConsumer records settlement.settled message ids in payout's inbox
// (the durable consumer's name).
const SettledConsumer = "payout-settled"

// SettledMessage is one settlement.settled message as the port read it:
// the payout its statement asks for.
type SettledMessage struct {
	ID     string
	Payout domain.Payout
}

// CreateFromSettledMessages creates the payouts of the fresh messages in one
// transaction that claims their ids (a message seen before, or twice in one
// fetch, counts once). It returns the ids of earlier payouts still waiting
// that joined them.
func (a *Payouts) CreateFromSettledMessages(ctx context.Context, msgs []SettledMessage) ([]string, error) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	var joined []string
	err := a.Store.Update(ctx, func(tx Tx) error {
		joined = nil
		fresh, err := tx.Claim(ctx, SettledConsumer, ids)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if !fresh[m.ID] {
				continue
			}
			delete(fresh, m.ID)
			j, err := a.CreateFromSettled(ctx, tx, m.Payout)
			if err != nil {
				return err
			}
			joined = append(joined, j...)
		}
		return nil
	})
	return joined, err
}

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
