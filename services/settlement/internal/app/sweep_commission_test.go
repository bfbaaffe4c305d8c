package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// unsweptStore is settlement's table of unswept statements as the sweep
// reads it: oldest first (settled_at, cycle, provider, currency), at most
// limit a call; a recorded sweep leaves the list. It keeps the sweep's
// position as the database does: taken by each run, moved by the run that
// holds it.
type unsweptStore struct {
	Store
	rows  []domain.Unswept
	swept map[string]string // sweep key → sweep transaction id
	reads int
	run   int64
	pos   *domain.Unswept
}

func (s *unsweptStore) TakeSweepPosition(context.Context) (int64, *domain.Unswept, error) {
	s.run++
	return s.run, s.pos, nil
}

func (s *unsweptStore) MoveSweepPosition(_ context.Context, run int64, at *domain.Unswept) (bool, error) {
	if run != s.run {
		return false, nil
	}
	s.pos = at
	return true, nil
}

func unsweptKey(u domain.Unswept) string { return domain.SweepKey(u.CycleID, u.ProviderID, u.Currency) }

func unsweptOrder(a, b domain.Unswept) int {
	return cmp.Or(a.SettledAt.Compare(b.SettledAt), cmp.Compare(a.CycleID, b.CycleID),
		cmp.Compare(a.ProviderID, b.ProviderID), cmp.Compare(a.Currency, b.Currency))
}

func (s *unsweptStore) UnsweptCommission(_ context.Context, after, through *domain.Unswept, limit int) ([]domain.Unswept, error) {
	s.reads++
	rows := slices.Clone(s.rows)
	slices.SortFunc(rows, unsweptOrder)
	var out []domain.Unswept
	for _, u := range rows {
		if _, ok := s.swept[unsweptKey(u)]; ok {
			continue
		}
		if after != nil && unsweptOrder(u, *after) <= 0 {
			continue
		}
		if through != nil && unsweptOrder(u, *through) > 0 {
			break
		}
		if len(out) == limit {
			break
		}
		out = append(out, u)
	}
	return out, nil
}

func (s *unsweptStore) RecordSweep(_ context.Context, u domain.Unswept, sweepID string) error {
	if _, ok := s.swept[unsweptKey(u)]; !ok {
		s.swept[unsweptKey(u)] = sweepID
	}
	return nil
}

// sweepLedger answers a sweep as the ledger does: refused (Unfunded) in a
// currency whose bank:client cannot fund it, Conflict for a key holding
// another body, the refusal set for a key, else posted under its key.
type sweepLedger struct {
	Ledger
	short     map[string]bool  // currency whose bank:client is short
	conflicts map[string]bool  // sweep key holding another body
	refused   map[string]error // sweep key → the ledger's other refusal
	tried     map[string]int   // sweep key → calls
	each      func()           // called on every call (a clock's step)
}

func (l *sweepLedger) CreateTransaction(_ context.Context, tx LedgerTx) (string, error) {
	l.tried[tx.Key]++
	if l.each != nil {
		l.each()
	}
	switch {
	case l.conflicts[tx.Key]:
		return "", Conflict(fmt.Errorf("idempotency key %s holds another transaction", tx.Key))
	case l.short[tx.Currency.Code]:
		return "", Unfunded(fmt.Errorf("bank:client would go negative in %s: %s", tx.Currency.Code, tx.Key))
	case l.refused[tx.Key] != nil:
		return "", l.refused[tx.Key]
	}
	return "tx-" + tx.Key, nil
}

func newSweepFixture(rows []domain.Unswept, short ...string) (*Steps, *unsweptStore, *sweepLedger) {
	st := &unsweptStore{rows: rows, swept: map[string]string{}}
	l := &sweepLedger{short: map[string]bool{}, conflicts: map[string]bool{}, refused: map[string]error{}, tried: map[string]int{}}
	for _, c := range short {
		l.short[c] = true
	}
	return &Steps{Store: st, Ledger: l, Clock: clock.NewManual(t0), Log: slog.New(slog.DiscardHandler)}, st, l
}

func unsweptRow(provider, currency string, settled time.Time) domain.Unswept {
	return domain.Unswept{CycleID: "2026-11", ProviderID: provider, Currency: currency,
		Commission: decimal.RequireFromString("2.50"), SettledAt: settled}
}

