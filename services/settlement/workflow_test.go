package settlement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/pkg/testkit/fakeledger"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

var (
	cal     = cycles.Default()
	cycle1  = cal.At(time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)) // cyc-20260101, closes 2026-02-16
	startAt = time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
)

// fixture is a settlement service on a fresh database with a fake ledger
// and tax service. Without a Temporal client (the SDK's test environment,
// which has no server to start workflows on) the cycle's page activity runs
// each provider's settlement inline (inlineRunner) instead of as its own
// workflow; the real-server tests run the workflows.
type fixture struct {
	s      *Service
	ledger *fakeledger.Ledger
	tax    *fakeledger.Tax
	clock  *clock.Manual
}

func newFixture(t testing.TB, tc client.Client, opts ...Option) *fixture {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	l := fakeledger.New()
	clk := clock.NewManual(startAt)
	tax := &fakeledger.Tax{}
	conn := fakeledger.Serve(t, l, tax)
	inline := tc == nil
	if inline {
		var err error
		tc, err = client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"}) // never dialled: StartNextCycle is mocked
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(context.Background(), svc.Deps{Pool: pool, Log: slog.New(slog.DiscardHandler), Clock: clk, Calendar: cal, Internal: conn},
		tc, "settlement-test", append([]Option{WithoutStartupCycles()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if inline {
		s.acts.Page.Runner = newInlineRunner(s.acts)
		s.acts.Page.Timing = app.PageTiming{Poll: time.Millisecond, Ask: 20 * time.Millisecond}
	}
	return &fixture{s: s, ledger: l, tax: tax, clock: clk}
}

// seed charges n providers p-0000.. in the cycle (one also in USD) and gives
// them tiers in rotation.
func (f *fixture) seed(t testing.TB, cycle string, n int) {
	t.Helper()
	tiers := []string{"standard", "pro", "partner"}
	ps, ts := make([]string, n), make([]string, n)
	for i := range n {
		p := fmt.Sprintf("p-%05d", i)
		f.ledger.Charge(p, cycle, "CNY", "1000.00")
		f.ledger.Charge(p, cycle, "CNY", "33.33")
		if i == 0 {
			f.ledger.Charge(p, cycle, "USD", "10.01")
		}
		ps[i], ts[i] = p, tiers[i%3]
	}
	if _, err := f.s.d.Pool.Exec(context.Background(), `insert into settlement.providers (provider_id, tier)
		select * from unnest($1::text[], $2::text[])`, ps, ts); err != nil {
		t.Fatal(err)
	}
}

// releaseAndSettle releases provider's hold in cycle1 and runs its
// settlement workflow again (in the test environment, as a release does).
func releaseAndSettle(t *testing.T, f *fixture, provider string) {
	t.Helper()
	if err := f.s.store.SetHold(context.Background(), holdRow(cycle1.ID, provider, false)); err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	env := newTestEnv(&suite)
	Register(env, f.s.acts, f.s.d.TaxPeriods)
	env.ExecuteWorkflow(app.ProviderWorkflowName, app.ProviderInput{CycleID: cycle1.ID, ProviderID: provider, Version: app.ProviderVersionCurrent})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
}

// cycleStatus is cycle1's status.
func cycleStatus(t testing.TB, f *fixture) string {
	t.Helper()
	var st string
	if err := f.s.d.Pool.QueryRow(context.Background(), `select status from settlement.cycles where cycle_id = $1`, cycle1.ID).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (f *fixture) count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := f.s.d.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// runCycle runs the cycle workflow in the time-skipping test environment,
// following continue-as-new, and returns the number of runs and the
// workflow clock when the first run ended.
func runCycle(t *testing.T, f *fixture, in app.CycleInput, setup func(env *testsuite.TestWorkflowEnvironment)) (runs int, firstEnd time.Time) {
	t.Helper()
	runs, firstEnd, _ = runCycleWith(t, f, in, setup, func(env *testsuite.TestWorkflowEnvironment) { Register(env, f.s.acts, f.s.d.TaxPeriods) })
	return runs, firstEnd
}

// runCycleWith is runCycle with the workflows and activities registered by
// register in every run; it also returns the last run's input (its
// Progress is the tally of the runs before it).
func runCycleWith(t *testing.T, f *fixture, in app.CycleInput, setup, register func(env *testsuite.TestWorkflowEnvironment)) (runs int, firstEnd time.Time, last app.CycleInput) {
	t.Helper()
	return runCycleEach(t, in, register, func(env *testsuite.TestWorkflowEnvironment, run int, _ app.CycleInput) {
		if setup != nil && run == 1 {
			setup(env)
		}
	})
}

// runCycleEach is runCycleWith with each called before every run, given
// the run's number and input.
func runCycleEach(t *testing.T, in app.CycleInput, register func(env *testsuite.TestWorkflowEnvironment),
	each func(env *testsuite.TestWorkflowEnvironment, run int, in app.CycleInput)) (runs int, firstEnd time.Time, last app.CycleInput) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	for {
		runs++
		if runs > 100 {
			t.Fatal("cycle workflow did not finish in 100 runs")
		}
		env := newTestEnv(&suite)
		env.SetStartTime(startAt)
		register(env)
		env.OnActivity(app.ActStartNextCycle, mock.Anything, mock.Anything).Return(nil)
		each(env, runs, in)
		env.ExecuteWorkflow(app.CycleWorkflowName, in)
		if !env.IsWorkflowCompleted() {
			t.Fatal("cycle workflow not completed")
		}
		if runs == 1 {
			firstEnd = env.Now()
		}
		err := env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if errors.As(err, &can) {
			in = app.CycleInput{}
			if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return runs, firstEnd, in
	}
}

// windowProbe counts the provider settlements running at once, and the
// settlements started while one started before the latest completion still
// ran (a sliding window refills; a batch drains first).
type windowProbe struct {
	mu                         sync.Mutex
	seq, lastDone, max, refill int
	running                    map[string]int // provider → start seq
}

// probeRunner is an inlineRunner whose settlements the probe watches and
// whose completions it decides, from state, not time: a settlement stays in
// flight (the page follows it like a workflow) until the window is full or
// the page has nothing left to start; then the newest one completes (out of
// start order), one at a time. If the page waits instead (asks about a
// provider twice with nothing started or finished in between) one completes
// too, so a page that drains cannot hang the test; it fails the refill
// check. p-00004's settlement fails.
type probeRunner struct {
	*inlineRunner
	probe             *windowProbe
	window, batch, of int // the page's window and size, and the providers in all

	mu        sync.Mutex
	started   map[int]int     // page → providers started
	releasing bool            // one completion at a time
	asked     map[string]bool // providers asked about since the last start or completion
}

func newProbeRunner(inline *inlineRunner, probe *windowProbe, window, batch, providers int) *probeRunner {
	if batch <= 0 {
		batch = providers
	}
	return &probeRunner{inlineRunner: inline, probe: probe, window: window, batch: batch, of: providers,
		started: map[int]int{}, asked: map[string]bool{}}
}

func pageOf(provider string, batch int) int {
	var n int
	if _, err := fmt.Sscanf(provider, "p-%d", &n); err != nil {
		panic(fmt.Sprintf("probe provider %q is not p-N: %v", provider, err))
	}
	return n / batch
}

func (r *probeRunner) StartProvider(ctx context.Context, in app.ProviderInput) error {
	r.probe.enter(in.ProviderID)
	r.mu.Lock()
	r.started[pageOf(in.ProviderID, r.batch)]++
	clear(r.asked)
	next := r.nextLocked(false)
	r.mu.Unlock()
	if next != "" {
		go r.finish(ctx, app.ProviderInput{CycleID: in.CycleID, ProviderID: next})
	}
	return nil
}

// nextLocked picks the settlement to complete now, if any: none while one
// completes; the newest in flight once the window is full, the page has
// started all of its providers, or the page waits (stuck).
func (r *probeRunner) nextLocked(stuck bool) string {
	r.probe.mu.Lock()
	defer r.probe.mu.Unlock()
	if r.releasing || len(r.probe.running) == 0 {
		return ""
	}
	newest, seq := "", -1
	for p, s := range r.probe.running {
		if s > seq {
			newest, seq = p, s
		}
	}
	page := pageOf(newest, r.batch)
	exhausted := r.started[page] == min(r.batch, r.of-page*r.batch)
	if !stuck && !exhausted && len(r.probe.running) < r.window {
		return ""
	}
	r.releasing = true
	return newest
}

// finish completes one settlement: it leaves the probe before its outcome
// is written (the page starts the next one as soon as it sees one done).
func (r *probeRunner) finish(ctx context.Context, in app.ProviderInput) {
	r.probe.leave(in.ProviderID)
	if in.ProviderID == "p-00004" {
		r.record(in.ProviderID, app.ProviderResult{}, fmt.Errorf("%w: probe: settlement refused", app.ErrProviderFailed))
	} else if err := r.inlineRunner.StartProvider(context.WithoutCancel(ctx), in); err != nil {
		r.record(in.ProviderID, app.ProviderResult{}, fmt.Errorf("%w: %w", app.ErrProviderFailed, err))
	}
	r.mu.Lock()
	r.releasing = false
	clear(r.asked)
	next := r.nextLocked(false)
	r.mu.Unlock()
	if next != "" {
		r.finish(ctx, app.ProviderInput{CycleID: in.CycleID, ProviderID: next})
	}
}

func (r *probeRunner) ProviderOutcome(ctx context.Context, in app.ProviderInput) (bool, app.ProviderResult, error) {
	r.mu.Lock()
	stuck := r.asked[in.ProviderID]
	r.asked[in.ProviderID] = true
	next := ""
	if stuck {
		next = r.nextLocked(true)
	}
	r.mu.Unlock()
	if next != "" {
		go r.finish(ctx, app.ProviderInput{CycleID: in.CycleID, ProviderID: next})
	}
	return r.inlineRunner.ProviderOutcome(ctx, in)
}

func (p *windowProbe) enter(provider string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, started := range p.running {
		if started < p.lastDone {
			p.refill++
			break
		}
	}
	p.seq++
	p.running[provider] = p.seq
	p.max = max(p.max, len(p.running))
}

func (p *windowProbe) leave(provider string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	p.lastDone = p.seq
	delete(p.running, provider)
}

// The settle phase runs at most Window provider settlements at once and
// starts the next one as soon as one completes (no drain until the page
// runs out), whether the providers take one run or several; a failed
// provider is counted and the others still settle.
func TestCycleSettlesWithinWindow(t *testing.T) {
	t.Parallel()
	const providers, window = 10, 3
	tests := []struct {
		name     string
		batch    int
		wantRuns int
	}{
		{"one page", 0, 2},   // BatchSizeDefault: one page, then the empty page
		{"four pages", 4, 4}, // 4+4+2, then the empty page
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			f.seed(t, cycle1.ID, providers)
			probe := &windowProbe{running: map[string]int{}}
			// The real settlement behind a probe that completes them out of
			// start order; p-00004 fails.
			f.s.acts.Page.Runner = newProbeRunner(newInlineRunner(f.s.acts), probe, window, tt.batch, providers)
			runs, _, last := runCycleWith(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, CloseNow: true,
				BatchSize: tt.batch, Window: window}, nil, func(env *testsuite.TestWorkflowEnvironment) { Register(env, f.s.acts, f.s.d.TaxPeriods) })

			if probe.max != window {
				t.Errorf("at most %d settlements in flight, want %d (the window)", probe.max, window)
			}
			if probe.refill == 0 {
				t.Error("no settlement started while ones started before a completion still ran: the window does not slide")
			}
			if runs != tt.wantRuns {
				t.Errorf("runs = %d, want %d", runs, tt.wantRuns)
			}
			if got, want := last.Progress, (app.Progress{Providers: providers, Settled: providers - 1, Failed: 1, Runs: tt.wantRuns - 1}); got != want {
				t.Errorf("progress = %+v, want %+v", got, want)
			}
			if n := f.count(t, `select count(distinct provider_id) from settlement.settlements where status = 'settled'`); n != providers-1 {
				t.Errorf("settled providers = %d, want %d", n, providers-1)
			}
			if b := f.ledger.Balance(domain.PendingAccount("p-00004", cycle1.ID), "CNY"); b.String() != "1033.33" {
				t.Errorf("failed provider's pending = %s, want 1033.33 (left for a re-close)", b)
			}
			// The failed provider keeps the cycle closing (it was marked
			// settled); the cycle's next run settles it and the cycle.
			if st := cycleStatus(t, f); st != domain.CycleClosing {
				t.Fatalf("cycle with a failed provider is %s, want closing", st)
			}
			f.s.acts.Page.Runner = newInlineRunner(f.s.acts)
			runCycle(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, CloseNow: true, BatchSize: tt.batch, Window: window}, nil)
			if b := f.ledger.Balance(domain.PendingAccount("p-00004", cycle1.ID), "CNY"); !b.IsZero() || cycleStatus(t, f) != domain.CycleSettled {
				t.Errorf("after the cycle's next run: p-00004's pending %s, cycle %s; want 0, settled", b, cycleStatus(t, f))
			}
		})
	}
}

// The 45-day cycle: the durable timer runs to the cycle's end plus grace,
// then the close settles every provider, in batches with continue-as-new.
func TestCycleTimerThenCloseSettlesEveryProvider(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.seed(t, cycle1.ID, 5)
	runs, firstEnd := runCycle(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, BatchSize: 2}, nil)

	if firstEnd.Before(cycle1.Closes) {
		t.Fatalf("closed at %s, before the cycle's end plus grace %s", firstEnd, cycle1.Closes)
	}
	if runs != 4 { // 3 batches of ≤2 and the final page
		t.Errorf("runs = %d, want 4 (continue-as-new per batch)", runs)
	}
	if !f.ledger.Closed(cycle1.ID) {
		t.Error("ledger cycle not closed")
	}
	// 6 settlements, each with its commission sweep in the same transaction.
	if got := len(f.ledger.Transactions("settle-" + cycle1.ID + "-")); got != 6 {
		t.Errorf("settlement transactions = %d, want 6", got)
	}
	if n := f.count(t, `select count(*) from settlement.settlements where status = 'settled'`); n != 6 {
		t.Errorf("settled rows = %d, want 6", n)
	}
	// is distinct from: a NULL part makes the sum NULL, and NULL <> gross is never true.
	if n := f.count(t, `select count(*) from settlement.settlements where commission + tax_withheld + net is distinct from gross`); n != 0 {
		t.Errorf("%d rows do not split exactly", n)
	}
	// Each settled row queued its settlement.settled event for payout, once.
	if n := f.count(t, `select count(distinct id) from settlement.outbox where subject like 'settlement.settled.%'`); n != 6 {
		t.Errorf("settlement.settled events queued = %d, want 6", n)
	}
	for i := range 5 {
		p := fmt.Sprintf("p-%05d", i)
		if b := f.ledger.Balance(domain.PendingAccount(p, cycle1.ID), "CNY"); !b.IsZero() {
			t.Errorf("%s pending = %s, want 0", p, b)
		}
	}
	// Each provider's split at its own tier (seed: standard, pro, partner in
	// rotation), worked out by hand: commission = gross × rate, tax = 20 % of
	// the rest (the fake tax service's flat20), net the rest, then the cents
	// left by truncation to the largest remainders.
	tests := []struct {
		provider, currency, tier, commission, tax, net string
	}{
		{"p-00000", "CNY", "standard", "258.33", "155.00", "620.00"}, // 258.3325 / 154.9995 / 619.998
		{"p-00000", "USD", "standard", "2.50", "1.50", "6.01"},       // 10.01: 2.5025 / 1.5015 / 6.006
		{"p-00001", "CNY", "pro", "206.67", "165.33", "661.33"},      // 206.666 / 165.3328 / 661.3312
		{"p-00002", "CNY", "partner", "155.00", "175.67", "702.66"},  // 154.9995 / 175.6661 / 702.6644
		{"p-00003", "CNY", "standard", "258.33", "155.00", "620.00"},
		{"p-00004", "CNY", "pro", "206.67", "165.33", "661.33"},
	}
	wantTotals := map[string]domain.Total{}
	for _, tt := range tests {
		var tier string
		var commission, tax, net decimal.Decimal
		if err := f.s.d.Pool.QueryRow(context.Background(), `select tier, commission, tax_withheld, net from settlement.settlements
			where cycle_id = $1 and provider_id = $2 and currency = $3`, cycle1.ID, tt.provider, tt.currency).Scan(&tier, &commission, &tax, &net); err != nil {
			t.Fatalf("%s %s: %v", tt.provider, tt.currency, err)
		}
		if tier != tt.tier || !commission.Equal(dec(tt.commission)) || !tax.Equal(dec(tt.tax)) || !net.Equal(dec(tt.net)) {
			t.Errorf("%s %s: %s %s / %s / %s, want %s %s / %s / %s", tt.provider, tt.currency, tier, commission, tax, net, tt.tier, tt.commission, tt.tax, tt.net)
		}
		if wc, wt, wn := wantSplit(t, dec(tt.commission).Add(dec(tt.tax)).Add(dec(tt.net)), tt.tier); !wc.Equal(dec(tt.commission)) || !wt.Equal(dec(tt.tax)) || !wn.Equal(dec(tt.net)) {
			t.Errorf("%s %s: wantSplit gives %s / %s / %s, the table %s / %s / %s", tt.provider, tt.currency, wc, wt, wn, tt.commission, tt.tax, tt.net)
		}
		if b := f.ledger.Balance(domain.AvailableAccount(tt.provider), tt.currency); !b.Equal(dec(tt.net)) {
			t.Errorf("%s available = %s %s, want %s", tt.provider, b, tt.currency, tt.net)
		}
		w := wantTotals[tt.currency]
		w.Currency, w.Providers = tt.currency, w.Providers+1
		w.Commission, w.Tax, w.Net = w.Commission.Add(dec(tt.commission)), w.Tax.Add(dec(tt.tax)), w.Net.Add(dec(tt.net))
		w.Gross = w.Commission.Add(w.Tax).Add(w.Net)
		wantTotals[tt.currency] = w
	}
	c, err := f.s.store.GetCycle(context.Background(), cycle1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != domain.CycleSettled || len(c.Totals) != len(wantTotals) {
		t.Fatalf("cycle = %+v", c)
	}
	for _, got := range c.Totals {
		want := wantTotals[got.Currency]
		if got.Providers != want.Providers || !got.Gross.Equal(want.Gross) || !got.Commission.Equal(want.Commission) ||
			!got.Tax.Equal(want.Tax) || !got.Net.Equal(want.Net) {
			t.Errorf("cycle total %+v, want %+v", got, want)
		}
	}
}

// A close request before the cycle's end closes it without waiting.
func TestCloseSignalClosesEarly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.seed(t, cycle1.ID, 2)
	_, firstEnd := runCycle(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes}, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(app.SignalClose, app.CloseSignal{Reason: "ops backfill"}) }, time.Hour)
	})
	if !firstEnd.Before(startAt.Add(2 * time.Hour)) {
		t.Fatalf("closed at %s, want about an hour after %s", firstEnd, startAt)
	}
	if n := f.count(t, `select count(*) from settlement.settlements where status = 'settled'`); n != 3 {
		t.Errorf("settled rows = %d, want 3", n)
	}
	if n := f.count(t, `select count(*) from settlement.cycles where close_reason = 'ops backfill'`); n != 1 {
		t.Error("close reason not recorded")
	}
}

