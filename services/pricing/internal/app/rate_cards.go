package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// Page sizes of the card list.
const (
	PageSizeDefault = 50
	PageSizeMax     = 500
	cardIDLenMax    = 64
)

func invalid(vs []domain.Violation) error {
	if len(vs) == 0 {
		return nil
	}
	e := &apperr.InvalidError{}
	for _, v := range vs {
		e.Violations = append(e.Violations, apperr.FieldViolation{Field: v.Field, Reason: v.Reason})
	}
	return e
}

// CreateRateCard validates and stores a new rate card version. A replay with
// the same rate_card_id and body returns the original; another body is a
// conflict. A card sent without an id is named by its body (bodyID), so a
// client's retry answers the card it made.
func (a *App) CreateRateCard(ctx context.Context, in domain.CardInput) (domain.StoredCard, error) {
	id := in.ID
	in.ID = ""
	if len(id) > cardIDLenMax {
		return domain.StoredCard{}, apperr.Invalid("rate_card_id", "longer than %d characters", cardIDLenMax)
	}
	if err := a.canonicalModels(ctx, in.Prices); err != nil {
		return domain.StoredCard{}, err
	}
	card, vs := domain.ParseCard(in)
	if err := invalid(vs); err != nil {
		return domain.StoredCard{}, err
	}
	in.Currency, in.EffectiveFrom = card.Currency.Code, card.EffectiveFrom // microseconds, as answered
	if id == "" {
		var err error
		if id, err = bodyID(in); err != nil {
			return domain.StoredCard{}, err
		}
	}
	row := domain.StoredCard{ID: id, Currency: card.Currency.Code, EffectiveFrom: card.EffectiveFrom, Body: in, CreatedAt: a.Clock.Now()}
	created, err := a.Store.InsertCard(ctx, row)
	if err != nil {
		return domain.StoredCard{}, err
	}
	if !created {
		old, err := a.Store.Card(ctx, id)
		if err != nil {
			return domain.StoredCard{}, err
		}
		if !old.Body.SameBody(in) {
			return domain.StoredCard{}, fmt.Errorf("rate card %s exists with a different body (create a new version instead): %w", id, apperr.ErrConflict)
		}
		return old, nil
	}
	select {
	case a.cardAdded <- struct{}{}:
	default:
	}
	return a.Store.Card(ctx, id)
}

// bodyID names a card sent without an id by its body: "rc_" and 32 hex
// digits of SHA-256 over it. A fresh id per call made a client's retry a
// second version, and one delayed past a correction of the same
// effective_from (a later seq wins the tie) put the old prices back in
// force. The same body posted again on purpose is that card too: new
// prices take a later effective_from, or an id of their own.
func bodyID(in domain.CardInput) (string, error) {
	in.ID, in.EffectiveFrom = "", in.EffectiveFrom.UTC()
	b, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("rate card body: %w", err)
	}
	h := sha256.Sum256(b)
	return "rc_" + hex.EncodeToString(h[:16]), nil
}

// RateCard returns one card.
func (a *App) RateCard(ctx context.Context, id string) (domain.StoredCard, error) {
	r, err := a.Store.Card(ctx, id)
	if errors.Is(err, apperr.ErrNotFound) {
		return r, fmt.Errorf("rate card %q: %w", id, apperr.ErrNotFound)
	}
	return r, err
}

// cardsListing names the rate card listing in its page tokens (pkg/cursor).
const cardsListing = "pricing.rate_cards"

// RateCards lists cards, newest effective_from first.
func (a *App) RateCards(ctx context.Context, currency string, size int, token string) ([]domain.StoredCard, string, error) {
	if size <= 0 {
		size = PageSizeDefault
	}
	size = min(size, PageSizeMax)
	if currency != "" {
		// ?currency=XYZ answered an empty listing.
		cur, err := money.Lookup(currency)
		if err != nil {
			return nil, "", apperr.Invalid("currency", "%v", err)
		}
		currency = cur.Code
	}
	listing := cursor.Scoped(cardsListing, currency)
	var afterEff time.Time
	var afterSeq int64
	if token != "" {
		pos, err := cursor.Decode(listing, token, 2)
		if err != nil {
			return nil, "", err
		}
		if afterEff, err = pos.Time(0); err != nil {
			return nil, "", err
		}
		if afterSeq, err = pos.Int64(1); err != nil || afterSeq <= 0 {
			return nil, "", cursor.Malformed()
		}
	}
	rows, err := a.Store.Cards(ctx, currency, afterEff, afterSeq, size+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rows) > size {
		rows = rows[:size]
		last := rows[size-1]
		next = cursor.Encode(listing, cursor.FormatTime(last.EffectiveFrom), cursor.FormatInt64(last.Seq))
	}
	return rows, next, nil
}
