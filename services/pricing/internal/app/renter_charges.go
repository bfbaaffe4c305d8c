package app

import (
	"context"
	"encoding/base64"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// Page sizes of a renter's charges.
const (
	ChargesPageDefault = 50
	ChargesPageMax     = 500
)

// ChargeReader reads a renter's rated charges, newest first.
type ChargeReader interface {
	List(ctx context.Context, renter, lease string, afterAt time.Time, afterID string, limit int) ([]domain.RenterCharge, error)
}

// RenterCharges is the use case behind GET /v1/renters/{id}/charges.
type RenterCharges struct{ Charges ChargeReader }

// List returns a page of a renter's charges (of one lease, when lease is
// set) and the token of the next page ("" at the end).
func (r *RenterCharges) List(ctx context.Context, renter, lease string, size int, token string) ([]domain.RenterCharge, string, error) {
	if renter == "" {
		return nil, "", apperr.Invalid("renter_id", "required")
	}
	if size <= 0 {
		size = ChargesPageDefault
	}
	size = min(size, ChargesPageMax)
	var afterAt time.Time
	var afterID string
	if token != "" {
		var ok bool
		if afterAt, afterID, ok = decodeChargeCursor(token); !ok {
			return nil, "", apperr.Invalid("page_token", "not a token this API issued")
		}
	}
	cs, err := r.Charges.List(ctx, renter, lease, afterAt, afterID, size+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(cs) > size {
		cs = cs[:size]
		last := cs[size-1]
		next = base64.RawURLEncoding.EncodeToString([]byte(last.EffectiveAt.UTC().Format(time.RFC3339Nano) + "|" + last.ChargeID))
	}
	return cs, next, nil
}

func decodeChargeCursor(s string) (time.Time, string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", false
	}
	ts, id, ok := strings.Cut(string(b), "|")
	if !ok || id == "" {
		return time.Time{}, "", false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, "", false
	}
	return t, id, true
}
