package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// Page sizes of the list use cases.
const (
	PageSizeDefault = 100
	PageSizeMax     = 1000
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

func notFound(err error, kind, id string) error {
	if errors.Is(err, apperr.ErrNotFound) {
		return fmt.Errorf("%s %q: %w", kind, id, apperr.ErrNotFound)
	}
	return err
}

// CreateProvider records a provider. Creating an existing id with the same
// body returns the stored provider (an idempotent replay); another body is a
// conflict. Every write publishes party.updated.{id} in the same transaction.
func (a *App) CreateProvider(ctx context.Context, in domain.ProviderInput) (domain.Provider, error) {
	p, vs := domain.ParseProvider(in)
	if err := invalid(vs); err != nil {
		return domain.Provider{}, err
	}
	now := a.Clock.Now()
	p.Version, p.CreatedAt, p.UpdatedAt = 1, now, now
	var out domain.Provider
	err := a.Store.WithTx(ctx, func(tx Tx) error {
		created, err := tx.InsertProvider(ctx, p)
		if err != nil {
			return err
		}
		if !created {
			old, err := tx.Provider(ctx, p.ID, false)
			if err != nil {
				return err
			}
			if !old.SameBody(p) {
				return fmt.Errorf("provider %s exists with a different body (use PATCH to change it): %w", p.ID, apperr.ErrConflict)
			}
			out = old
			return nil
		}
		out = p
		return tx.PublishProvider(ctx, p)
	})
	return out, err
}

// ProviderPatch holds the fields to change; nil = keep.
type ProviderPatch struct {
	Name, Tier, TaxProfile, Jurisdiction, PUE, Currency *string
}

// UpdateProvider changes the given fields of a provider, bumps its version
// and publishes it. A patch that changes nothing returns the provider as is.
func (a *App) UpdateProvider(ctx context.Context, id string, patch ProviderPatch) (domain.Provider, error) {
	var out domain.Provider
	err := a.Store.WithTx(ctx, func(tx Tx) error {
		old, err := tx.Provider(ctx, id, true)
		if err != nil {
			return notFound(err, "provider", id)
		}
		in := domain.ProviderInput{ID: old.ID, Name: old.Name, Tier: old.Tier, TaxProfile: old.TaxProfile,
			Jurisdiction: old.Jurisdiction, PUE: domain.PUEString(old.PUE), Currency: old.Currency}
		set := func(dst *string, v *string) {
			if v != nil {
				*dst = *v
			}
		}
		set(&in.Name, patch.Name)
		set(&in.Tier, patch.Tier)
		set(&in.TaxProfile, patch.TaxProfile)
		set(&in.Jurisdiction, patch.Jurisdiction)
		set(&in.PUE, patch.PUE)
		set(&in.Currency, patch.Currency)
		p, vs := domain.ParseProvider(in)
		if err := invalid(vs); err != nil {
			return err
		}
		if p.SameBody(old) {
			out = old
			return nil
		}
		p.Version, p.CreatedAt, p.UpdatedAt = old.Version+1, old.CreatedAt, a.Clock.Now()
		if err := tx.UpdateProvider(ctx, p); err != nil {
			return err
		}
		out = p
		return tx.PublishProvider(ctx, p)
	})
	return out, err
}

// Provider returns one provider.
func (a *App) Provider(ctx context.Context, id string) (domain.Provider, error) {
	p, err := a.Store.Provider(ctx, id)
	return p, notFound(err, "provider", id)
}

// ListProviders pages providers by id; the page token holds the last id seen.
func (a *App) ListProviders(ctx context.Context, tier, token string, size int) ([]domain.Provider, string, error) {
	if tier != "" {
		// ?tier=gold answered an empty listing.
		if err := domain.CheckTier(tier); err != nil {
			return nil, "", apperr.Invalid("tier", "%v", err)
		}
	}
	listing := cursor.Scoped(providersListing, tier)
	after, err := afterID(listing, token)
	if err != nil {
		return nil, "", err
	}
	size = pageSize(size)
	ps, err := a.Store.ListProviders(ctx, tier, after, size+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ps) > size {
		ps = ps[:size]
		next = cursor.Encode(listing, ps[size-1].ID)
	}
	return ps, next, nil
}

// CreateRenter records a renter (same replay rule as providers).
func (a *App) CreateRenter(ctx context.Context, in domain.RenterInput) (domain.Renter, error) {
	r, vs := domain.ParseRenter(in)
	if err := invalid(vs); err != nil {
		return domain.Renter{}, err
	}
	now := a.Clock.Now()
	r.Status, r.Version, r.CreatedAt, r.UpdatedAt = domain.RenterActive, 1, now, now
	var out domain.Renter
	err := a.Store.WithTx(ctx, func(tx Tx) error {
		created, err := tx.InsertRenter(ctx, r)
		if err != nil {
			return err
		}
		if !created {
			old, err := tx.Renter(ctx, r.ID, false)
			if err != nil {
				return err
			}
			if !old.SameBody(r) {
				return fmt.Errorf("renter %s exists with a different body (use PATCH to change it): %w", r.ID, apperr.ErrConflict)
			}
			out = old
			return nil
		}
		out = r
		return tx.PublishRenter(ctx, r)
	})
	return out, err
}

// RenterPatch holds the fields to change; nil = keep. Currency may only
// repeat the renter's own (a body echoed back): the wallet holds money in
// it.
type RenterPatch struct {
	Name, CreditLimit, Status, Currency *string
}

// UpdateRenter changes the given fields of a renter, bumps its version and
// publishes it (party.updated: the ledger's lease control stops a renter
// with nothing left to spend under a lowered credit limit, and a closed one
// whatever its balance). Closing is final: a closed renter answers a patch
// that changes nothing as it is (a replayed close), and refuses any other.
// A patch that changes nothing returns the renter as is.
func (a *App) UpdateRenter(ctx context.Context, id string, patch RenterPatch) (domain.Renter, error) {
	var out domain.Renter
	err := a.Store.WithTx(ctx, func(tx Tx) error {
		old, err := tx.Renter(ctx, id, true)
		if err != nil {
			return notFound(err, "renter", id)
		}
		in := domain.RenterInput{ID: old.ID, Name: old.Name, Currency: old.Currency, CreditLimit: old.CreditLimit.String()}
		status := old.Status
		set := func(dst *string, v *string) {
			if v != nil {
				*dst = *v
			}
		}
		set(&in.Name, patch.Name)
		set(&in.CreditLimit, patch.CreditLimit)
		set(&status, patch.Status)
		r, vs := domain.ParseRenter(in)
		if err := domain.CheckRenterStatus(status); err != nil {
			vs = append(vs, domain.Violation{Field: "status", Reason: err.Error()})
		}
		if c := patch.Currency; c != nil && !strings.EqualFold(strings.TrimSpace(*c), old.Currency) {
			vs = append(vs, domain.Violation{Field: "currency", Reason: fmt.Sprintf("%q: a renter's wallet currency (%s) cannot be changed", *c, old.Currency)})
		}
		if err := invalid(vs); err != nil {
			return err
		}
		same := r.SameBody(old) && status == old.Status
		switch {
		case same:
			out = old
			return nil
		case old.Closed():
			return fmt.Errorf("renter %s was closed at %s: a closed renter cannot be changed or reopened: %w",
				id, old.ClosedAt.UTC().Format(time.RFC3339), apperr.ErrPrecondition)
		}
		now := a.Clock.Now()
		r.Status, r.Version, r.CreatedAt, r.UpdatedAt = status, old.Version+1, old.CreatedAt, now
		if r.Closed() {
			r.ClosedAt = now
		}
		if err := tx.UpdateRenter(ctx, r); err != nil {
			return err
		}
		out = r
		return tx.PublishRenter(ctx, r)
	})
	return out, err
}

// Renter returns one renter.
func (a *App) Renter(ctx context.Context, id string) (domain.Renter, error) {
	r, err := a.Store.Renter(ctx, id)
	return r, notFound(err, "renter", id)
}

// ListRenters pages renters by id; the page token holds the last id seen.
func (a *App) ListRenters(ctx context.Context, token string, size int) ([]domain.Renter, string, error) {
	after, err := afterID(rentersListing, token)
	if err != nil {
		return nil, "", err
	}
	size = pageSize(size)
	rs, err := a.Store.ListRenters(ctx, after, size+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rs) > size {
		rs = rs[:size]
		next = cursor.Encode(rentersListing, rs[size-1].ID)
	}
	return rs, next, nil
}

// The listings' names in their page tokens (pkg/cursor).
const (
	providersListing = "metering.providers"
	rentersListing   = "metering.renters"
	usageListing     = "metering.usage"
)

// afterID is the id a listing's page token holds ("" without a token).
func afterID(listing, token string) (string, error) {
	if token == "" {
		return "", nil
	}
	pos, err := cursor.Decode(listing, token, 1)
	if err != nil {
		return "", err
	}
	return pos.String(0), nil
}

func pageSize(n int) int {
	switch {
	case n <= 0:
		return PageSizeDefault
	case n > PageSizeMax:
		return PageSizeMax
	}
	return n
}
