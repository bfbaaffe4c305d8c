package app

import (
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// How a page is followed (PageTiming's defaults and bounds).
const (
	PagePollDefault   = 50 * time.Millisecond // settlement's table, for the providers in flight
	pagePollMax       = 2 * time.Second       // the poll backs off to this while nothing finishes
	pageQuiet         = time.Second           // once nothing has finished for this long
	PageAskDefault    = 5 * time.Second       // the runner, for a provider in flight this long
	pageAskMax        = time.Minute           // asking again backs off (doubling) to this
	pageHeartbeatStep = 2 * time.Second       // the cycle workflow's HeartbeatTimeout is 15 s
)

// PageTiming is how often a page polls settlement's table for the
// providers in flight (Poll) and after how long it asks the runner about a
// provider the table does not show done (Ask): a provider whose settlement
// failed, or ended held by a hold released since. Zero fields take the
// defaults.
type PageTiming struct {
	Poll time.Duration
	Ask  time.Duration
}

// ErrProviderFailed marks a provider settlement that ended in failure.
var ErrProviderFailed = errors.New("provider settlement failed")

// ErrFailedAsBefore marks, beside ErrProviderFailed, a failure whose cause
// is the one the provider's previous run failed with: a rerun of its
// closing cycle (the daily opener's, start-up's, a close request's)
// meeting a failure logged already.
var ErrFailedAsBefore = errors.New("as its previous run did")

// Page is the bookkeeping of one page of a cycle's providers being
// settled: which are still to start, which are in flight (at most window)
// and when each is next asked about, how long the next poll waits, and
// the outcomes so far. It does no I/O; time comes from its clock.
type Page struct {
	clock    clock.Clock
	timing   PageTiming
	window   int
	todo     []string
	next     int
	askOnly  map[string]bool // held before this page: a 'held' row may be stale
	inFlight map[string]*flight
	wait     time.Duration // the next poll's wait
	lastDone time.Time     // when a provider last finished
	beat     time.Time     // the last heartbeat
	now      time.Time     // this poll's instant (Observe)
	before   int           // in flight before this poll
	res      SettleProvidersResult
}

// flight is a provider in flight: a provider still running when asked is
// asked again after twice the wait, up to pageAskMax (a ledger outage
// keeps a whole window in retries, and 500 describes every 5 s would load
// Temporal for nothing).
type flight struct {
	asked    time.Time
	askAfter time.Duration
}

// NewPage starts the bookkeeping of providers, given what settlement's
// table says of them (domain.Provider* by provider): settled ones are
// counted at once, the others are to start, window at a time (window ≤ 0:
// all at once).
func NewPage(c clock.Clock, timing PageTiming, providers []string, states map[string]string, window int) *Page {
	if timing.Poll <= 0 {
		timing.Poll = PagePollDefault
	}
	if timing.Ask <= 0 {
		timing.Ask = PageAskDefault
	}
	p := &Page{clock: c, timing: timing, askOnly: map[string]bool{}, inFlight: map[string]*flight{}}
	for _, id := range providers {
		switch states[id] {
		case domain.ProviderSettled:
			p.res.Settled++
		case domain.ProviderHeld:
			p.askOnly[id] = true
			p.todo = append(p.todo, id)
		default:
			p.todo = append(p.todo, id)
		}
	}
	p.window = window
	if p.window <= 0 {
		p.window = len(p.todo)
	}
	now := c.Now()
	p.wait, p.lastDone, p.beat = timing.Poll, now, now
	return p
}

// ToStart returns the providers that fit in the window now (Started marks
// them in flight once they are started).
func (p *Page) ToStart() []string {
	n := min(p.window-len(p.inFlight), len(p.todo)-p.next)
	if n <= 0 {
		return nil
	}
	return p.todo[p.next : p.next+n]
}

// Started marks the providers ToStart returned as in flight.
func (p *Page) Started(batch []string) {
	now := p.clock.Now()
	for _, id := range batch {
		f := &flight{asked: now, askAfter: p.timing.Ask}
		if p.askOnly[id] {
			f.askAfter = 0 // its table state may be stale: ask from the first poll
		}
		p.inFlight[id] = f
	}
	p.next += len(batch)
}

// Done tells whether no provider is in flight (and, after ToStart came
// back empty, none is left to start).
func (p *Page) Done() bool { return len(p.inFlight) == 0 }

// InFlight lists the providers in flight, sorted.
func (p *Page) InFlight() []string { return slices.Sorted(maps.Keys(p.inFlight)) }

// Wait is how long to wait before the next poll.
func (p *Page) Wait() time.Duration { return p.wait }

// Result counts the outcomes so far.
func (p *Page) Result() SettleProvidersResult { return p.res }

// Observe applies one poll of settlement's table (states of the providers
// in flight): a settled provider is done, a held one too (unless it was
// held before this page); it returns the providers to ask the runner
// about now, in order.
func (p *Page) Observe(states map[string]string) (ask []string) {
	p.now, p.before = p.clock.Now(), len(p.inFlight)
	for _, id := range p.InFlight() {
		switch st := states[id]; {
		case st == domain.ProviderSettled:
			p.finish(id, ProviderResult{}, nil)
		case st == domain.ProviderHeld && !p.askOnly[id]:
			p.finish(id, ProviderResult{Held: true}, nil)
		case p.now.Sub(p.inFlight[id].asked) >= p.inFlight[id].askAfter:
			ask = append(ask, id)
		}
	}
	return ask
}

// Answer records the runner's answer about a provider asked at this poll:
// still running (asked again later), or ended with res (failed wraps
// ErrProviderFailed).
func (p *Page) Answer(id string, running bool, res ProviderResult, failed error) {
	f, ok := p.inFlight[id]
	if !ok {
		return
	}
	if !running {
		p.finish(id, res, failed)
		return
	}
	f.asked, f.askAfter = p.now, min(max(2*f.askAfter, p.timing.Poll), max(pageAskMax, p.timing.Ask))
}

func (p *Page) finish(id string, r ProviderResult, failed error) {
	delete(p.inFlight, id)
	switch {
	case errors.Is(failed, ErrProviderFailed):
		p.res.Failed++
	case r.Held:
		p.res.Held++
	default:
		p.res.Settled++
	}
}

// EndPoll sets the next poll's wait — back to Poll when a provider
// finished at this poll, doubling up to pagePollMax once nothing has finished for pageQuiet (a
// ledger outage holds every provider in its retries) — and tells whether
// a heartbeat is due.
func (p *Page) EndPoll() (heartbeat bool) {
	switch {
	case len(p.inFlight) < p.before:
		p.wait, p.lastDone = p.timing.Poll, p.now
	case p.now.Sub(p.lastDone) >= pageQuiet:
		p.wait = min(2*p.wait, max(pagePollMax, p.timing.Poll))
	}
	return p.HeartbeatDue()
}

// HeartbeatDue tells whether pageHeartbeatStep has passed since the last
// heartbeat and, if so, takes one as given now. EndPoll asks it after a
// poll, and the poll between its asks to the runner: asking about a whole
// window of failed providers may take longer than the step.
func (p *Page) HeartbeatDue() bool {
	now := p.clock.Now()
	if now.Sub(p.beat) < pageHeartbeatStep {
		return false
	}
	p.beat = now
	return true
}