// A hold names a provider as the ledger and every other service spell it:
// "p-00001 " (a space or an invisible character pasted in) answered 200,
// held no one, and p-00001 was settled and paid during its dispute.
func TestHoldRefusesAnIDOutsideTheGrammar(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	for _, id := range []string{"p-00001 ", " p-00001", "p-00001\u200b", "p/00001", strings.Repeat("p", 65)} {
		_, err := f.s.api.HoldProvider(ctx, holdReq(cycle1.ID, id))
		if st := status.Convert(apperr.ToStatus(err)); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "provider_id") {
			t.Errorf("hold of %q: %v, want InvalidArgument naming provider_id", id, err)
		}
		_, err = f.s.api.ReleaseProvider(ctx, &settlementv1.ReleaseProviderRequest{CycleId: cycle1.ID, ProviderId: id})
		if status.Code(apperr.ToStatus(err)) != codes.InvalidArgument {
			t.Errorf("release of %q: %v, want InvalidArgument", id, err)
		}
	}
	if n := f.count(t, `select count(*) from settlement.holds`); n != 0 {
		t.Errorf("%d holds recorded", n)
	}
}

// A held provider stays pending at close and is settled when released.
func TestHeldProviderStaysPending(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.seed(t, cycle1.ID, 3)
	ctx := context.Background()
	if _, err := f.s.api.HoldProvider(ctx, holdReq(cycle1.ID, "p-00001")); err != nil {
		t.Fatal(err)
	}
	runCycle(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, CloseNow: true}, nil)
	if b := f.ledger.Balance(domain.PendingAccount("p-00001", cycle1.ID), "CNY"); b.String() != "1033.33" {
		t.Fatalf("held provider's pending = %s, want 1033.33", b)
	}
	if n := f.count(t, `select count(*) from settlement.settlements where status = 'held'`); n != 1 {
		t.Fatalf("held rows = %d", n)
	}
	if st := cycleStatus(t, f); st != domain.CycleClosing {
		t.Fatalf("cycle with a held provider is %s, want closing", st)
	}
	// The totals' parts add up to the gross: the held provider's is
	// unsettled (it counted in the gross and in no part, unexplained).
	totals := func(want string, settled int32) {
		t.Helper()
		resp, err := f.s.api.GetSettlementCycle(ctx, &settlementv1.GetSettlementCycleRequest{CycleId: cycle1.ID})
		if err != nil || len(resp.SettlementCycle.GetTotals()) == 0 || resp.SettlementCycle.Totals[0].Currency != "CNY" {
			t.Fatalf("cycle: %v, %v", resp, err)
		}
		tot := resp.SettlementCycle.Totals[0]
		parts := decimal.Zero
		for _, p := range []string{tot.Commission, tot.TaxWithheld, tot.Net, tot.GrossUnsettled} {
			parts = parts.Add(decimal.RequireFromString(p))
		}
		if tot.GrossUnsettled != want || tot.ProvidersSettled != settled || tot.Providers != 3 || !parts.Equal(decimal.RequireFromString(tot.Gross)) {
			t.Fatalf("totals %v: want gross_unsettled %s, %d of 3 providers settled, the parts adding up to the gross", tot, want, settled)
		}
	}
	totals("1033.33", 2)
	// Release: the provider child runs again (here in the test environment).
	releaseAndSettle(t, f, "p-00001")
	totals("0.00", 3)
	if b := f.ledger.Balance(domain.PendingAccount("p-00001", cycle1.ID), "CNY"); !b.IsZero() {
		t.Fatalf("released provider's pending = %s, want 0", b)
	}
}

