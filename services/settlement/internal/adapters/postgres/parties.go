package postgres

import (
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// PartyStore is the provider-tier read model's store: settlement's inbox
// and UpsertTiers in one transaction.
func (s *Store) PartyStore() outbox.ReadModelStore[domain.ProviderTier] {
	return outbox.ReadModelStore[domain.ProviderTier]{Pool: s.Pool, Schema: Schema, Upsert: s.UpsertTiers}
}