// 500 USD sweeps bank:client cannot fund, older than a CNY one it can: the
// CNY sweep is swept in the first run, not left behind the USD ones for
// ever (each run read the same oldest 500 and stopped there).
func TestSweepReachesAFundableCurrencyBehindDeferredOnes(t *testing.T) {
	var rows []domain.Unswept
	for i := range 500 {
		rows = append(rows, unsweptRow(fmt.Sprintf("p-%05d", i), "USD", t0.Add(time.Duration(i)*time.Second)))
	}
	cny := unsweptRow("p-cny", "CNY", t0.Add(time.Hour))
	rows = append(rows, cny)
	steps, st, l := newSweepFixture(rows, "USD")
	for run := 1; run <= 3; run++ {
		got, err := steps.SweepCommission(context.Background())
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		want := SweepSummary{Deferred: 500}
		if run == 1 {
			want.Swept = 1
		}
		if got != want {
			t.Errorf("run %d: %+v, want %+v (CNY tried %d times)", run, got, want, l.tried[unsweptKey(cny)])
		}
	}
	if id := st.swept[unsweptKey(cny)]; id != "tx-"+unsweptKey(cny) {
		t.Errorf("CNY statement's sweep %q, want tx-%s", id, unsweptKey(cny))
	}
	if n := l.tried[unsweptKey(cny)]; n != 1 {
		t.Errorf("CNY sweep posted %d times, want once", n)
	}
	if n := l.tried[unsweptKey(rows[0])]; n != 3 {
		t.Errorf("oldest USD sweep tried %d times in 3 runs, want 3", n)
	}
}

// The oldest sweep's key holds another body (Conflict): the run goes on to
// the CNY sweep behind it instead of failing there every hour.
func TestSweepGoesPastAConflictingSweep(t *testing.T) {
	old := unsweptRow("p-old", "USD", t0)
	fresh := unsweptRow("p-new", "CNY", t0.Add(time.Minute))
	steps, st, l := newSweepFixture([]domain.Unswept{old, fresh})
	l.conflicts[unsweptKey(old)] = true
	for run := 1; run <= 2; run++ {
		counted := testutil.ToFloat64(sweepConflicts.WithLabelValues("USD"))
		got, err := steps.SweepCommission(context.Background())
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		want := SweepSummary{Conflicts: 1}
		if run == 1 {
			want.Swept = 1
		}
		if got != want {
			t.Errorf("run %d: %+v, want %+v", run, got, want)
		}
		if c := testutil.ToFloat64(sweepConflicts.WithLabelValues("USD")); c != counted+1 {
			t.Errorf("run %d: gpubill_settlement_commission_sweep_conflicts_total{currency=\"USD\"} went %v → %v, want one more", run, counted, c)
		}
	}
	if id := st.swept[unsweptKey(fresh)]; id == "" {
		t.Errorf("p-new never swept (tried %d times)", l.tried[unsweptKey(fresh)])
	}
	if id, ok := st.swept[unsweptKey(old)]; ok {
		t.Errorf("conflicting p-old recorded as swept by %q", id)
	}
	if n := l.tried[unsweptKey(old)]; n != 2 {
		t.Errorf("p-old tried %d times in 2 runs, want 2 (tried again each run)", n)
	}
}

