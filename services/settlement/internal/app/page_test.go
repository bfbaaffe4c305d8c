package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func startAll(p *Page) []string {
	b := slices.Clone(p.ToStart())
	p.Started(b)
	return b
}

// The window: settled providers are counted without a start, at most
// window are in flight, and one finishing makes room for the next.
func TestPageWindow(t *testing.T) {
	c := clock.NewManual(t0)
	p := NewPage(c, PageTiming{}, []string{"a", "b", "c", "d"}, map[string]string{"b": domain.ProviderSettled}, 2)
	if got := startAll(p); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("first starts %v, want [a c]", got)
	}
	if got := p.ToStart(); got != nil {
		t.Fatalf("window full, still starts %v", got)
	}
	if ask := p.Observe(map[string]string{"c": domain.ProviderSettled}); ask != nil {
		t.Errorf("asked %v before Ask elapsed", ask)
	}
	p.EndPoll()
	if got := startAll(p); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after c settled, starts %v, want [d]", got)
	}
	p.Observe(map[string]string{"a": domain.ProviderHeld, "d": domain.ProviderSettled})
	if !p.Done() {
		t.Fatalf("in flight after every provider finished: %v", p.InFlight())
	}
	if r := p.Result(); r != (SettleProvidersResult{Settled: 3, Held: 1}) {
		t.Errorf("result %+v, want 3 settled, 1 held", r)
	}
}

// A provider the table does not show done is asked about after Ask, and,
// still running, again after twice the wait (doubling up to pageAskMax).
func TestPageAskBacksOff(t *testing.T) {
	c := clock.NewManual(t0)
	ask := 5 * time.Second
	p := NewPage(c, PageTiming{Poll: 50 * time.Millisecond, Ask: ask}, []string{"a"}, nil, 0)
	startAll(p)
	var asks []time.Duration // when "a" was asked, since start
	for range 200 {
		c.Advance(time.Second)
		for _, id := range p.Observe(nil) {
			asks = append(asks, c.Now().Sub(t0))
			p.Answer(id, true, ProviderResult{}, nil)
		}
		p.EndPoll()
	}
	want := []time.Duration{5, 15, 35, 75, 135, 195}
	if len(asks) != len(want) {
		t.Fatalf("asked at %v, want at %v s", asks, want)
	}
	for i := range want {
		if asks[i] != want[i]*time.Second {
			t.Fatalf("asked at %v, want at %v s", asks, want)
		}
	}
	c.Advance(time.Second)
	p.Observe(nil)
	p.Answer("a", false, ProviderResult{}, fmt.Errorf("%w: terminated", ErrProviderFailed))
	if r := p.Result(); r != (SettleProvidersResult{Failed: 1}) || !p.Done() {
		t.Errorf("after the runner said failed: %+v, done %v", r, p.Done())
	}
}

// A provider held before the page may have been released since: its
// 'held' row is not trusted; the runner is asked from the first poll.
func TestPageHeldBeforeAsksRunner(t *testing.T) {
	c := clock.NewManual(t0)
	p := NewPage(c, PageTiming{}, []string{"h"}, map[string]string{"h": domain.ProviderHeld}, 0)
	startAll(p)
	c.Advance(PagePollDefault)
	ask := p.Observe(map[string]string{"h": domain.ProviderHeld})
	if !slices.Equal(ask, []string{"h"}) {
		t.Fatalf("asked %v, want [h]", ask)
	}
	p.Answer("h", false, ProviderResult{Settled: []string{"CNY"}}, nil)
	if r := p.Result(); r != (SettleProvidersResult{Settled: 1}) {
		t.Errorf("result %+v, want 1 settled", r)
	}
}

