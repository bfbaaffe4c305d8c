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
	// Lines are the first (at most linesMax) of the report's lines, per
	// remittance of Remittances (in their order) and provider; LineCount is
	// how many the report has, counted in SQL; LinesNext is where the ones
	// not answered start (nil: every line is answered).
	Lines     []domain.ReportLine
	LineCount int
	LinesNext *LinesCursor
	NotPosted int // withholdings recorded before the period's end whose settlement the ledger has not posted
	// Outstanding counts the withholdings recorded before the period's end
	// that no remittance holds after the run (not posted when the month was
	// filed, or posted since): the first month filed after the ledger posts
	// each remits it. The month's run is recorded complete all the same; this
	// says whether any of its tax is still owed.
	Outstanding int
}

// LinesCursor is where a report's lines not answered start: in
// RemittanceID, after the line of AfterProvider ("": from its first), then
// the remittances after it in the answer.
type LinesCursor struct {
	RemittanceID, AfterProvider string
}

// RemitTax posts the remittances of earlier periods still pending, then
// remits every withholding recorded before the end of period
// (YYYY-MM, a calendar month in the tax zone: Asia/Shanghai unless
// configured), whose settlement the ledger has posted, and not remitted yet:
// one remittance per jurisdiction and currency (a withholding that commits,
// or whose settlement is posted, after its month's remittance was planned
// goes with the first month filed after that: a month is filed once, and a
// re-run of it plans nothing new but a reversed remittance's withholdings),
// each posted as
// Dr tax:withheld:{jurisdiction} / Cr bank:client with the remittance id as
// idempotency key. A month is remitted once it has ended in the tax zone.
// Re-running a period posts whatever is still pending and changes nothing
// else, unless the ledger reversed a remittance: each run first finds the
// remittances of the period and those before it whose transaction a
// reversal undid (releaseReversed), and their months are planned again, a
// new remittance of each (another id, so another ledger key) paying the
// withholdings the reversed one held (between runs, RemitReversed finds
// them). It returns the remittances, their
// lines (per remittance and provider: per jurisdiction and currency they
// add up to the remittances not reversed; a reversed one holds none) and
// how many withholdings it left out as not posted. A run that gets that far
// is recorded complete for the period (Store.RecordRun), once. It answers at
// most linesMax lines (0: none, only their count): every line built in
// memory, a marketplace's report outgrew the gRPC and gateway limits.
func (a *App) RemitTax(ctx context.Context, period string, linesMax int) (Remitted, error) {
	p, err := a.TaxPeriods.Parse(period)
	if err != nil {
		return Remitted{}, apperr.Invalid("period", "want YYYY-MM")
	}
	if now := a.Clock.Now(); now.Before(p.End) {
		return Remitted{}, fmt.Errorf("period %s has not ended yet (it ends at %s): %w", period,
			p.End.Format(time.RFC3339), apperr.ErrPrecondition)
	}
	// One run (or reversal check) at a time: a month's plan decides what it
	// files, and only the first one's may. Two first runs of a month where
	// nothing was owed both planned (the run is recorded after the posts),
	// the second filing what the ledger posted since under the month the
	// first filed empty; and a check marking an earlier month's remittance
	// reversed while a run planned its own month gave that month the
	// reversed one's withholdings, its tax filed under the wrong month.
	// The lock lives on one session, which may end mid-run: each write of
	// the run checks its fence (f), and a run that lost the lock to
	// another fails (ErrRunsLockLost) at its next write, the other's plan
	// the month's only one.
	f, unlock, err := a.Store.LockRuns(ctx)
	if err != nil {
		return Remitted{}, err
	}
	defer unlock()
	// The run starts once the lock is held: read before the wait, its
	// times were as old as the wait was long, older than the writes of the
	// run or check it waited for. Each of its writes reads the clock
	// again (a remittance's created_at when it is planned, remitted_at
	// when the ledger's answer is recorded, a reversal's reversed_at when
	// it is found, the run's completed_at when its record, its last write,
	// is made): stamped with the start, a run that waited minutes on the
	// ledger was recorded completed before its remittances were posted.
	// No month depends on them: the period is the request's and the
	// cut-off of its withholdings the period's end.
	return a.remitPeriod(ctx, f, period, p.End, a.Clock.Now(), linesMax)
}

