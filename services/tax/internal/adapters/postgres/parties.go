package postgres

import (
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// PartyStore is the tax-profile read model's store: tax's inbox and
// UpsertProfiles in one transaction.
func (s *Store) PartyStore() outbox.ReadModelStore[domain.Profile] {
	return outbox.ReadModelStore[domain.Profile]{Pool: s.Pool, Schema: Schema, Upsert: s.UpsertProfiles}
}
