package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// Remitted is what RemitTax answers.
type Remitted struct {
	Remittances []domain.Remittance
	Lines       []domain.ReportLine // per remittance of Remittances and provider
	NotPosted   int                 // withholdings recorded before the period's end whose settlement the ledger has not posted
}

// RemitTax posts the remittances of earlier periods still pending, then
// remits every withholding recorded before the end of period
// (YYYY-MM, a calendar month in the tax zone: Asia/Shanghai unless
// configured), whose settlement the ledger has posted, and not remitted yet:
// one remittance per jurisdiction and currency (a withholding that commits,
// or whose settlement is posted, after its month's remittance was planned
// goes with the next remittance run), each posted as
// Dr tax:withheld:{jurisdiction} / Cr bank:client with the remittance id as
// idempotency key. A month is remitted once it has ended in the tax zone.
// Re-running a period posts whatever is still pending and changes nothing
// else, unless the ledger reversed a remittance: each run first finds the
// remittances of the period and those before it whose transaction a
// reversal undid (releaseReversed), and their months are planned again, a
// new remittance of each (another id, so another ledger key) paying the
// withholdings the reversed one held. It returns the remittances, their
// lines (per remittance and provider: per jurisdiction and currency they
// add up to the remittances not reversed; a reversed one holds none) and
// how many withholdings it left out as not posted.
func (a *App) RemitTax(ctx context.Context, period string) (Remitted, error) {
	p, err := a.TaxPeriods.Parse(period)
	if err != nil {
		return Remitted{}, apperr.Invalid("period", "want YYYY-MM")
	}
	now := a.Clock.Now()
	if now.Before(p.End) {
		return Remitted{}, fmt.Errorf("period %s has not ended yet (it ends at %s): %w", period,
			p.End.Format(time.RFC3339), apperr.ErrPrecondition)
	}
	// Before confirmPosted: the withholdings a reversed remittance gives
	// back have their settlements looked up again with the others.
	if err := a.releaseReversed(ctx, period, now); err != nil {
		return Remitted{}, err
	}
	notPosted, err := a.confirmPosted(ctx, p.End)
	if err != nil {
		return Remitted{}, err
	}
	if err := a.replanReversed(ctx, period, now); err != nil {
		return Remitted{}, err
	}
	// An earlier month's remittance still pending (its post refused, the
	// ledger down past the activity's limit) is posted by any later run:
	// the schedule runs only the month before, so it waited for a re-run
	// by hand, its withholdings out of every later plan, and no alert.
	earlier, err := a.Store.PendingBefore(ctx, period)
	if err != nil {
		return Remitted{}, err
	}
	rems, err := a.Store.PlanRemittances(ctx, period, p.End, now)
	if err != nil {
		return Remitted{}, err
	}
	rems = append(earlier, rems...)
	// A remittance the ledger refuses does not hold back the others (one
	// refused stopped the run: every later jurisdiction and currency went
	// unremitted until someone ran it again by hand); the run fails naming
	// each refused one, and a re-run posts what is still pending.
	var refused []error
	for i, r := range rems {
		if r.Status != domain.RemittancePending {
			continue
		}
		txID := ""
		if r.Amount.IsPositive() {
			if txID, err = a.Ledger.PostRemittance(ctx, r); err != nil {
				refused = append(refused, fmt.Errorf("post remittance %s: %w", r.ID, err))
				continue
			}
		}
		if err := a.Store.MarkRemitted(ctx, r.ID, txID, now); err != nil {
			return Remitted{}, err
		}
		rems[i].Status, rems[i].TransactionID, rems[i].RemittedAt = domain.RemittanceRemitted, txID, &now
	}
	if len(refused) > 0 {
		return Remitted{}, errors.Join(refused...)
	}
	// The lines are those of the remittances answered: of the period's only,
	// a run posting an earlier month's still pending answered its amount
	// and no line of it, the lines short of the remittances by as much.
	remIDs := make([]string, len(rems))
	for i, r := range rems {
		remIDs[i] = r.ID
	}
	lines, err := a.Store.Report(ctx, remIDs)
	if err != nil {
		return Remitted{}, err
	}
	return Remitted{Remittances: rems, Lines: lines, NotPosted: notPosted}, nil
}

