package app

import (
	"context"
	"time"

	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// Store is what metering's use cases need from storage (implemented by
// adapters/postgres). Reads outside a transaction are here; every write runs
// in WithTx, whose Tx also puts the events the write publishes into the
// outbox, so a write and its events commit together. A missing party is
// apperr.ErrNotFound.
type Store interface {
	WithTx(ctx context.Context, fn func(Tx) error) error

	// GPUModels returns the GPU catalogue's names (ids and aliases) and the
	// catalogue's version they are of.
	GPUModels(ctx context.Context) (gpucatalog.Index, CatalogueVersion, error)
	// GPUCatalogueVersion returns the catalogue's version alone: it moves on
	// every write of a model, by any process.
	GPUCatalogueVersion(ctx context.Context) (CatalogueVersion, error)
	Provider(ctx context.Context, id string) (domain.Provider, error)
	ListProviders(ctx context.Context, tier, after string, limit int) ([]domain.Provider, error)
	Renter(ctx context.Context, id string) (domain.Renter, error)
	ListRenters(ctx context.Context, after string, limit int) ([]domain.Renter, error)
	// PartiesOf loads the providers and renters named, by id.
	PartiesOf(ctx context.Context, providerIDs, renterIDs []string) (map[string]domain.Provider, map[string]domain.Renter, error)
	ListUsage(ctx context.Context, f UsageFilter) ([]domain.Recorded, error)
}

// Tx is Store inside one database transaction.
type Tx interface {
	// InsertProvider inserts p unless its id exists; it reports whether it did.
	InsertProvider(ctx context.Context, p domain.Provider) (bool, error)
	UpdateProvider(ctx context.Context, p domain.Provider) error
	// Provider reads one provider; forUpdate locks it until the end of the transaction.
	Provider(ctx context.Context, id string, forUpdate bool) (domain.Provider, error)
	InsertRenter(ctx context.Context, r domain.Renter) (bool, error)
	// UpdateRenter writes every mutable field of r.
	UpdateRenter(ctx context.Context, r domain.Renter) error
	// Renter reads one renter; forUpdate locks it until the end of the transaction.
	Renter(ctx context.Context, id string, forUpdate bool) (domain.Renter, error)
	// PublishProvider and PublishRenter publish party.updated.{id}, once per version.
	PublishProvider(ctx context.Context, p domain.Provider) error
	PublishRenter(ctx context.Context, r domain.Renter) error

	// LockLeases holds a lock per lease until the end of the transaction, so
	// InsertUsage sees every committed event of those leases.
	LockLeases(ctx context.Context, leaseIDs []string) error
	// LeaseParties returns, for each lease of leaseIDs with recorded usage,
	// the parties its usage names (one pair, but for usage recorded before
	// a lease was held to one).
	LeaseParties(ctx context.Context, leaseIDs []string) (map[string][]domain.LeaseParties, error)
	// InsertUsage records events that do not overlap each other, skipping
	// any whose id exists or whose time overlaps its lease's recorded time;
	// it returns the ids it inserted.
	InsertUsage(ctx context.Context, evs []domain.Recorded) (map[string]bool, error)
	// Existing returns the recorded events among ids, by id.
	Existing(ctx context.Context, ids []string) (map[string]domain.Event, error)
	// Overlapping returns, per event id, the earliest recorded event of its
	// lease overlapping it ("" for none).
	Overlapping(ctx context.Context, evs []domain.Event) (map[string]string, error)
	// PublishRecorded publishes usage.recorded.{provider}: one batch per
	// provider of the accepted events, enriched from their parties.
	PublishRecorded(ctx context.Context, accepted []domain.Recorded, provs map[string]domain.Provider, rents map[string]domain.Renter) error
}

// CatalogueVersion identifies a state of the GPU catalogue: the number of
// models and the sum of their versions (a write adds a model or raises its
// version; models are never deleted).
type CatalogueVersion struct{ Models, Versions int64 }

// UsageFilter selects recorded usage.
type UsageFilter struct {
	LeaseID, RenterID, ProviderID string
	From, To                      time.Time // zero = open
	AfterStart                    time.Time // cursor: (start_time, id) > (AfterStart, AfterID)
	AfterID                       string
	Limit                         int
}
