package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gpubill/gpubill/pkg/clock"
)

// pageStartsMax bounds the start calls a page makes at once.
const pageStartsMax = 32

// pageAsksMax is how many providers a poll asks the runner about at once:
// a few Temporal calls each (ports.WorkflowRunner.ProviderOutcome), so a
// window of failed providers is asked about in a fraction of the time
// asking one at a time takes, without flooding the server.
const pageAsksMax = 16

// ProviderRunner runs providers' settlements: StartProvider starts one (or
// joins the one in flight); ProviderOutcome tells whether it still runs and,
// if it ended, its result. An outcome error wrapping ErrProviderFailed is
// the provider's own failure (counted; the page goes on), wrapping
// ErrFailedAsBefore too when its previous run failed alike; any other
// error is transient and fails the page's attempt, which is retried.
type ProviderRunner interface {
	StartProvider(ctx context.Context, in ProviderInput) error
	ProviderOutcome(ctx context.Context, in ProviderInput) (running bool, res ProviderResult, err error)
}

// ProviderStateReader reads settlement's table: the state (domain.Provider*)
// of each of the providers that is held or settled in the cycle.
type ProviderStateReader interface {
	ProviderStates(ctx context.Context, cycle string, providers []string) (map[string]string, error)
}

// PageSettler settles pages of a cycle's providers (SettleProviders).
type PageSettler struct {
	States ProviderStateReader
	Runner ProviderRunner
	Timing PageTiming
	// Clock paces the page (real time: the polls' and asks' intervals),
	// not the business clock.
	Clock clock.Clock
	Log   *slog.Logger
}

// Settle settles one page of a cycle's providers: it starts each
// provider's settlement (settle-{cycle}-{provider}), at most in.Window in
// flight (started and not yet done in settlement's table; a workflow may
// still be recording its completion), and counts the outcomes. It learns
// them from settlement's own table (a provider is done when every currency
// is settled, or held), polled for the providers in flight, rather than
// from one long poll per workflow on the Temporal server (its cost on the
// server is in DEVELOPERS.md, settlement on Temporal). The runner is asked only about providers the table
// has not shown done for a while: a failed settlement leaves its rows
// pending. Providers settled already (a retried page, a release) are
// counted without a run. A transient error fails the attempt; the retry
// skips what settled and joins what is in flight. heartbeat is called with
// the counts every few seconds.
func (s *PageSettler) Settle(ctx context.Context, in SettleProvidersInput, heartbeat func(SettleProvidersResult)) (SettleProvidersResult, error) {
	states, err := s.States.ProviderStates(ctx, in.CycleID, in.Providers)
	if err != nil {
		return SettleProvidersResult{}, err
	}
	page := NewPage(s.Clock, s.Timing, in.Providers, states, in.Window)
	poll := time.NewTimer(page.Wait())
	defer poll.Stop()
	for {
		if batch := page.ToStart(); len(batch) > 0 {
			if err := s.startAll(ctx, in.CycleID, batch); err != nil {
				return page.Result(), err
			}
			page.Started(batch)
		}
		if page.Done() {
			return page.Result(), nil
		}
		select {
		case <-ctx.Done():
			return page.Result(), ctx.Err()
		case <-poll.C:
		}
		if err := s.poll(ctx, in.CycleID, page, heartbeat); err != nil {
			return page.Result(), err
		}
		beat := page.EndPoll()
		poll.Reset(page.Wait())
		if beat {
			heartbeat(page.Result())
		}
	}
}

// poll reads the table's states of the providers in flight and asks the
// runner about those it does not show done for a while, pageAsksMax at a
// time, heartbeating between them when one is due: a window of providers
// that failed together is asked about in one poll, which may outlast the
// page activity's HeartbeatTimeout (15 s); timed out, the attempt's
// answers would be lost, and its retry would ask them all again.
func (s *PageSettler) poll(ctx context.Context, cycle string, page *Page, heartbeat func(SettleProvidersResult)) error {
	states, err := s.States.ProviderStates(ctx, cycle, page.InFlight())
	if err != nil {
		return err
	}
	ask := page.Observe(states)
	for len(ask) > 0 {
		batch := ask[:min(pageAsksMax, len(ask))]
		ask = ask[len(batch):]
		if err := s.askAll(ctx, cycle, page, batch); err != nil {
			return err
		}
		if page.HeartbeatDue() {
			heartbeat(page.Result())
		}
	}
	return nil
}

// outcome is the runner's answer about one provider.
type outcome struct {
	running bool
	res     ProviderResult
	err     error
}

// askAll asks the runner about the providers at once and records the
// answers in the providers' order, so the counts and the log read the
// same whichever answer came first. A transient error is returned once
// the answers before it are recorded.
func (s *PageSettler) askAll(ctx context.Context, cycle string, page *Page, providers []string) error {
	answers := make([]outcome, len(providers))
	var wg sync.WaitGroup
	for i, id := range providers {
		wg.Go(func() {
			a := &answers[i]
			a.running, a.res, a.err = s.Runner.ProviderOutcome(ctx, ProviderInput{CycleID: cycle, ProviderID: id})
		})
	}
	wg.Wait()
	for i, id := range providers {
		a := answers[i]
		failed := errors.Is(a.err, ErrProviderFailed)
		if a.err != nil && !failed {
			return a.err
		}
		if failed && !a.running {
			s.logFailure(cycle, id, a.err)
		}
		page.Answer(id, a.running, a.res, a.err)
	}
	return nil
}

// logFailure logs a provider's failed settlement with its cause: at
// ERROR, or at WARN when its previous run failed alike. A provider that
// fails for good keeps its cycle closing, and the daily opener runs the
// cycle again every day: the same failure at ERROR once a day, for as long
// as it lasts, said nothing new, while GpubillSettlementStalled pages on
// the cycle the whole time. A new cause is news, and an ERROR.
func (s *PageSettler) logFailure(cycle, provider string, err error) {
	if errors.Is(err, ErrFailedAsBefore) {
		s.Log.Warn("provider settlement failed again, as its previous run did", "cycle", cycle, "provider", provider, "err", err)
		return
	}
	s.Log.Error("provider settlement failed", "cycle", cycle, "provider", provider, "err", err)
}

// startAll starts the providers' settlements, pageStartsMax at a time.
func (s *PageSettler) startAll(ctx context.Context, cycle string, providers []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pageStartsMax)
	for _, p := range providers {
		g.Go(func() error {
			return s.Runner.StartProvider(gctx, ProviderInput{CycleID: cycle, ProviderID: p})
		})
	}
	return g.Wait()
}
