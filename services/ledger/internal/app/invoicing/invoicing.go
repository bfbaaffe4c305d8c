// Package invoicing holds the ledger's invoice use cases: issuing a month's
// renter invoices from the journal (explained by pricing), and reading them.
// It declares the repository and the explainer it needs; adapters implement
// them (Postgres in adapters/invoicestore, pricing's API in
// adapters/pricingexplainer).
package invoicing

import (
	"context"
	"errors"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Limits.
const (
	// ExplainPageMax is how many charge ids one explanation request carries
	// (pricing accepts at most 1 000).
	ExplainPageMax = 1000
	// PeriodEndSlack is waited past a month's end before it is invoiced: a
	// charge committed just after midnight may carry a posting time just
	// before it (the group commit stamps a batch before it commits).
	PeriodEndSlack = time.Minute
	// ListPageMax bounds a page of invoices; ListPageDefault is a page
	// when none is asked for.
	ListPageMax     = 100
	ListPageDefault = 20
)

// ErrAlreadyIssued is the repository's answer to an invoice whose renter,
// currency and period already have one.
var ErrAlreadyIssued = errors.New("invoice already issued")

// Wallet names a renter wallet in one currency.
type Wallet struct{ RenterID, Currency string }

// Repository is the invoices' storage and the journal reads they are made of.
type Repository interface {
	// Uninvoiced lists the renter wallets with postings in [start, end)
	// that have no invoice for period yet.
	Uninvoiced(ctx context.Context, period string, start, end time.Time) ([]Wallet, error)
	// WalletActivity reads a wallet's movement in [start, end) by posting time.
	WalletActivity(ctx context.Context, w Wallet, start, end time.Time) (domain.WalletActivity, error)
	// Insert stores the invoice with the next number of year, in the same
	// transaction as the year's counter moves (so numbers have no gaps),
	// and sets inv.Number; ErrAlreadyIssued when the wallet's period has one.
	Insert(ctx context.Context, inv *domain.Invoice, year int) error
	// Get returns an invoice, or an error wrapping apperr.ErrNotFound.
	Get(ctx context.Context, id string) (domain.Invoice, error)
	// ListByRenter returns at most limit of a renter's invoices (of
	// currency, when it is set), newest period first, then by currency and
	// id, after the position after when it is set.
	ListByRenter(ctx context.Context, renterID, currency string, after *Position, limit int) ([]domain.Invoice, error)
	// RecordRun records that the month's run completed at completedAt
	// (every wallet that moved in it is invoiced), once: a month recorded
	// already keeps its first record.
	RecordRun(ctx context.Context, p taxperiod.Period, zone string, completedAt time.Time, issued int) error
}

// Explanation is pricing's account of a page of charges.
type Explanation struct {
	Lines   []domain.ExplainedLine
	Missing []string                   // charge ids pricing does not know
	Totals  map[string]decimal.Decimal // currency → sum of the charges' rounded amounts
}

// Explainer explains charges (pricing, over its internal API).
type Explainer interface {
	Explain(ctx context.Context, chargeIDs []string) (Explanation, error)
}

// Renderer writes an invoice as a document (adapters/invoicepdf: PDF).
type Renderer interface {
	Render(inv domain.Invoice) ([]byte, error)
}

// Invoicing is the invoice use cases.
type Invoicing struct {
	Repo      Repository
	Explainer Explainer
	PDF       Renderer
	Clock     clock.Clock
	Periods   taxperiod.Calendar // calendar months in the tax time zone
	NewID     func() string
}

// RenderPDF writes the invoice as PDF.
func (iv *Invoicing) RenderPDF(inv domain.Invoice) ([]byte, error) {
	if iv.PDF == nil {
		return nil, errors.New("invoices: no PDF renderer")
	}
	return iv.PDF.Render(inv)
}
