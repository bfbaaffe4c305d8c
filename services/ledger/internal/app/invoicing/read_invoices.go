package invoicing

import (
	"context"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Invoice returns one invoice.
func (s *Invoicing) Invoice(ctx context.Context, id string) (domain.Invoice, error) {
	if id == "" {
		return domain.Invoice{}, apperr.Invalid("invoice_id", "required")
	}
	return s.Repo.Get(ctx, id)
}

// RenterInvoices returns a page of a renter's invoices, newest period first.
func (s *Invoicing) RenterInvoices(ctx context.Context, renterID, currency string, pageSize int, token string) ([]domain.Invoice, string, error) {
	var v apperr.Validator
	if err := ids.CheckPartyID(renterID); err != nil {
		v.Add("renter_id", "%v", err)
	}
	v.Check(pageSize >= 0 && pageSize <= ListPageMax, "page_size", "%d outside 0..%d", pageSize, ListPageMax)
	if currency != "" {
		// ?currency=cny listed nothing, and an unknown code too, as if
		// the renter had no such invoices.
		cur, err := money.Lookup(currency)
		if err != nil {
			v.Add("currency", "%v", err)
		}
		currency = cur.Code
	}
	if err := v.Err(); err != nil {
		return nil, "", err
	}
	if pageSize == 0 {
		pageSize = ListPageDefault
	}
	listing := cursor.Scoped(invoicesListing, renterID, currency)
	var after *Position
	if token != "" {
		pos, err := cursor.Decode(listing, token, 3)
		if err != nil {
			return nil, "", err
		}
		after = &Position{Period: pos.String(0), Currency: pos.String(1), ID: pos.String(2)}
	}
	invs, err := s.Repo.ListByRenter(ctx, renterID, currency, after, pageSize+1)
	if err != nil || len(invs) <= pageSize {
		return invs, "", err
	}
	invs = invs[:pageSize]
	last := invs[pageSize-1]
	return invs, cursor.Encode(listing, last.Period, last.Currency, last.ID), nil
}

// invoicesListing names the listing in its page tokens (pkg/cursor: it
// refuses a forged value holding a NUL, which reached the listing's SQL
// from the token of its own, a 500).
const invoicesListing = "ledger.invoices"

// Position is the place of an invoice in a renter's listing: newest period
// first, then currency and id.
type Position struct{ Period, Currency, ID string }