// A run pages through a backlog of several pages: every statement is tried
// once per run, none twice, and each page read starts after the last.
func TestSweepPagesTheWholeBacklogOnce(t *testing.T) {
	var rows []domain.Unswept
	for i := range 2*unsweptPageSize + 7 {
		// Several statements settled at the same instant: the keyset's
		// later columns order them.
		rows = append(rows, unsweptRow(fmt.Sprintf("p-%05d", i), []string{"USD", "CNY"}[i%2], t0.Add(time.Duration(i/3)*time.Second)))
	}
	steps, st, l := newSweepFixture(rows, "USD")
	got, err := steps.SweepCommission(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	usd := (len(rows) + 1) / 2
	if want := (SweepSummary{Swept: len(rows) - usd, Deferred: usd}); got != want {
		t.Errorf("run: %+v, want %+v", got, want)
	}
	for _, u := range rows {
		if n := l.tried[unsweptKey(u)]; n != 1 {
			t.Fatalf("%s tried %d times in one run, want once", unsweptKey(u), n)
		}
	}
	if st.reads != 3 {
		t.Errorf("%d reads of the backlog, want 3 pages", st.reads)
	}
}

// A run starts no sweep past sweepRunMax (within its activity's
// StartToCloseTimeout): it returns what it did, Unfinished, without an error.
func TestSweepStopsWithinItsTimeBound(t *testing.T) {
	if sweepRunMax >= sweepActivity.StartToCloseTimeout {
		t.Fatalf("sweepRunMax %v is not within the activity's StartToCloseTimeout %v", sweepRunMax, sweepActivity.StartToCloseTimeout)
	}
	var rows []domain.Unswept
	for i := range 600 {
		rows = append(rows, unsweptRow(fmt.Sprintf("p-%05d", i), "USD", t0.Add(time.Duration(i)*time.Second)))
	}
	steps, _, l := newSweepFixture(rows, "USD")
	c := steps.Clock.(*clock.Manual)
	l.each = func() { c.Advance(time.Second) } // each refusal takes a second
	got, err := steps.SweepCommission(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := int(sweepRunMax / time.Second)
	if want := (SweepSummary{Deferred: n, Unfinished: true}); got != want {
		t.Errorf("run: %+v, want %+v", got, want)
	}
	if k := unsweptKey(rows[n]); l.tried[k] != 0 {
		t.Errorf("%s tried after the run's time ran out", k)
	}
}

// A backlog larger than one run's budget: the next run resumes after the
// last statement the run before tried, not from the oldest again, and wraps
// around to the oldest once it reaches the tail, so every unswept statement
// is tried within a bounded number of runs. Before, every run tried the
// same oldest sweepRunMax-worth and the tail was never reached.
func TestSweepRunResumesWhereTheLastStopped(t *testing.T) {
	n := int(sweepRunMax / time.Second) // statements one run tries
	var rows []domain.Unswept
	for i := range n + n/2 {
		rows = append(rows, unsweptRow(fmt.Sprintf("p-%05d", i), "USD", t0.Add(time.Duration(i)*time.Second)))
	}
	steps, _, l := newSweepFixture(rows, "USD")
	c := steps.Clock.(*clock.Manual)
	l.each = func() { c.Advance(time.Second) } // each refusal takes a second
	for run := 1; run <= 2; run++ {
		got, err := steps.SweepCommission(context.Background())
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if want := (SweepSummary{Deferred: n, Unfinished: true}); got != want {
			t.Errorf("run %d: %+v, want %+v", run, got, want)
		}
	}
	var never []string
	for _, u := range rows {
		if l.tried[unsweptKey(u)] == 0 {
			never = append(never, u.ProviderID)
		}
	}
	if len(never) > 0 {
		t.Fatalf("after 2 runs of %d over %d statements, %d never tried (first %s)", n, len(rows), len(never), never[0])
	}
	// Run 2 went from the tail round to the oldest: rows [n, len) then
	// [0, n/2), each once; run 3 goes on after those.
	for i, u := range rows {
		want := 1
		if i < n/2 {
			want = 2
		}
		if got := l.tried[unsweptKey(u)]; got != want {
			t.Fatalf("%s tried %d times in 2 runs, want %d", u.ProviderID, got, want)
		}
	}
	clear(l.tried)
	if _, err := steps.SweepCommission(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k := unsweptKey(rows[n/2]); l.tried[k] != 1 {
		t.Errorf("run 3 did not start at %s, after where run 2 stopped (tried %v)", rows[n/2].ProviderID, l.tried[k])
	}
}

// A run that starts from a kept position and reaches the tail wraps round
// and ends where it began: each statement tried once, the run finished. A
// position whose statement left the backlog meanwhile (swept) does not stop
// it.
func TestSweepRunWrapsRoundOnceAndEnds(t *testing.T) {
	n := int(sweepRunMax / time.Second)
	var rows []domain.Unswept
	for i := range n + 10 {
		rows = append(rows, unsweptRow(fmt.Sprintf("p-%05d", i), "USD", t0.Add(time.Duration(i)*time.Second)))
	}
	steps, st, l := newSweepFixture(rows, "USD")
	c := steps.Clock.(*clock.Manual)
	l.each = func() { c.Advance(time.Second) }
	if got, err := steps.SweepCommission(context.Background()); err != nil || !got.Unfinished {
		t.Fatalf("run 1: %+v, %v; want unfinished", got, err)
	}
	// The statement the run stopped after is swept by hand meanwhile, and
	// bank:client can fund USD again.
	st.swept[unsweptKey(rows[n-1])] = "tx-by-hand"
	delete(l.short, "USD")
	clear(l.tried)
	l.each = nil // this run has time for all of them
	got, err := steps.SweepCommission(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (SweepSummary{Swept: len(rows) - 1}); got != want {
		t.Errorf("run 2: %+v, want %+v", got, want)
	}
	for i, u := range rows {
		want := 1
		if i == n-1 {
			want = 0
		}
		if got := l.tried[unsweptKey(u)]; got != want {
			t.Errorf("%s tried %d times in run 2, want %d", u.ProviderID, got, want)
		}
	}
}

// An error that is neither a refusal nor a conflict (the ledger
// unavailable) ends the run with it, to be retried.
func TestSweepEndsOnALedgerFailure(t *testing.T) {
	rows := []domain.Unswept{unsweptRow("p-a", "CNY", t0), unsweptRow("p-b", "CNY", t0.Add(time.Second))}
	steps, st, l := newSweepFixture(rows)
	steps.Ledger = failingLedger{l}
	if _, err := steps.SweepCommission(context.Background()); err == nil || IsRejected(err) {
		t.Fatalf("run over an unavailable ledger: %v, want a retryable error", err)
	}
	if len(st.swept) != 0 {
		t.Errorf("recorded %v with the ledger unavailable", st.swept)
	}
}

type failingLedger struct{ *sweepLedger }

func (failingLedger) CreateTransaction(context.Context, LedgerTx) (string, error) {
	return "", errors.New("ledger unavailable")
}

// A sweep the ledger refuses for a reason other than bank:client's funding
// (settlement's token without its role, a posting refused on another
// field, a currency settlement does not know) is Refused, not Deferred:
// counted by currency and code and logged, each run, the run going on to
// the sweeps behind it. It once counted as Deferred, which reads as
// bank:client short.
func TestSweepCountsOtherRefusalsApartFromDeferrals(t *testing.T) {
	denied := unsweptRow("p-denied", "USD", t0)
	invalid := unsweptRow("p-invalid", "USD", t0.Add(time.Second))
	short := unsweptRow("p-short", "USD", t0.Add(2*time.Second))
	odd := unsweptRow("p-odd", "XXQ", t0.Add(3*time.Second))
	fresh := unsweptRow("p-new", "CNY", t0.Add(time.Minute))
	steps, st, l := newSweepFixture([]domain.Unswept{denied, invalid, short, odd, fresh})
	l.refused[unsweptKey(denied)] = RejectedAs("PermissionDenied", errors.New("create transaction: rpc error: code = PermissionDenied desc = no role"))
	l.refused[unsweptKey(invalid)] = RejectedAs("InvalidArgument", errors.New("create transaction: rpc error: code = InvalidArgument desc = metadata: bad kind"))
	l.refused[unsweptKey(short)] = Unfunded(errors.New("bank:client would go negative in USD"))
	var logs logBuffer
	steps.Log = slog.New(slog.NewTextHandler(&logs, nil))
	metric := func(cur, code string) float64 { return testutil.ToFloat64(sweepRefused.WithLabelValues(cur, code)) }
	for run := 1; run <= 2; run++ {
		before := [3]float64{metric("USD", "PermissionDenied"), metric("USD", "InvalidArgument"), metric("XXQ", RefusedUnknownCurrency)}
		got, err := steps.SweepCommission(context.Background())
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		want := SweepSummary{Deferred: 1, Refused: 3}
		if run == 1 {
			want.Swept = 1
		}
		if got != want {
			t.Errorf("run %d: %+v, want %+v", run, got, want)
		}
		after := [3]float64{metric("USD", "PermissionDenied"), metric("USD", "InvalidArgument"), metric("XXQ", RefusedUnknownCurrency)}
		for i, name := range []string{`{currency="USD",code="PermissionDenied"}`, `{currency="USD",code="InvalidArgument"}`, `{currency="XXQ",code="UnknownCurrency"}`} {
			if after[i] != before[i]+1 {
				t.Errorf("run %d: gpubill_settlement_commission_sweep_refused_total%s went %v → %v, want one more", run, name, before[i], after[i])
			}
		}
		if c := metric("USD", "Unfunded"); c != 0 {
			t.Errorf("run %d: the bank:client shortfall counted as refused (%v)", run, c)
		}
	}
	for _, want := range []string{"level=ERROR", "cycle=2026-11", "provider=p-denied", "currency=USD", "commission=2.5",
		"code=PermissionDenied", "no role", "provider=p-invalid", "metadata: bad kind", "provider=p-odd", "code=UnknownCurrency"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "provider=p-short") {
		t.Errorf("the bank:client shortfall logged as a refusal:\n%s", logs.String())
	}
	if _, ok := st.swept[unsweptKey(fresh)]; !ok {
		t.Errorf("p-new not swept behind the refused sweeps")
	}
	for _, u := range []domain.Unswept{denied, invalid, short, odd} {
		if id, ok := st.swept[unsweptKey(u)]; ok {
			t.Errorf("%s recorded as swept by %q", u.ProviderID, id)
		}
	}
}

type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