// remitPeriod is RemitTax of period (ending at end) under the runs' lock,
// taken at started.
func (a *App) remitPeriod(ctx context.Context, f Fence, period string, end, started time.Time, linesMax int) (Remitted, error) {
	// Before confirmPosted: the withholdings a reversed remittance gives
	// back have their settlements looked up again with the others.
	if err := a.releaseReversed(ctx, f, period); err != nil {
		return Remitted{}, err
	}
	notPosted, err := a.confirmPosted(ctx, f, end)
	if err != nil {
		return Remitted{}, err
	}
	reversed, err := a.Store.ReversedUnplanned(ctx, period)
	if err != nil {
		return Remitted{}, err
	}
	if err := a.replanReversed(ctx, f, reversed); err != nil {
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
	rems, err := a.Store.PlanRemittances(ctx, f, period, end, a.Clock.Now())
	if err != nil {
		return Remitted{}, err
	}
	rems = append(earlier, rems...)
	reversedOnPost, err := a.post(ctx, f, rems)
	if err != nil {
		return Remitted{}, err
	}
	if reversedOnPost {
		// Its tax is remitted again now, not by the next check: the run's
		// answer shows the new remittance with the reversed one.
		again, err := a.remitReversed(ctx, f, started)
		if err != nil {
			return Remitted{}, err
		}
		rems = append(rems, again...)
	}
	// The lines are those of the remittances answered: of the period's only,
	// a run posting an earlier month's still pending answered its amount
	// and no line of it, the lines short of the remittances by as much.
	lines, lineCount, next, err := a.reportHead(ctx, rems, linesMax)
	if err != nil {
		return Remitted{}, err
	}
	// Planned and posted: the month's run is complete (GpubillTaxMonthNotRemitted
	// reads the months that are not), with nothing owed too. Its record is
	// its last write: completed now (never before it started, which
	// tax/0012 refuses, should the wall clock step back).
	completed := a.Clock.Now()
	if completed.Before(started) {
		completed = started
	}
	if err := a.Store.RecordRun(ctx, f, period, started, completed, len(rems), notPosted); err != nil {
		return Remitted{}, err
	}
	outstanding, err := a.Store.Outstanding(ctx, end)
	if err != nil {
		return Remitted{}, err
	}
	return Remitted{Remittances: rems, Lines: lines, LineCount: lineCount, LinesNext: next, NotPosted: notPosted, Outstanding: outstanding}, nil
}

// reportHead is the first linesMax lines (0: none) of the report of rems,
// how many it has (counted in SQL, none built), and where those not
// answered start (nil: none left).
func (a *App) reportHead(ctx context.Context, rems []domain.Remittance, linesMax int) ([]domain.ReportLine, int, *LinesCursor, error) {
	remIDs := make([]string, len(rems))
	for i, r := range rems {
		remIDs[i] = r.ID
	}
	count, err := a.Store.ReportCount(ctx, remIDs)
	if err != nil || linesMax <= 0 {
		return nil, count, nil, err
	}
	// One line more than answered tells where the rest starts.
	lines, err := a.Store.Report(ctx, remIDs, linesMax+1)
	if err != nil || len(lines) <= linesMax {
		return lines, count, nil, err
	}
	last, first := lines[linesMax-1], lines[linesMax]
	next := &LinesCursor{RemittanceID: first.RemittanceID}
	if last.RemittanceID == first.RemittanceID {
		next.AfterProvider = last.ProviderID
	}
	return lines[:linesMax], count, next, nil
}

// post posts the pending remittances of rems and records each remitted
// (rems updated as recorded). A remittance the ledger refuses does not
// hold back the others (one refused stopped the run: every later
// jurisdiction and currency went unremitted until someone ran it again by
// hand); post then fails naming each refused one, and a re-run posts what
// is still pending. A post may answer a transaction the ledger reversed:
// an earlier try posted it, its answer was lost (a timeout), and finance
// reversed it before this try; it was recorded remitted, the tax back in
// tax:withheld, until a later run's releaseReversed. It is recorded
// remitted, then reversed at once (markReversed), and post reports that
// it met one (reversed): its tax waits for its period's next plan. Each is
// recorded remitted at the instant the ledger's answer is recorded.
func (a *App) post(ctx context.Context, f Fence, rems []domain.Remittance) (reversed bool, err error) {
	var refused []error
	for i, r := range rems {
		if r.Status != domain.RemittancePending {
			continue
		}
		var tx domain.PostedTx
		if r.Amount.IsPositive() {
			if tx, err = a.Ledger.PostRemittance(ctx, r); err != nil {
				refused = append(refused, fmt.Errorf("post remittance %s: %w", r.ID, err))
				continue
			}
		}
		remittedAt := a.Clock.Now()
		if err := a.Store.MarkRemitted(ctx, f, r.ID, tx.ID, remittedAt); err != nil {
			return false, err
		}
		rems[i].Status, rems[i].TransactionID, rems[i].RemittedAt = domain.RemittanceRemitted, tx.ID, &remittedAt
		if !tx.Reversed {
			continue
		}
		marked, reversedAt, err := a.markReversed(ctx, f, rems[i], tx.ReversedBy)
		if err != nil {
			return false, err
		}
		if marked {
			rems[i].Status, rems[i].ReversedBy, rems[i].ReversedAt = domain.RemittanceReversed, tx.ReversedBy, &reversedAt
			reversed = true
		}
	}
	return reversed, errors.Join(refused...)
}

// RemitReversedEvery is how often the tax service runs RemitReversed
// (Service.Run): a remittance reversed in the ledger is remitted again
// within it, not at the next remittance run (monthly).
const RemitReversedEvery = 10 * time.Minute

// RemitReversed is the periodic check of the remittances (every
// RemitReversedEvery, and after a run's post met one reversed): it marks
// reversed every remitted remittance whose ledger transaction a reversal
// undid (releaseReversed), plans again the months holding a reversed
// remittance and no other of its jurisdiction and currency
// (replanReversed, after confirmPosted of their withholdings), and posts
// the remittances of the months before the current one still pending. A
// reversal was found only by the next remittance run (the 1st of the
// month, or POST /v1/tax-remittances), the tax owed to the authority back
// in tax:withheld and unpaid until then. It plans no month's first
// remittance (the run does), and a check and a run side by side remit
// nothing twice: a check waits for a run (and a run for a check) under the
// remittance runs' lock (Store.LockRuns, whose fence each of their writes
// checks: one that lost the lock writes nothing more), and marking, planning and posting
// (the remittance id is the ledger key) are each idempotent. It returns the
// remittances it posted or left pending.
func (a *App) RemitReversed(ctx context.Context) ([]domain.Remittance, error) {
	f, unlock, err := a.Store.LockRuns(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return a.remitReversed(ctx, f, a.Clock.Now())
}

// remitReversed is RemitReversed under the runs' lock (which RemitTax
// holds), taken at started: the current month is that instant's, whatever
// the clock reads at its writes.
func (a *App) remitReversed(ctx context.Context, f Fence, started time.Time) ([]domain.Remittance, error) {
	current := a.TaxPeriods.At(started).ID
	if err := a.releaseReversed(ctx, f, current); err != nil {
		return nil, err
	}
	reversed, err := a.Store.ReversedUnplanned(ctx, current)
	if err != nil {
		return nil, err
	}
	if len(reversed) > 0 {
		// The latest month's end bounds the withholdings looked up: those
		// given back, and those a later run takes anyway.
		last, err := a.TaxPeriods.Parse(reversed[len(reversed)-1])
		if err != nil {
			return nil, fmt.Errorf("period %q of a reversed remittance: %w", reversed[len(reversed)-1], err)
		}
		if _, err := a.confirmPosted(ctx, f, last.End); err != nil {
			return nil, err
		}
		if err := a.replanReversed(ctx, f, reversed); err != nil {
			return nil, err
		}
	}
	pending, err := a.Store.PendingBefore(ctx, current)
	if err != nil {
		return nil, err
	}
	if _, err := a.post(ctx, f, pending); err != nil {
		return nil, err
	}
	return pending, nil
}

// releaseReversed looks up in the ledger the transaction of every
// remittance of periods up to period that posted one, and marks reversed
// each a reversal undid (POST /v1/transactions/{id}:reverse, which the
// ledger allows: the tax is back in tax:withheld), naming the reversal and
// giving its withholdings back to its period (Store.MarkReversed). It
// read remitted for good: no run paid it again, and no alert saw the tax
// unpaid. A remittance's key that holds no transaction, or another than
// the one recorded, is logged at ERROR and left as it is: the two services
// disagree on money. Each is marked reversed at the instant it is found.
func (a *App) releaseReversed(ctx context.Context, f Fence, period string) error {
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
				if _, _, err := a.markReversed(ctx, f, r, tx.ReversedBy); err != nil {
					return err
				}
			}
		}
	}
}

