package app

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// The deferred commission sweeps (PostSettlement defers a sweep bank:client
// cannot fund): schedule settlement-commission-sweep fires hourly and runs
// CommissionSweepWorkflowName, whose one activity sweeps what bank:client
// can fund now. A sweep bank:client still cannot fund waits for the next
// run; its commission is counted, with its age, in
// gpubill_settlement_commission_unswept (alert
// GpubillCommissionSweepDeferred). A sweep the ledger refuses for any other
// reason is refused, not deferred (gpubill_settlement_commission_sweep_refused_total,
// alert GpubillCommissionSweepRefused).
const (
	CommissionSweepWorkflowName = "SettlementCommissionSweep"
	ActSweepCommission          = "SweepCommission"
)

// unsweptPageSize is how many unswept statements one read lists; a run
// reads page after page, each after the last statement of the one before
// (settled_at, cycle, provider, currency), to the end of the backlog. One
// read of the oldest 500 a run left the statements behind 500 refused ones
// unswept for as long as those were refused: a fundable CNY sweep waited
// behind 500 USD ones bank:client could not fund.
const unsweptPageSize = 500

// sweepRunMax bounds a run: it starts no sweep after it, well within
// sweepActivity's StartToCloseTimeout (10 minutes), and returns what it did
// (Unfinished, logged at WARN); the next run resumes after the last
// statement it tried (the sweep's position). A refused sweep costs one
// ledger call, so only a backlog far past what settlement has held (a few
// rows) reaches it.
//
// The position is kept in settlement's database (Store.TakeSweepPosition,
// commission_sweep_position), one for every replica, and survives a
// restart: the last statement the last run tried, or nil (from the
// oldest). A run starts after it, pages to the end of the backlog, then
// wraps round to the oldest and ends with the statement it started after,
// so it tries each unswept statement at most once; a run that finishes
// that round leaves nil. So k runs in a row, on whichever replicas and
// with whatever restarts between them, try every statement of a backlog
// that takes k runs' time. Kept in each replica's memory, it was lost at
// every restart and the tail of a backlog longer than one run went
// untried. A position whose statement has since been swept is still a
// place in the keyset order.
//
// Runs at once (the schedule skips a run while one is running, so: an
// attempt that outlived its StartToClose beside its retry, or a run
// started by hand) post no sweep twice: each is posted under its sweep key
// and a replay answers the same transaction, and RecordSweep names it on a
// statement only once. The position moves with one run only: each run
// takes it at its start, and a run another took it from stops at its next
// statement (Superseded) without writing its own, older, place over it.
const sweepRunMax = 8 * time.Minute

var sweepActivity = workflow.ActivityOptions{
	StartToCloseTimeout:    10 * time.Minute,
	ScheduleToCloseTimeout: time.Hour,
	RetryPolicy:            scheduledRetry,
}

// SweepSummary is what one run did: settlements swept, those whose sweep
// bank:client still cannot fund (Deferred: the ledger's overdraft refusal
// of bank:client, app.Unfunded, alone), those whose sweep key the ledger
// holds with another body (Conflicts: counted and logged, tried again next
// run), those the ledger refused for any other reason (Refused: bad input,
// settlement's token without its role, an unknown account or currency;
// counted and logged, tried again next run, but no hour fixes them),
// whether the run ran out of time before the end of the backlog, and
// whether it stopped because a run started after it took the sweep's
// position over (Superseded: that run goes on with the backlog).
type SweepSummary struct {
	Swept, Deferred, Conflicts, Refused int
	Unfinished, Superseded              bool
}

// CommissionSweepWorkflow sweeps the deferred commissions bank:client can
// fund now.
func CommissionSweepWorkflow(ctx workflow.Context) (SweepSummary, error) {
	ctx = workflow.WithActivityOptions(ctx, sweepActivity)
	var out SweepSummary
	if err := workflow.ExecuteActivity(ctx, ActSweepCommission).Get(ctx, &out); err != nil {
		return out, fmt.Errorf("sweep commission: %w", err)
	}
	return out, nil
}

