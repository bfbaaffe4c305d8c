package app

import (
	"context"
	"fmt"

	"github.com/gpubill/gpubill/pkg/readmodel"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// TierUpdate is one party.updated message for the provider-tier read model
// (Keep false: a renter's, or a provider's without a tier).
type TierUpdate = readmodel.Update[domain.ProviderTier]

// PartyStore keeps the read model of providers' tiers (metering owns the
// parties; adapters/postgres implements it).
type PartyStore interface {
	// WithPartyTx runs fn in one transaction.
	WithPartyTx(ctx context.Context, fn func(PartyTx) error) error
}

// PartyTx is the read model's writes inside one transaction.
type PartyTx interface {
	// Claim records consumer's message ids in the inbox and returns those
	// not seen before.
	Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error)
	// UpsertTiers stores the tiers whose versions are newer than those held.
	UpsertTiers(ctx context.Context, rows []domain.ProviderTier) error
}

// ProviderTiers applies party.updated to the tiers settlement splits with.
type ProviderTiers struct {
	Store    PartyStore
	Consumer string // the durable consumer whose ids are claimed
}

// Apply applies one batch exactly once: every id is claimed, and the tiers
// of the fresh updates are upserted in the same transaction.
func (p *ProviderTiers) Apply(ctx context.Context, ups []TierUpdate) error {
	ids := readmodel.IDs(ups)
	return p.Store.WithPartyTx(ctx, func(tx PartyTx) error {
		fresh, err := tx.Claim(ctx, p.Consumer, ids)
		if err != nil {
			return err
		}
		rows, anyFresh := readmodel.Fresh(ups, fresh)
		if !anyFresh {
			return nil
		}
		if err := tx.UpsertTiers(ctx, rows); err != nil {
			return fmt.Errorf("party updates: %w", err)
		}
		return nil
	})
}
