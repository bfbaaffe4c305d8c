package invoicing

import (
	"context"

	"github.com/gpubill/gpubill/pkg/apperr"
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
	return s.Repo.ListByRenter(ctx, renterID, currency, pageSize, token)
}