// SweepCommission posts the deferred sweeps page after page in the
// keyset's order (oldest first), starting after the sweep's position (where
// the last run stopped, kept in the database: sweepRunMax) and wrapping
// round to the oldest at the end of the backlog, until it is back where it
// started (or sweepRunMax, or another run takes the position over), each
// under its sweep key (a replay after a crash posts nothing twice) and
// records it on the statement, and the position after each statement. Only
// statements with a commission and no sweep are listed: a settlement that
// carried its sweep (the joint form) names it as its sweep and is never
// swept again. A sweep the ledger refuses because bank:client still cannot
// fund it (Unfunded) is deferred to the next run, and so is one whose key
// holds another body (a Conflict: counted in
// gpubill_settlement_commission_sweep_conflicts_total and logged, it no
// longer stops the run at that statement every hour). Any other refusal
// (Rejected: the ledger's InvalidArgument on another field or account,
// PermissionDenied, NotFound, FailedPrecondition, or a currency settlement
// does not know) is Refused: counted in
// gpubill_settlement_commission_sweep_refused_total{currency,code}, logged
// at ERROR, the run going on; it once counted as Deferred, read as
// bank:client short. Any other error ends the run, to be retried (from
// the statement it failed on: the position names the last one done).
func (s *Steps) SweepCommission(ctx context.Context) (SweepSummary, error) {
	var out SweepSummary
	stop := s.Clock.Now().Add(sweepRunMax)
	run, start, err := s.Store.TakeSweepPosition(ctx) // start nil: from the oldest, no wrapping round
	if err != nil {
		return out, err
	}
	after, through := start, (*domain.Unswept)(nil)
	for {
		us, err := s.Store.UnsweptCommission(ctx, after, through, unsweptPageSize)
		if err != nil {
			return out, err
		}
		for i, u := range us {
			if !s.Clock.Now().Before(stop) {
				out.Unfinished = true
				s.logger().Warn("commission sweep run out of time: the next run goes on after the last statement tried",
					"swept", out.Swept, "deferred", out.Deferred, "conflicts", out.Conflicts, "refused", out.Refused, "next_cycle", u.CycleID,
					"next_provider", u.ProviderID, "next_currency", u.Currency)
				return out, nil
			}
			if err := s.sweepOne(ctx, u, &out); err != nil {
				return out, err
			}
			after = &us[i]
			if err := s.moveSweepPosition(ctx, run, after, &out); err != nil || out.Superseded {
				return out, err
			}
		}
		if len(us) == unsweptPageSize {
			continue
		}
		if start == nil || through != nil {
			// The end of the backlog, having started from the oldest,
			// or of the round back to where the run started.
			return out, s.moveSweepPosition(ctx, run, nil, &out)
		}
		// The tail reached: round to the oldest, up to where it started.
		after, through = nil, start
	}
}

// moveSweepPosition records at as the sweep's position while run holds it;
// once a later run has taken it, it marks out Superseded (the run stops,
// the later one goes on) and logs it.
func (s *Steps) moveSweepPosition(ctx context.Context, run int64, at *domain.Unswept, out *SweepSummary) error {
	ok, err := s.Store.MoveSweepPosition(ctx, run, at)
	if err != nil || ok {
		return err
	}
	out.Superseded = true
	s.logger().Warn("commission sweep run stopped: a run started after it took the sweep's position over and goes on with the backlog",
		"run", run, "swept", out.Swept, "deferred", out.Deferred, "conflicts", out.Conflicts, "refused", out.Refused)
	return nil
}

// sweepOne posts one deferred sweep and records it, or counts why not.
func (s *Steps) sweepOne(ctx context.Context, u domain.Unswept, out *SweepSummary) error {
	id, err := s.postSweep(ctx, u)
	switch {
	case IsConflict(err):
		out.Conflicts++
		s.sweepConflicted(u, err)
		return nil
	case IsUnfunded(err):
		out.Deferred++
		return nil
	case IsRejected(err):
		out.Refused++
		code := RefusalCode(err)
		sweepRefused.WithLabelValues(u.Currency, code).Inc()
		s.logger().Error("commission sweep refused by the ledger for a reason other than bank:client funding; the statement stays unswept and no later run fixes it by itself",
			"cycle", u.CycleID, "provider", u.ProviderID, "currency", u.Currency, "commission", u.Commission.String(),
			"key", domain.SweepKey(u.CycleID, u.ProviderID, u.Currency), "code", code, "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("sweep of %s %s %s: %w", u.CycleID, u.ProviderID, u.Currency, err)
	}
	if err := s.Store.RecordSweep(ctx, u, id); err != nil {
		return err
	}
	out.Swept++
	return nil
}

// sweepConflicted counts and logs a sweep the ledger refused as a Conflict
// (its key holds another transaction): the statement stays unswept.
func (s *Steps) sweepConflicted(u domain.Unswept, err error) {
	sweepConflicts.WithLabelValues(u.Currency).Inc()
	s.logger().Error("commission sweep conflicts with the ledger: its key holds another transaction; the statement stays unswept",
		"cycle", u.CycleID, "provider", u.ProviderID, "currency", u.Currency, "commission", u.Commission.String(),
		"key", domain.SweepKey(u.CycleID, u.ProviderID, u.Currency), "err", err)
}
