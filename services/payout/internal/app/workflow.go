package app

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Names the worker registers the workflow, its activities and signal under.
const (
	WorkflowName = "Payout"
	ActPrepare   = "PayoutPrepare"
	ActSubmit    = "PayoutSubmit"
	ActFollow    = "PayoutFollow"
	// SignalWake nudges a payout's workflow: its gate may have changed (KYC,
	// method, hold, cancel) or the rail has news (callback). The workflow
	// then asks again; the signal carries nothing it must trust.
	SignalWake = "wake"
	// ErrTypeInvalid marks a business failure no retry can fix.
	ErrTypeInvalid = "InvalidPayout"
)

// historyLengthMax: a payout waiting months for its KYC continues as new
// before its history nears Temporal's limits (51 200 events).
const historyLengthMax = 10000

// Timing is how a payout's workflow waits. Zero fields take the defaults.
type Timing struct {
	GateRecheck  time.Duration // re-check the gate this often without a signal
	PollFirst    time.Duration // first rail poll after submission (doubling)
	PollMax      time.Duration // longest interval between rail polls
	ReturnWindow time.Duration // keep watching a paid payout for a return this long
	// ActivityTimeout bounds one activity attempt: an attempt on a worker
	// that died is retried elsewhere after it.
	ActivityTimeout time.Duration
	// HistoryMax: a run continues as new once its history is longer
	// (historyLengthMax; a test's shorter one reaches it in seconds).
	HistoryMax int `json:",omitzero"`
}

// Timing defaults: a signal (KYC set, rail callback) usually wakes the
// workflow long before these.
const (
	GateRecheckDefault     = time.Hour
	PollFirstDefault       = 5 * time.Second
	PollMaxDefault         = 30 * time.Minute
	ReturnWindowDefault    = 72 * time.Hour
	ActivityTimeoutDefault = 30 * time.Second
)

// WithDefaults fills the zero fields.
func (t Timing) WithDefaults() Timing {
	if t.GateRecheck <= 0 {
		t.GateRecheck = GateRecheckDefault
	}
	if t.PollFirst <= 0 {
		t.PollFirst = PollFirstDefault
	}
	if t.PollMax <= 0 {
		t.PollMax = PollMaxDefault
	}
	if t.ReturnWindow <= 0 {
		t.ReturnWindow = ReturnWindowDefault
	}
	if t.ActivityTimeout <= 0 {
		t.ActivityTimeout = ActivityTimeoutDefault
	}
	if t.HistoryMax <= 0 {
		t.HistoryMax = historyLengthMax
	}
	return t
}

// Input starts payout-{id}.
type Input struct {
	PayoutID string
	Timing   Timing
	// PaidAt is when an earlier run of the workflow saw the payout paid,
	// carried across continue-as-new: the return window runs from it. A
	// run that started the window again at its own start, with polls close
	// enough together to reach historyLengthMax within the window
	// (PollMax under about 5 minutes for 72 h), never ended.
	PaidAt time.Time `json:",omitzero"`
}

// Activity retries: the ledger, the rail and the database may
// all be down for a while; a payout waits and retries (doubling to a
// minute) rather than fail. Submission is safe to retry: it queries the
// rail by reference before submitting.
var activityRetry = &temporal.RetryPolicy{
	InitialInterval:        time.Second,
	BackoffCoefficient:     2,
	MaximumInterval:        time.Minute,
	NonRetryableErrorTypes: []string{ErrTypeInvalid},
}

// Workflow is payout-{id}: wait at the gate (KYC, method, hold, minimum,
// available covering it) until the payout may go; submit it (ledger Dr available / Cr in_transit,
// then the rail under the payout's reference); follow the rail (a wake
// signal from its callback, or polls with backoff) to paid, failed or
// returned, each step posted to the ledger by the activities. It returns
// the payout's last status.
func Workflow(ctx workflow.Context, in Input) (string, error) {
	t := in.Timing.WithDefaults()
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: t.ActivityTimeout, RetryPolicy: activityRetry})
	wake := workflow.GetSignalChannel(ctx, SignalWake)

	var status string
	for {
		if err := workflow.ExecuteActivity(ctx, ActPrepare, in.PayoutID).Get(ctx, &status); err != nil {
			return "", err
		}
		if status == domain.StatusCreated {
			// Submit answers action_required when available no longer
			// covers the payout: back to the gate.
			if err := workflow.ExecuteActivity(ctx, ActSubmit, in.PayoutID).Get(ctx, &status); err != nil {
				return "", err
			}
		}
		if status != domain.StatusActionRequired {
			break
		}
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > t.HistoryMax {
			return "", workflow.NewContinueAsNewError(ctx, WorkflowName, in)
		}
		waitWake(ctx, wake, t.GateRecheck)
	}
	delay := t.PollFirst
	paidAt := in.PaidAt // zero in every history before it was carried: replays as it ran
	for domain.Submitted(status) && status != domain.StatusReturned {
		if status == domain.StatusPaid {
			if paidAt.IsZero() {
				paidAt = workflow.Now(ctx)
			}
			if workflow.Now(ctx).Sub(paidAt) >= t.ReturnWindow {
				break
			}
		}
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > t.HistoryMax {
			in.PaidAt = paidAt
			return "", workflow.NewContinueAsNewError(ctx, WorkflowName, in)
		}
		waitWake(ctx, wake, delay)
		delay = min(2*delay, t.PollMax)
		if err := workflow.ExecuteActivity(ctx, ActFollow, in.PayoutID).Get(ctx, &status); err != nil {
			return "", err
		}
	}
	return status, nil
}

// waitWake returns on a wake signal (draining any others) or after d.
func waitWake(ctx workflow.Context, wake workflow.ReceiveChannel, d time.Duration) {
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	timer := workflow.NewTimer(tctx, d)
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
	sel.AddFuture(timer, func(workflow.Future) {})
	sel.Select(ctx)
	for wake.ReceiveAsync(nil) {
	}
}
