// Package app holds pricing's use cases: rate cards, rating usage into
// charges (cumulative rounding per lease), retrying usage that waited for a
// card, and quotes.
package app

import (
	"context"
	"fmt"
	"log/slog"
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
	// Tiers is the providers' tiers on record (party.updated): a quote
	// naming a provider takes its tier's commission (nil: the request's).
	Tiers TierReader
	// Log is told of stored rate cards read in a way today's checks would
	// refuse (nil: slog.Default).
	Log *slog.Logger
	// FailPoint, when set (tests), is called at named points of the rating
	// transaction; an error it returns fails that batch.
	FailPoint func(point string) error

	cardAdded chan struct{}

	mu      sync.Mutex
	book    *domain.Book
	bookSeq int64
	// checked holds the stored cards (by Seq) already held to today's
	// checks for new cards: once per process, not at every reload of the
	// book (a card with bands in several zones takes milliseconds to check
	// for overlaps, and the book reloads under mu after every card added).
	checked map[int64]bool
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
		cards = append(cards, a.cardFromRow(r))
	}
	book := domain.NewBook(cards)
	// A card set aside counts while it still prices some instant: once a
	// card of its currency and effective_from replaces it (what the alert
	// asks for), it prices none, and counted for good the alert never
	// cleared (cards are never deleted).
	aside := 0
	for _, c := range cards {
		if at, ok := book.For(c.Currency.Code, c.EffectiveFrom); c.Unreadable != "" && ok && at == c {
			aside++
		}
	}
	cardsSetAside.Set(float64(aside))
	a.book, a.bookSeq = book, max
	return a.book, nil
}

// cardFromRow reads a stored card as it meant when stored (domain.LoadCard).
// One it cannot read is set aside alone, holding its place in the book so
// the usage it would price waits as pending: one such card failed the whole
// book, and with it every rating, quote and invoice, in every currency.
// It is in force from its column's effective_from, the one listed: a
// body stored at nanoseconds priced from them.
func (a *App) cardFromRow(r domain.StoredCard) *domain.Card {
	in := r.Body
	in.ID, in.EffectiveFrom = r.ID, r.EffectiveFrom
	c, vs := domain.LoadCard(in)
	if len(vs) > 0 {
		a.log().Error("stored rate card cannot be read; usage it would price waits as pending until a card replaces it",
			"rate_card", r.ID, "currency", r.Currency, "effective_from", r.EffectiveFrom, "violations", fmt.Sprint(vs))
		return domain.SetAside(r, fmt.Sprint(vs))
	}
	if a.checked == nil {
		a.checked = map[int64]bool{}
	}
	if !a.checked[r.Seq] {
		a.checked[r.Seq] = true
		if _, vs := domain.ParseCard(in); len(vs) > 0 {
			// Read as an older version stored it (a band in "Local" follows
			// this process's zone): said, so an operator can replace it.
			a.log().Warn("stored rate card is read as stored; a new card like it would be refused",
				"rate_card", r.ID, "violations", fmt.Sprint(vs))
		}
	}
	c.Seq = r.Seq
	return c
}

func (a *App) log() *slog.Logger {
	if a.Log == nil {
		return slog.Default()
	}
	return a.Log
}
