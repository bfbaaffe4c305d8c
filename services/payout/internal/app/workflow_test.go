package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// script answers each activity from a queue of statuses (the last one
// repeats) and counts the calls.
type script struct {
	prepare, submit, follow []string
	submitErrs              int // Submit fails this many times first (a rail outage)
	calls                   map[string]int
}

func (s *script) next(name string, q *[]string) (string, error) {
	s.calls[name]++
	if len(*q) == 0 {
		return "", errors.New(name + ": script exhausted")
	}
	out := (*q)[0]
	if len(*q) > 1 {
		*q = (*q)[1:]
	}
	return out, nil
}

func (s *script) register(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterWorkflow(Workflow)
	env.RegisterActivityWithOptions(func(ctx context.Context, id string) (string, error) { return s.next(ActPrepare, &s.prepare) },
		activity.RegisterOptions{Name: ActPrepare})
	env.RegisterActivityWithOptions(func(ctx context.Context, id string) (string, error) {
		if s.submitErrs > 0 {
			s.submitErrs--
			s.calls[ActSubmit]++
			return "", ErrRailUnavailable
		}
		return s.next(ActSubmit, &s.submit)
	}, activity.RegisterOptions{Name: ActSubmit})
	env.RegisterActivityWithOptions(func(ctx context.Context, id string) (string, error) { return s.next(ActFollow, &s.follow) },
		activity.RegisterOptions{Name: ActFollow})
}

func TestWorkflowPaths(t *testing.T) {
	const (
		ar = domain.StatusActionRequired
		cr = domain.StatusCreated
		su = domain.StatusSubmitted
		it = domain.StatusInTransit
		pd = domain.StatusPaid
		fd = domain.StatusFailed
		rt = domain.StatusReturned
		ca = domain.StatusCanceled
	)
	timing := Timing{GateRecheck: 1000 * time.Hour, PollFirst: time.Second, PollMax: 4 * time.Second, ReturnWindow: time.Hour}
	tests := []struct {
		name       string
		give       script
		wake       bool // a wake signal arrives (KYC verified) after a minute
		want       string
		wantCalls  map[string]int
		wantWithin time.Duration // virtual time the workflow may take
	}{
		{name: "paid", give: script{prepare: []string{cr}, submit: []string{su}, follow: []string{it, pd}}, want: pd,
			wantCalls: map[string]int{ActPrepare: 1, ActSubmit: 1}, wantWithin: 2 * time.Hour},
		{name: "failed", give: script{prepare: []string{cr}, submit: []string{su}, follow: []string{fd}}, want: fd,
			wantCalls: map[string]int{ActPrepare: 1, ActSubmit: 1, ActFollow: 1}, wantWithin: time.Minute},
		{name: "returned", give: script{prepare: []string{cr}, submit: []string{su}, follow: []string{pd, pd, rt}}, want: rt,
			wantCalls: map[string]int{ActPrepare: 1, ActSubmit: 1, ActFollow: 3}, wantWithin: time.Minute},
		{name: "canceled before submission", give: script{prepare: []string{ar, ca}}, wake: true, want: ca,
			wantCalls: map[string]int{ActPrepare: 2, ActSubmit: 0, ActFollow: 0}, wantWithin: time.Hour},
		{name: "kyc gate heals on the wake signal", give: script{prepare: []string{ar, cr}, submit: []string{pd}, follow: []string{pd}}, wake: true, want: pd,
			wantCalls: map[string]int{ActPrepare: 2, ActSubmit: 1}, wantWithin: 3 * time.Hour},
		{name: "rail outage: submit retried", give: script{prepare: []string{cr}, submitErrs: 3, submit: []string{su}, follow: []string{fd}}, want: fd,
			wantCalls: map[string]int{ActPrepare: 1, ActSubmit: 4, ActFollow: 1}, wantWithin: time.Hour},
		{name: "resumed after submission", give: script{prepare: []string{it}, follow: []string{fd}}, want: fd,
			wantCalls: map[string]int{ActPrepare: 1, ActSubmit: 0, ActFollow: 1}, wantWithin: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			// The SDK's 1 s deadlock detector fires on a loaded 2-core
			// machine without any deadlock (seen in settlement's tests).
			env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
			sc := tt.give
			sc.calls = map[string]int{}
			sc.register(env)
			start := env.Now()
			if tt.wake {
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalWake, nil) }, time.Minute)
			}
			env.ExecuteWorkflow(Workflow, Input{PayoutID: "po-1", Timing: timing})
			if !env.IsWorkflowCompleted() {
				t.Fatal("workflow not completed")
			}
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := env.GetWorkflowResult(&got); err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("status %s, want %s", got, tt.want)
			}
			for name, n := range tt.wantCalls {
				if sc.calls[name] != n {
					t.Errorf("%s called %d times, want %d", name, sc.calls[name], n)
				}
			}
			if took := env.Now().Sub(start); took > tt.wantWithin {
				t.Errorf("took %s of workflow time, want at most %s", took, tt.wantWithin)
			}
		})
	}
}

// A run continued as new after the payout was paid watches for a return
// until the window that opened when it was paid closes, not a window of
// its own (TestReturnWindowHoldsAcrossContinueAsNew runs the whole chain
// on a real server).
func TestContinuedRunKeepsTheReturnWindow(t *testing.T) {
	timing := Timing{PollFirst: time.Second, PollMax: time.Minute, ReturnWindow: 72 * time.Hour}
	for _, tt := range []struct {
		name      string
		paidAgo   time.Duration
		want      time.Duration // at most, of workflow time
		wantCalls int           // Follow
	}{
		{"window open an hour more", 71 * time.Hour, time.Hour + time.Minute, 66},
		{"window closed", 73 * time.Hour, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
			sc := script{prepare: []string{domain.StatusPaid}, follow: []string{domain.StatusPaid}, calls: map[string]int{}}
			sc.register(env)
			start := env.Now()
			env.ExecuteWorkflow(Workflow, Input{PayoutID: "po-1", Timing: timing, PaidAt: start.Add(-tt.paidAgo)})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if took := env.Now().Sub(start); took > tt.want || sc.calls[ActFollow] > tt.wantCalls {
				t.Errorf("followed the paid payout %s (%d polls), want at most %s (%d)", took, sc.calls[ActFollow], tt.want, tt.wantCalls)
			}
		})
	}
}
