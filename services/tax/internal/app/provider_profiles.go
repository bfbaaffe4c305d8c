package app

import (
	"context"
	"fmt"

	"github.com/gpubill/gpubill/pkg/readmodel"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// ProfileUpdate is one party.updated message for the tax-profile read model
// (Keep false: a renter's).
type ProfileUpdate = readmodel.Update[domain.Profile]

// PartyStore keeps the read model of providers' tax profiles and
// jurisdictions (metering owns the parties; adapters/postgres implements it).
type PartyStore interface {
	// WithPartyTx runs fn in one transaction.
	WithPartyTx(ctx context.Context, fn func(PartyTx) error) error
}

// PartyTx is the read model's writes inside one transaction.
type PartyTx interface {
	// Claim records consumer's message ids in the inbox and returns those
	// not seen before.
	Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error)
	// UpsertProfiles stores the profiles whose versions are newer than
	// those held.
	UpsertProfiles(ctx context.Context, rows []domain.Profile) error
}

// ProviderProfiles applies party.updated to the profiles withholding reads.
type ProviderProfiles struct {
	Store    PartyStore
	Consumer string // the durable consumer whose ids are claimed
}

// Apply applies one batch exactly once: every id is claimed, and the
// profiles of the fresh updates are upserted in the same transaction.
func (p *ProviderProfiles) Apply(ctx context.Context, ups []ProfileUpdate) error {
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
		if err := tx.UpsertProfiles(ctx, rows); err != nil {
			return fmt.Errorf("party updates: %w", err)
		}
		return nil
	})
}
