package invoicing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// IssueResult counts what issuing a month did.
type IssueResult struct {
	Period        string
	Issued        int
	AlreadyIssued int
}

// IssueMonth issues the invoices of a month (YYYY-MM in the tax zone) that
// has ended: one per renter wallet and currency that moved in it. It is
// idempotent: a wallet whose month is invoiced is left alone. One wallet
// that cannot be invoiced does not stop the others; its error is returned
// (joined) after they are done, so the caller retries only what is left.
// A run whose context ends stops at the first wallet that fails with it.
// A month whose every wallet is invoiced is recorded complete
// (Repository.RecordRun), a month where none moved too.
func (s *Invoicing) IssueMonth(ctx context.Context, period string) (IssueResult, error) {
	p, err := s.Periods.Parse(period)
	if err != nil {
		return IssueResult{}, apperr.Invalid("period", "%v", err)
	}
	if now := s.Clock.Now(); now.Before(p.End.Add(PeriodEndSlack)) {
		return IssueResult{}, fmt.Errorf("period %s ends at %s (%s); invoices are issued after it: %w",
			p.ID, p.End.Format("2006-01-02T15:04:05Z07:00"), s.Periods.Location(), apperr.ErrPrecondition)
	}
	wallets, err := s.Repo.Uninvoiced(ctx, p.ID, p.Start, p.End)
	if err != nil {
		return IssueResult{}, fmt.Errorf("invoices of %s: %w", p.ID, err)
	}
	res := IssueResult{Period: p.ID}
	var errs []error
	for _, w := range wallets {
		err := s.issue(ctx, w, p.ID)
		switch {
		case err == nil:
			res.Issued++
		case errors.Is(err, ErrAlreadyIssued):
			res.AlreadyIssued++
		default:
			errs = append(errs, fmt.Errorf("invoice %s %s %s: %w", w.RenterID, w.Currency, p.ID, err))
		}
		if err != nil && ctx.Err() != nil {
			// The run's deadline passed or it was cancelled: every wallet
			// left fails the same way, one error each joined into one
			// (tens of MB at 100 000 renters). A retry takes what is left.
			return res, errors.Join(errs...)
		}
	}
	if len(errs) > 0 {
		return res, errors.Join(errs...)
	}
	// Every wallet of the month is invoiced: the run is complete
	// (GpubillInvoicesNotIssued reads the months that are not).
	if err := s.Repo.RecordRun(ctx, p, s.Periods.Location().String(), s.Clock.Now().UTC(), res.Issued); err != nil {
		return res, fmt.Errorf("invoices of %s: %w", p.ID, err)
	}
	return res, nil
}

// issue makes and stores one wallet's invoice for a period.
func (s *Invoicing) issue(ctx context.Context, w Wallet, period string) error {
	p, err := s.Periods.Parse(period)
	if err != nil {
		return err
	}
	cur, err := money.Lookup(w.Currency)
	if err != nil {
		return err
	}
	act, err := s.Repo.WalletActivity(ctx, w, p.Start, p.End)
	if err != nil {
		return err
	}
	explained, err := s.explain(ctx, cur, act)
	if err != nil {
		return err
	}
	inv, err := domain.BuildInvoice(cur, act, explained)
	if err != nil {
		return err
	}
	inv.ID, inv.RenterID, inv.Period = s.NewID(), w.RenterID, p.ID
	inv.TimeZone, inv.PeriodStart, inv.PeriodEnd = s.Periods.Location().String(), p.Start, p.End
	inv.IssuedAt = s.Clock.Now().UTC()
	return s.Repo.Insert(ctx, &inv, p.Start.Year())
}

// explain asks pricing about the wallet's charges, a page at a time, and
// checks that pricing knows each one and that their amounts are the ones
// the ledger posted.
func (s *Invoicing) explain(ctx context.Context, cur money.Currency, act domain.WalletActivity) ([]domain.ExplainedLine, error) {
	if s.Explainer == nil && len(act.ChargeIDs) > 0 {
		return nil, fmt.Errorf("no explainer of charges (pricing) configured: %w", apperr.ErrUnavailable)
	}
	ids := append([]string(nil), act.ChargeIDs...)
	sort.Strings(ids)
	var pages [][]domain.ExplainedLine
	var total decimal.Decimal
	for len(ids) > 0 {
		n := min(len(ids), ExplainPageMax)
		ex, err := s.Explainer.Explain(ctx, ids[:n])
		if err != nil {
			return nil, fmt.Errorf("explain charges: %w", err)
		}
		if len(ex.Missing) > 0 {
			return nil, fmt.Errorf("pricing does not know %d of the wallet's charges (%s)", len(ex.Missing), strings.Join(first(ex.Missing, 3), ", "))
		}
		for c, t := range ex.Totals {
			if c != cur.Code && !t.IsZero() {
				return nil, fmt.Errorf("pricing has charges of the %s wallet in %s", cur.Code, c)
			}
		}
		total = total.Add(ex.Totals[cur.Code])
		pages = append(pages, ex.Lines)
		ids = ids[n:]
	}
	if !total.Equal(act.Charges) {
		return nil, fmt.Errorf("the ledger posted %s %s of charges, pricing rated them at %s", act.Charges, cur.Code, total)
	}
	return domain.MergeExplained(pages...), nil
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }
