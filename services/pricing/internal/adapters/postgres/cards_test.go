package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/gpucatalog"
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

// A card's effective_from is the instant the API answers (microseconds, as
// the column, the listing and page tokens keep it): one sent at
// nanoseconds priced from its body's nanosecond instant, so a correction
// posted at the answered effective_from (a later seq wins the tie) showed
// in force in the listing while the book priced everything after the
// nanoseconds with the original card, for good. Posted again as sent, it
// is the card it made; stored before with its body at nanoseconds, it
// prices from its column.
func TestCardAtNanosecondsPricesFromTheInstantAnswered(t *testing.T) {
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, Schema, migrations.For(Schema))
	s := NewStore(pool)
	models := &GPUModels{Pool: pool}
	if err := models.Seed(ctx, gpucatalog.Seed(), time.Now()); err != nil {
		t.Fatal(err)
	}
	a := app.New(s, models, clock.System{})
	eff := time.Date(2026, 12, 6, 10, 15, 30, 123456789, time.UTC) // a Go client's time.Now(), RFC3339Nano
	orig := domain.CardInput{Currency: "CNY", EffectiveFrom: eff, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.80"}}}
	first, err := a.CreateRateCard(ctx, orig)
	if err != nil {
		t.Fatal(err)
	}
	if want := eff.Truncate(time.Microsecond); !first.EffectiveFrom.Equal(want) || !first.Body.EffectiveFrom.Equal(want) {
		t.Errorf("answered effective_from %s, body %s; want %s", first.EffectiveFrom.Format(time.RFC3339Nano),
			first.Body.EffectiveFrom.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
	}
	again, err := a.CreateRateCard(ctx, orig)
	if err != nil || again.ID != first.ID {
		t.Fatalf("the same body posted again: %s, %v; want %s", again.ID, err, first.ID)
	}
	fix, err := a.CreateRateCard(ctx, domain.CardInput{ID: "rc-fix", Currency: "CNY", EffectiveFrom: first.EffectiveFrom,
		Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.00"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Stored before: a body at nanoseconds, its column at microseconds.
	old := domain.StoredCard{ID: "rc-old", Currency: "USD", EffectiveFrom: eff.Truncate(time.Microsecond), CreatedAt: eff,
		Body: domain.CardInput{Currency: "USD", EffectiveFrom: eff, Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "0.40"}}}}
	if _, err := s.InsertCard(ctx, old); err != nil {
		t.Fatal(err)
	}
	resent := old.Body
	resent.ID = old.ID
	if again, err := a.CreateRateCard(ctx, resent); err != nil || again.ID != old.ID {
		t.Errorf("the card stored before, posted again: %s, %v; want %s", again.ID, err, old.ID)
	}
	book, err := a.Book(ctx)
	if err != nil {
		t.Fatal(err)
	}
	priced := func(cur string, at time.Time) string {
		if c, ok := book.For(cur, at); ok {
			return c.ID
		}
		return "no card"
	}
	for _, at := range []time.Time{eff.Truncate(time.Microsecond), eff.Add(time.Second)} {
		if id := priced("CNY", at); id != fix.ID {
			t.Errorf("usage from %s priced by %s; want the correction %s", at.Format(time.RFC3339Nano), id, fix.ID)
		}
		if id := priced("USD", at); id != old.ID {
			t.Errorf("usage in USD from %s priced by %s; want %s from its column", at.Format(time.RFC3339Nano), id, old.ID)
		}
	}
}