// The poll waits Poll while providers finish; once nothing has finished
// for pageQuiet it doubles up to pagePollMax, and a provider finishing
// brings it back to Poll. A heartbeat is due every pageHeartbeatStep.
func TestPagePollBacksOff(t *testing.T) {
	c := clock.NewManual(t0)
	poll := 50 * time.Millisecond
	p := NewPage(c, PageTiming{Poll: poll, Ask: time.Hour}, []string{"a", "b"}, nil, 0)
	startAll(p)
	var waits []time.Duration
	var beats []time.Time
	for elapsed := time.Duration(0); elapsed < 10*time.Second; elapsed += p.Wait() {
		c.Advance(p.Wait())
		p.Observe(nil)
		if p.EndPoll() {
			beats = append(beats, c.Now())
		}
		waits = append(waits, p.Wait())
	}
	if waits[0] != poll || slices.Max(waits) != pagePollMax {
		t.Errorf("waits %v: want %v first, then doubling to %v", waits, poll, pagePollMax)
	}
	quiet := 0
	for _, w := range waits {
		if w == poll {
			quiet++
		}
	}
	if quiet != int(pageQuiet/poll)-1 {
		t.Errorf("waited %d polls of %v before backing off (%v), want %d", quiet, poll, waits, int(pageQuiet/poll)-1)
	}
	last := t0
	for _, b := range beats {
		if gap := b.Sub(last); gap < pageHeartbeatStep || gap >= pageHeartbeatStep+pagePollMax {
			t.Errorf("heartbeats at %v: want one every %v (at the first poll after it)", beats, pageHeartbeatStep)
		}
		last = b
	}
	if len(beats) < 3 {
		t.Errorf("%d heartbeats in 10 s", len(beats))
	}
	c.Advance(p.Wait())
	p.Observe(map[string]string{"a": domain.ProviderSettled})
	p.EndPoll()
	if p.Wait() != poll {
		t.Errorf("after a provider finished the poll waits %v, want %v", p.Wait(), poll)
	}
}

// noRows is a settlement table with no provider held or settled; each read
// moves the clock by a second, the real time a poll's wait stands for.
type noRows struct{ clock *clock.Manual }

func (n noRows) ProviderStates(context.Context, string, []string) (map[string]string, error) {
	n.clock.Advance(time.Second)
	return map[string]string{}, nil
}

// failingRunner starts every provider; asked about one, it takes perAsk
// of the clock (Temporal's describe, result, list, previous result) and
// says it failed.
type failingRunner struct {
	clock  *clock.Manual
	perAsk time.Duration
}

func (failingRunner) StartProvider(context.Context, ProviderInput) error { return nil }

func (r failingRunner) ProviderOutcome(_ context.Context, in ProviderInput) (bool, ProviderResult, error) {
	r.clock.Advance(r.perAsk)
	return false, ProviderResult{}, fmt.Errorf("%w: %s refused", ErrProviderFailed, in.ProviderID)
}

// A page whose providers all fail at once asks about all of them in one
// poll: 500 asks of 40 ms are 20 s, past the page activity's 15 s
// HeartbeatTimeout, so the page heartbeats during the asks, not only
// after them (else Temporal times the attempt out and every retry does
// the same).
func TestPageHeartbeatsWhileAskingAboutFailures(t *testing.T) {
	c := clock.NewManual(t0)
	providers := make([]string, 500)
	for i := range providers {
		providers[i] = fmt.Sprintf("p%03d", i)
	}
	s := &PageSettler{States: noRows{c}, Runner: failingRunner{clock: c, perAsk: 40 * time.Millisecond},
		Timing: PageTiming{Poll: time.Millisecond, Ask: time.Second}, Clock: c,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	beats := []time.Time{t0}
	heartbeat := func(SettleProvidersResult) { beats = append(beats, c.Now()) }
	in := SettleProvidersInput{CycleID: "2026-11", Providers: providers, Window: 500}
	res, err := s.Settle(context.Background(), in, heartbeat)
	if err != nil || res != (SettleProvidersResult{Failed: 500}) {
		t.Fatalf("Settle = %+v, %v; want 500 failed", res, err)
	}
	beats = append(beats, c.Now())
	for i := 1; i < len(beats); i++ {
		if gap := beats[i].Sub(beats[i-1]); gap > 10*time.Second {
			t.Errorf("no heartbeat for %v (from %v to %v, of %v)", gap, beats[i-1].Sub(t0), beats[i].Sub(t0), beats[len(beats)-1].Sub(t0))
		}
	}
}