// A cycle is split at the tier its provider had when the cycle's gross
// was snapshotted. Read again at each attempt, a tier changed while the
// provider was held (or before a retry) split it at the new rate, and
// against the real tax service a retry asked for another rate on the
// withholding it had recorded and was refused for good.
func TestTierFixedAtTheSnapshot(t *testing.T) {
	t.Parallel()
	f := heldThroughTheClose(t)
	ctx := context.Background()
	if _, err := f.s.d.Pool.Exec(ctx, `update settlement.providers set tier = 'standard', version = version + 1 where provider_id = 'p-00001'`); err != nil {
		t.Fatal(err)
	}
	releaseAndSettle(t, f, "p-00001")
	var tier string
	var commission decimal.Decimal
	if err := f.s.d.Pool.QueryRow(ctx, `select tier, commission from settlement.settlements
		where cycle_id = $1 and provider_id = 'p-00001' and currency = 'CNY'`, cycle1.ID).Scan(&tier, &commission); err != nil {
		t.Fatal(err)
	}
	if wc, _, _ := wantSplit(t, decimal.RequireFromString("1033.33"), "pro"); tier != "pro" || !commission.Equal(wc) {
		t.Fatalf("released after a change to standard: tier %s, commission %s; want pro, %s (the tier at the snapshot)", tier, commission, wc)
	}
	if n := f.count(t, `select count(*) from settlement.settlements where cycle_id = $1 and tier = ''`, cycle1.ID); n != 0 {
		t.Fatalf("%d rows snapshotted without a tier", n)
	}
}

