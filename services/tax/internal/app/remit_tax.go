package app

import (
	"context"
	"fmt"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// RemitTax remits every withholding recorded before the end of period
// (YYYY-MM, a calendar month in the tax zone: Asia/Shanghai unless
// configured) and not remitted yet: one remittance per jurisdiction and
// currency (a withholding that commits after its month's remittance was
// planned goes with the next month's), each posted as
// Dr tax:withheld:{jurisdiction} / Cr bank:client with the remittance id as
// idempotency key. A month is remitted once it has ended in the tax zone.
// Re-running a period posts whatever is still pending and changes nothing
// else. It returns the remittances and the report lines.
func (a *App) RemitTax(ctx context.Context, period string) ([]domain.Remittance, []domain.ReportLine, error) {
	p, err := a.TaxPeriods.Parse(period)
	if err != nil {
		return nil, nil, apperr.Invalid("period", "want YYYY-MM")
	}
	now := a.Clock.Now()
	if now.Before(p.End) {
		return nil, nil, fmt.Errorf("period %s has not ended yet (it ends at %s): %w", period,
			p.End.Format(time.RFC3339), apperr.ErrPrecondition)
	}
	rems, err := a.Store.PlanRemittances(ctx, period, p.End, now)
	if err != nil {
		return nil, nil, err
	}
	for i, r := range rems {
		if r.Status != "pending" {
			continue
		}
		txID := ""
		if r.Amount.IsPositive() {
			if txID, err = a.Ledger.PostRemittance(ctx, r); err != nil {
				return nil, nil, fmt.Errorf("post remittance %s: %w", r.ID, err)
			}
		}
		if err := a.Store.MarkRemitted(ctx, r.ID, txID, now); err != nil {
			return nil, nil, err
		}
		rems[i].Status, rems[i].TransactionID, rems[i].RemittedAt = "remitted", txID, &now
	}
	lines, err := a.Store.Report(ctx, period)
	if err != nil {
		return nil, nil, err
	}
	return rems, lines, nil
}
