// Package app holds pricing's use cases: rate cards, rating usage into
// charges (cumulative rounding per lease), retrying usage that waited for a
// card, and quotes.
package app

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/clock"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// App is pricing's use cases over its store.
type App struct {
	Pool  *pgxpool.Pool
	Store *postgres.Store
	Clock clock.Clock
	// Catalogue is the GPU catalogue's read model: a card prices only its
	// models.
	Catalogue GPUCatalogue
	// FailPoint, when set (tests), is called at named points of the rating
	// transaction; an error it returns fails that batch.
	FailPoint func(point string) error

	cardAdded chan struct{}

	mu      sync.Mutex
	book    *domain.Book
	bookSeq int64
}

// New returns pricing's use cases.
func New(pool *pgxpool.Pool, clk clock.Clock) *App {
	return &App{Pool: pool, Store: &postgres.Store{Pool: pool}, Clock: clk, Catalogue: &postgres.GPUModels{Pool: pool},
		cardAdded: make(chan struct{}, 1)}
}

// CardAdded signals (coalesced) that a rate card was created.
func (a *App) CardAdded() <-chan struct{} { return a.cardAdded }

func (a *App) failPoint(p string) error {
	if a.FailPoint == nil {
		return nil
	}
	return a.FailPoint(p)
}

// Book returns the rate cards, reloading them when a card was added (by any
// process: the newest seq is checked once per rating batch).
func (a *App) Book(ctx context.Context) (*domain.Book, error) {
	seq, err := a.Store.CardsSeq(ctx)
	if err != nil {
		return nil, fmt.Errorf("rate cards: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.book != nil && seq == a.bookSeq {
		return a.book, nil
	}
	rows, max, err := a.Store.AllCards(ctx)
	if err != nil {
		return nil, err
	}
	cards := make([]*domain.Card, 0, len(rows))
	for _, r := range rows {
		c, err := cardFromRow(r)
		if err != nil {
			return nil, err
		}
		cards = append(cards, c)
	}
	a.book, a.bookSeq = domain.NewBook(cards), max
	return a.book, nil
}

func cardFromRow(r postgres.CardRow) (*domain.Card, error) {
	var req pricingv1.CreateRateCardRequest
	if err := proto.Unmarshal(r.Body, &req); err != nil {
		return nil, fmt.Errorf("rate card %s: %w", r.ID, err)
	}
	in := CardInput(&req)
	in.ID = r.ID
	c, vs := domain.ParseCard(in)
	if len(vs) > 0 {
		return nil, fmt.Errorf("stored rate card %s no longer valid: %v", r.ID, vs)
	}
	c.Seq = r.Seq
	return c, nil
}

// CardInput converts the wire request to the domain's input.
func CardInput(r *pricingv1.CreateRateCardRequest) domain.CardInput {
	in := domain.CardInput{ID: r.GetRateCardId(), Currency: r.GetCurrency()}
	if r.EffectiveFrom != nil {
		in.EffectiveFrom = r.EffectiveFrom.AsTime()
	}
	for _, p := range r.GpuPrices {
		in.Prices = append(in.Prices, domain.PriceInput{Model: p.GpuModel, Hourly: p.Hourly, Region: p.Region})
	}
	for _, b := range r.TimeBands {
		in.Bands = append(in.Bands, domain.BandInput{Name: b.Name, Start: b.Start, End: b.End, TimeZone: b.Timezone, Multiplier: b.Multiplier})
	}
	for _, t := range r.VolumeTiers {
		in.Tiers = append(in.Tiers, domain.TierInput{UpToGPUHours: t.UpToGpuHours, Discount: t.Discount})
	}
	if p := r.PueSurcharge; p != nil {
		in.PUE = &domain.PUEInput{Threshold: p.Threshold, PerGPUHour: p.PerGpuHour}
	}
	return in
}