// Tier rates are configurable within the platform's bounds; a rate outside
// them is refused when the service starts.
func TestCommissionOutsideBoundsRefused(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	d := svc.Deps{Pool: pool, Log: slog.New(slog.DiscardHandler), Clock: clock.NewManual(startAt), Calendar: cal}
	tests := []struct {
		give    string // pro tier rate
		wantErr bool
	}{{"0.20", false}, {"0.15", false}, {"0.25", false}, {"0.30", true}, {"0.10", true}}
	for _, tt := range tests {
		p := split.DefaultCommission()
		p.Rates[split.TierPro] = decimal.RequireFromString(tt.give)
		_, err := New(context.Background(), d, tc, "q", WithCommission(p))
		if (err != nil) != tt.wantErr {
			t.Errorf("pro at %s: err %v, want error %v", tt.give, err, tt.wantErr)
		}
	}
}

// The commission rate is the tier's at the snapshot, kept with it: worked
// out again at each attempt, a worker with other GPUBILL_COMMISSION_RATES
// (a rolling deploy during a close) split the provider at another rate,
// and against the real tax service a retry asked for another rate on the
// withholding it had recorded and was refused for good, the net already
// in available and no statement written.
func TestCommissionRateFixedAtTheSnapshot(t *testing.T) {
	t.Parallel()
	f := heldThroughTheClose(t)
	ctx := context.Background()
	f.s.commission.Rates[split.TierPro] = decimal.RequireFromString("0.15") // the rates the worker now runs with
	releaseAndSettle(t, f, "p-00001")
	var rate, commission decimal.Decimal
	if err := f.s.d.Pool.QueryRow(ctx, `select commission_rate, commission from settlement.settlements
		where cycle_id = $1 and provider_id = 'p-00001' and currency = 'CNY'`, cycle1.ID).Scan(&rate, &commission); err != nil {
		t.Fatal(err)
	}
	if wc, _, _ := wantSplit(t, decimal.RequireFromString("1033.33"), "pro"); !rate.Equal(decimal.RequireFromString("0.20")) || !commission.Equal(wc) {
		t.Fatalf("settled after the rates changed: rate %s, commission %s; want 0.20, %s (the rate at the snapshot)", rate, commission, wc)
	}
}

// heldThroughTheClose is a fixture whose cycle1 closed with p-00001 (pro)
// held: its gross snapshotted, its settlement waiting for a release.
func heldThroughTheClose(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t, nil)
	f.seed(t, cycle1.ID, 3) // p-00001: pro
	if _, err := f.s.api.HoldProvider(context.Background(), holdReq(cycle1.ID, "p-00001")); err != nil {
		t.Fatal(err)
	}
	runCycle(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, CloseNow: true}, nil)
	return f
}