// markReversed marks a remitted remittance reversed by the ledger
// transaction reversedBy, found now (the instant it answers), and gives its
// withholdings back to its period (Store.MarkReversed), logging it; false
// when another run or check marked it first.
func (a *App) markReversed(ctx context.Context, f Fence, r domain.Remittance, reversedBy string) (bool, time.Time, error) {
	at := a.Clock.Now()
	marked, err := a.Store.MarkReversed(ctx, f, r.ID, reversedBy, at)
	if marked {
		a.Log.Warn("a tax remittance's ledger transaction was reversed: marked reversed, its tax remitted again by a new remittance of its period",
			"remittance_id", r.ID, "period", r.Period, "transaction_id", r.TransactionID, "reversed_by", reversedBy,
			"amount", r.Amount.String(), "currency", r.Currency)
	}
	return marked, at, err
}

// replanReversed plans again the months (Store.ReversedUnplanned) holding
// a reversed remittance: its tax is its month's, whichever month's run found the
// reversal (the schedule runs the month before only), and the new
// remittance is then posted with the earlier months' still pending (the
// period's own month is planned by its run). Planned with the run's own
// month, it was reported as that month's tax. A month is planned again as
// long as a reversed remittance of it has no other (a run that stopped
// after the reversal was marked, settlements not posted yet).
func (a *App) replanReversed(ctx context.Context, f Fence, reversed []string) error {
	for _, q := range reversed {
		qp, err := a.TaxPeriods.Parse(q)
		if err != nil {
			return fmt.Errorf("period %q of a reversed remittance: %w", q, err)
		}
		if _, err := a.Store.PlanRemittances(ctx, f, q, qp.End, a.Clock.Now()); err != nil {
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
func (a *App) confirmPosted(ctx context.Context, f Fence, end time.Time) (int, error) {
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
		if err := a.Store.MarkPosted(ctx, f, posted); err != nil {
			return notPosted, err
		}
	}
}