// releaseReversed looks up in the ledger the transaction of every
// remittance of periods up to period that posted one, and marks reversed
// each a reversal undid (POST /v1/transactions/{id}:reverse, which the
// ledger allows: the tax is back in tax:withheld), naming the reversal and
// giving its withholdings back to its period (Store.MarkReversed). It
// read remitted for good: no run paid it again, and no alert saw the tax
// unpaid. A remittance's key that holds no transaction, or another than
// the one recorded, is logged at ERROR and left as it is: the two services
// disagree on money.
func (a *App) releaseReversed(ctx context.Context, period string, now time.Time) error {
	after := ""
	for {
		rs, err := a.Store.RemittedUpTo(ctx, period, after, MaxLookupKeys)
		if err != nil || len(rs) == 0 {
			return err
		}
		after = rs[len(rs)-1].ID
		keys := make([]string, len(rs))
		for i, r := range rs {
			keys[i] = r.ID
		}
		txs, err := a.Ledger.Posted(ctx, keys)
		if err != nil {
			return err
		}
		for _, r := range rs {
			tx, ok := txs[r.ID]
			switch {
			case !ok || tx.ID != r.TransactionID:
				a.Log.Error("a remitted tax remittance's key holds no ledger transaction, or another than the one it recorded: left as it is",
					"remittance_id", r.ID, "transaction_id", r.TransactionID, "found", tx.ID)
			case tx.Reversed:
				marked, err := a.Store.MarkReversed(ctx, r.ID, tx.ReversedBy, now)
				if err != nil {
					return err
				}
				if marked {
					a.Log.Warn("a tax remittance's ledger transaction was reversed: marked reversed, its tax remitted again by a new remittance of its period",
						"remittance_id", r.ID, "period", r.Period, "transaction_id", r.TransactionID, "reversed_by", tx.ReversedBy,
						"amount", r.Amount.String(), "currency", r.Currency)
				}
			}
		}
	}
}

// replanReversed plans again the months before period holding a reversed
// remittance: its tax is its month's, whichever month's run found the
// reversal (the schedule runs the month before only), and the new
// remittance is then posted with the earlier months' still pending (the
// period's own month is planned by its run). Planned with the run's own
// month, it was reported as that month's tax. A month is planned again as
// long as a reversed remittance of it has no other (a run that stopped
// after the reversal was marked, settlements not posted yet).
func (a *App) replanReversed(ctx context.Context, period string, now time.Time) error {
	reversed, err := a.Store.ReversedUnplanned(ctx, period)
	if err != nil {
		return err
	}
	for _, q := range reversed {
		qp, err := a.TaxPeriods.Parse(q)
		if err != nil {
			return fmt.Errorf("period %q of a reversed remittance: %w", q, err)
		}
		if _, err := a.Store.PlanRemittances(ctx, q, qp.End, now); err != nil {
			return err
		}
	}
	return nil
}

// confirmPosted looks up in the ledger the settlement of every unremitted
// withholding recorded before end (posted under the withholding's
// idempotency key) and records for each the transaction that posted it, or
// none, so that a remittance pays only tax the ledger holds in tax:withheld:
// a withholding is recorded before its settlement is posted, and a
// settlement the ledger refuses (or that still retries, or was reversed)
// withholds nothing. Each run asks again (a settlement posted, or reversed,
// since the last). A transaction under the key that does not credit
// tax:withheld the withholding's tax (another write took the key) is left
// out too, logged at ERROR: the two services disagree on money. It returns
// how many it left out.
func (a *App) confirmPosted(ctx context.Context, end time.Time) (int, error) {
	notPosted, after := 0, ""
	for {
		ws, err := a.Store.Unremitted(ctx, end, after, MaxLookupKeys)
		if err != nil || len(ws) == 0 {
			return notPosted, err
		}
		after = ws[len(ws)-1].ID
		keys := make([]string, len(ws))
		for i, w := range ws {
			keys[i] = w.IdempotencyKey
		}
		txs, err := a.Ledger.Posted(ctx, keys)
		if err != nil {
			return notPosted, err
		}
		posted := make(map[string]string, len(ws))
		for _, w := range ws {
			tx, ok := txs[w.IdempotencyKey]
			account := ids.TaxWithheld(w.Jurisdiction)
			switch {
			case !ok || tx.Reversed:
				posted[w.ID] = ""
			case !tx.Credited(account, w.Currency).Equal(w.Tax):
				posted[w.ID] = ""
				a.Log.Error("a withholding's key holds a ledger transaction that does not credit its tax: left out of remittances",
					"withholding_id", w.ID, "key", w.IdempotencyKey, "tax", w.Tax.String(), "currency", w.Currency,
					"transaction_id", tx.ID, "account", account, "credited", tx.Credited(account, w.Currency).String())
			default:
				posted[w.ID] = tx.ID
			}
			if posted[w.ID] == "" {
				notPosted++
			}
		}
		if err := a.Store.MarkPosted(ctx, posted); err != nil {
			return notPosted, err
		}
	}
}
