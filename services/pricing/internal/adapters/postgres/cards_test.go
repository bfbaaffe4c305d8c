package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// The rating book is reloaded when a card commits, whatever seq it took: a
// card whose insert took the lower seq but committed after a book was
// loaded with the higher one was never loaded (the book was keyed by the
// newest seq), until some other card was added.
func TestBookSeesACardThatCommittedLate(t *testing.T) {
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, Schema, migrations.For(Schema))
	s := NewStore(pool)
	a := app.New(s, nil, clock.System{})
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	card := func(id, currency string) domain.StoredCard {
		return domain.StoredCard{ID: id, Currency: currency, EffectiveFrom: from, CreatedAt: from,
			Body: domain.CardInput{Currency: currency, EffectiveFrom: from, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.80"}}}}
	}
	late, err := pool.Begin(ctx) // takes the lower seq, commits last
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) // committed below (a no-op then)
	x := card("rc-late", "USD")
	body, err := encodeCardBody(x.Body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.Exec(ctx, `insert into pricing.rate_cards (rate_card_id, currency, effective_from, body, created_at)
		values ($1,$2,$3,$4,$5)`, x.ID, x.Currency, x.EffectiveFrom, body, x.CreatedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertCard(ctx, card("rc-early", "CNY")); err != nil {
		t.Fatal(err)
	}
	book, err := a.Book(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := book.For("CNY", from.Add(time.Hour)); !ok {
		t.Fatal("the committed card is not in the book")
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if book, err = a.Book(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := book.For("USD", from.Add(time.Hour)); !ok {
		t.Fatal("the card that committed after the book was loaded is not in it")
	}
}
