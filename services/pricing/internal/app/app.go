// Package app holds pricing's use cases: rate cards, rating usage into
// charges (cumulative rounding per lease), retrying usage that waited for a
// card, and quotes.
package app

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// App is pricing's use cases over its store.
type App struct {
	Store Store
	Clock clock.Clock
	// Catalogue is the GPU catalogue's read model: a card prices only its
	// models.
	Catalogue GPUCatalogue
	// Commission is the commission configuration settlement applies;
	// Splits the tax service's split (quotes).
	Commission split.CommissionPolicy
	Splits     SplitQuoter
	// FailPoint, when set (tests), is called at named points of the rating
	// transaction; an error it returns fails that batch.
	FailPoint func(point string) error

	cardAdded chan struct{}

	mu      sync.Mutex
	book    *domain.Book
	bookSeq int64
}

// New returns pricing's use cases.
func New(store Store, catalogue GPUCatalogue, clk clock.Clock) *App {
	return &App{Store: store, Clock: clk, Catalogue: catalogue, cardAdded: make(chan struct{}, 1)}
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
// process: the number of cards is checked once per rating batch).
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

func cardFromRow(r domain.StoredCard) (*domain.Card, error) {
	in := r.Body
	in.ID = r.ID
	c, vs := domain.ParseCard(in)
	if len(vs) > 0 {
		return nil, fmt.Errorf("stored rate card %s no longer valid: %v", r.ID, vs)
	}
	c.Seq = r.Seq
	return c, nil
}
