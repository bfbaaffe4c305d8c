package app

import (
	"context"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
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

// chargesListing names the renter charge listing in its page tokens (pkg/cursor).
const chargesListing = "pricing.renter_charges"

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
		pos, err := cursor.Decode(cursor.Scoped(chargesListing, renter, lease), token, 2)
		if err != nil {
			return nil, "", err
		}
		if afterAt, err = pos.Time(0); err != nil {
			return nil, "", err
		}
		if afterID = pos.String(1); afterID == "" {
			return nil, "", cursor.Malformed()
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
		next = cursor.Encode(cursor.Scoped(chargesListing, renter, lease), cursor.FormatTime(last.EffectiveAt), last.ChargeID)
	}
	return cs, next, nil
}
