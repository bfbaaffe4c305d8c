package app

import (
	"context"
	"fmt"
	"sync"
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
// (Unfinished, logged at WARN); the next run on the replica resumes after
// the last statement it tried (sweepCursor). A refused sweep costs one
// ledger call, so only a backlog far past what settlement has held (a few
// rows) reaches it.
const sweepRunMax = 8 * time.Minute

// sweepCursor is where a replica's next commission sweep run resumes: the
// last statement the replica's last run tried, or nil (from the oldest).
// A run starts after it, pages to the end of the backlog, then wraps round
// to the oldest and ends with the statement it started after, so it tries
// each unswept statement at most once; a run that finishes that round
// leaves nil. Once every run started from the oldest, and a backlog longer
// than one run's sweepRunMax never had its tail tried.
//
// It is kept in memory, per replica (not in the database): a restarted
// replica starts from the oldest again, and each replica that runs the
// hourly activity keeps its own. Every run on a replica goes on from that
// replica's last, so any k runs in a row on one replica (no restart among
// them) try every statement of a backlog that takes k runs' time,
// whichever replicas run the runs between them. A position whose statement
// has since been swept is still a place in the keyset order.
type sweepCursor struct {
	mu sync.Mutex
	at *domain.Unswept
}

func (c *sweepCursor) get() *domain.Unswept {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *sweepCursor) set(u *domain.Unswept) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = u
}

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
// counted and logged, tried again next run, but no hour fixes them), and
// whether the run ran out of time before the end of the backlog.
type SweepSummary struct {
	Swept, Deferred, Conflicts, Refused int
	Unfinished                          bool
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
// keyset's order (oldest first), starting after where this replica's last
// run stopped (sweepCursor) and wrapping round to the oldest at the end of
// the backlog, until it is back where it started (or sweepRunMax), each
// under its sweep key (a replay after a crash posts nothing twice) and
// records it on the statement. Only statements with a commission and no
// sweep are listed: a settlement that carried its sweep (the joint form)
// names it as its sweep and is never swept again. A sweep the ledger
// refuses because bank:client still cannot fund it (Unfunded) is deferred
// to the next run, and so is one whose key holds another body (a Conflict:
// counted in gpubill_settlement_commission_sweep_conflicts_total and
// logged, it no longer stops the run at that statement every hour). Any
// other refusal (Rejected: the ledger's InvalidArgument on another field or
// account, PermissionDenied, NotFound, FailedPrecondition, or a currency
// settlement does not know) is Refused: counted in
// gpubill_settlement_commission_sweep_refused_total{currency,code}, logged
// at ERROR, the run going on; it once counted as Deferred, read as
// bank:client short. Any other error ends the run, to be retried (from
// the statement it failed on: the cursor names the last one done).
func (s *Steps) SweepCommission(ctx context.Context) (SweepSummary, error) {
	var out SweepSummary
	stop := s.Clock.Now().Add(sweepRunMax)
	start := s.sweepAt.get() // nil: from the oldest, no wrapping round
	after, through := start, (*domain.Unswept)(nil)
	for {
		us, err := s.Store.UnsweptCommission(ctx, after, through, unsweptPageSize)
		if err != nil {
			return out, err
		}
		for i, u := range us {
			if !s.Clock.Now().Before(stop) {
				out.Unfinished = true
				s.logger().Warn("commission sweep run out of time: the next run on this replica goes on after the last statement tried",
					"swept", out.Swept, "deferred", out.Deferred, "conflicts", out.Conflicts, "refused", out.Refused, "next_cycle", u.CycleID,
					"next_provider", u.ProviderID, "next_currency", u.Currency)
				return out, nil
			}
			if err := s.sweepOne(ctx, u, &out); err != nil {
				return out, err
			}
			after = &us[i]
			s.sweepAt.set(after)
		}
		if len(us) == unsweptPageSize {
			continue
		}
		if start == nil || through != nil {
			// The end of the backlog, having started from the oldest,
			// or of the round back to where the run started.
			s.sweepAt.set(nil)
			return out, nil
		}
		// The tail reached: round to the oldest, up to where it started.
		after, through = nil, start
	}
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
