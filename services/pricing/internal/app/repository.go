package app

import (
	"context"
	"time"

	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// Store is what pricing's use cases need from storage (implemented by
// adapters/postgres). Rating writes run in WithTx; the rest are single
// statements. A missing card is apperr.ErrNotFound.
type Store interface {
	WithTx(ctx context.Context, fn func(Tx) error) error

	// InsertCard stores a card version unless its id exists; it reports whether it did.
	InsertCard(ctx context.Context, c domain.StoredCard) (bool, error)
	Card(ctx context.Context, id string) (domain.StoredCard, error)
	// Cards lists cards, newest effective first, after the (effective_from,
	// seq) position when afterSeq > 0.
	Cards(ctx context.Context, currency string, afterEff time.Time, afterSeq int64, limit int) ([]domain.StoredCard, error)
	// AllCards loads every card in seq order, and their number.
	AllCards(ctx context.Context) ([]domain.StoredCard, int64, error)
	// CardsSeq is the number of cards (never changed or removed); AllCards
	// answers it for the cards it returns.
	CardsSeq(ctx context.Context) (int64, error)
	// Pending lists usage waiting for a rate card, oldest first, after
	// the row waiting since afterSince with event id afterID (the zero
	// time and "": from the first), and the last row read (for the next
	// page; a row whose payload does not decode is read, not listed).
	Pending(ctx context.Context, afterSince time.Time, afterID string, limit int) (rows []domain.PendingUsage, lastSince time.Time, lastID string, err error)
}

// Tx is Store inside one transaction (rating, the GPU catalogue's read model).
type Tx interface {
	// LockRating serialises rating (cumulative rounding and tier volume
	// must see every earlier charge), across processes too.
	LockRating(ctx context.Context) error
	// Claim records inbound message ids in the inbox and returns the fresh ones.
	Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error)
	// TakePending removes pending usage and returns the event ids it
	// removed: only those are rated, so two retriers never rate one twice.
	TakePending(ctx context.Context, eventIDs []string) (map[string]bool, error)
	TierUsage(ctx context.Context, keys []domain.RenterMonth) (map[domain.RenterMonth]int64, error)
	SaveTierUsage(ctx context.Context, m map[domain.RenterMonth]int64) error
	LeaseTotals(ctx context.Context, keys []domain.LeaseCurrency) (map[domain.LeaseCurrency]domain.LeaseTotal, error)
	SaveLeaseTotals(ctx context.Context, m map[domain.LeaseCurrency]domain.LeaseTotal, now time.Time) error
	InsertCharges(ctx context.Context, cs []domain.Charge, now time.Time) error
	// AddPending keeps usage no card prices yet (a repeat counts an attempt).
	AddPending(ctx context.Context, ps []domain.PendingUsage, now time.Time) error
	// PublishCharges publishes charges.rated.{provider}, one message per batch.
	PublishCharges(ctx context.Context, bs []domain.ChargeBatch) error
	// ApplyGPUModels stores the GPU catalogue's versions newer than those held.
	ApplyGPUModels(ctx context.Context, vs []domain.GPUModelVersion) error
}
