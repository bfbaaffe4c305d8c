package app

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/adapters/postgres"
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
// conflict.
func (a *App) CreateRateCard(ctx context.Context, req *pricingv1.CreateRateCardRequest) (*pricingv1.RateCard, error) {
	body := proto.Clone(req).(*pricingv1.CreateRateCardRequest)
	id := body.RateCardId
	body.RateCardId = ""
	if len(id) > cardIDLenMax {
		return nil, apperr.Invalid("rate_card_id", "longer than %d characters", cardIDLenMax)
	}
	if err := a.canonicalModels(ctx, body); err != nil {
		return nil, err
	}
	in := CardInput(body)
	card, vs := domain.ParseCard(in)
	if err := invalid(vs); err != nil {
		return nil, err
	}
	body.Currency = card.Currency.Code
	if id == "" {
		id = ids.New("rc")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(body)
	if err != nil {
		return nil, err
	}
	row := postgres.CardRow{ID: id, Currency: card.Currency.Code, EffectiveFrom: card.EffectiveFrom, Body: b, CreatedAt: a.Clock.Now()}
	created, err := a.Store.InsertCard(ctx, row)
	if err != nil {
		return nil, err
	}
	if !created {
		old, err := a.Store.Card(ctx, id)
		if err != nil {
			return nil, err
		}
		var oldBody pricingv1.CreateRateCardRequest
		if err := proto.Unmarshal(old.Body, &oldBody); err != nil {
			return nil, err
		}
		if !proto.Equal(&oldBody, body) {
			return nil, fmt.Errorf("rate card %s exists with a different body (create a new version instead): %w", id, apperr.ErrConflict)
		}
		return cardPB(old, &oldBody), nil
	}
	select {
	case a.cardAdded <- struct{}{}:
	default:
	}
	stored, err := a.Store.Card(ctx, id)
	if err != nil {
		return nil, err
	}
	return cardPB(stored, body), nil
}

func cardPB(r postgres.CardRow, body *pricingv1.CreateRateCardRequest) *pricingv1.RateCard {
	return &pricingv1.RateCard{
		RateCardId: r.ID, Currency: r.Currency, EffectiveFrom: timestamppb.New(r.EffectiveFrom),
		GpuPrices: body.GpuPrices, TimeBands: body.TimeBands, VolumeTiers: body.VolumeTiers, PueSurcharge: body.PueSurcharge,
		CreatedAt: timestamppb.New(r.CreatedAt),
	}
}

// RateCard returns one card.
func (a *App) RateCard(ctx context.Context, id string) (*pricingv1.RateCard, error) {
	r, err := a.Store.Card(ctx, id)
	if errors.Is(err, postgres.ErrNotFound) {
		return nil, fmt.Errorf("rate card %q: %w", id, apperr.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var body pricingv1.CreateRateCardRequest
	if err := proto.Unmarshal(r.Body, &body); err != nil {
		return nil, err
	}
	return cardPB(r, &body), nil
}

// RateCards lists cards, newest effective_from first.
func (a *App) RateCards(ctx context.Context, currency string, size int, token string) ([]*pricingv1.RateCard, string, error) {
	if size <= 0 {
		size = PageSizeDefault
	}
	size = min(size, PageSizeMax)
	var afterEff time.Time
	var afterSeq int64
	if token != "" {
		var ok bool
		if afterEff, afterSeq, ok = decodeCardCursor(token); !ok {
			return nil, "", apperr.Invalid("page_token", "not a token this API issued")
		}
	}
	rows, err := a.Store.Cards(ctx, strings.ToUpper(currency), afterEff, afterSeq, size+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rows) > size {
		rows = rows[:size]
		last := rows[size-1]
		next = base64.RawURLEncoding.EncodeToString([]byte(last.EffectiveFrom.Format(time.RFC3339Nano) + "|" + strconv.FormatInt(last.Seq, 10)))
	}
	out := make([]*pricingv1.RateCard, 0, len(rows))
	for _, r := range rows {
		var body pricingv1.CreateRateCardRequest
		if err := proto.Unmarshal(r.Body, &body); err != nil {
			return nil, "", err
		}
		out = append(out, cardPB(r, &body))
	}
	return out, next, nil
}

func decodeCardCursor(s string) (time.Time, int64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, 0, false
	}
	ts, seq, ok := strings.Cut(string(b), "|")
	if !ok {
		return time.Time{}, 0, false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	n, err2 := strconv.ParseInt(seq, 10, 64)
	if err != nil || err2 != nil || n <= 0 {
		return time.Time{}, 0, false
	}
	return t, n, true
}
