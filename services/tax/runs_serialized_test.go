package tax

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/tax/internal/app"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// hookedStore runs a test's hooks before some of the store's calls, to
// hold one run at a step while another goes on.
type hookedStore struct {
	app.Store
	beforeRecordRun         func(period string)
	beforePendingBefore     func(period string)
	beforeReversedUnplanned func(period string)
}

func (h *hookedStore) RecordRun(ctx context.Context, f app.Fence, period string, started, completed time.Time, remittances, notPosted int) error {
	if h.beforeRecordRun != nil {
		h.beforeRecordRun(period)
	}
	return h.Store.RecordRun(ctx, f, period, started, completed, remittances, notPosted)
}

func (h *hookedStore) PendingBefore(ctx context.Context, period string) ([]domain.Remittance, error) {
	if h.beforePendingBefore != nil {
		h.beforePendingBefore(period)
	}
	return h.Store.PendingBefore(ctx, period)
}

func (h *hookedStore) ReversedUnplanned(ctx context.Context, period string) ([]string, error) {
	if h.beforeReversedUnplanned != nil {
		h.beforeReversedUnplanned(period)
	}
	return h.Store.ReversedUnplanned(ctx, period)
}

// sideBySideWait is how long a test holding one run waits for another to
// get past it: with runs serialized the other never does.
const sideBySideWait = 2 * time.Second

func appRemIDs(rems []domain.Remittance) []string {
	out := make([]string, 0, len(rems))
	for _, r := range rems {
		out = append(out, r.ID+" "+r.Amount.StringFixed(2)+" "+string(r.Status))
	}
	return out
}

// Two first runs of a month where nothing was owed (the schedule's and
// finance's POST, a retry) plan once: the month is filed by the first
// plan. The run is recorded after its posts, so a second run planning
// before the first recorded it found the month unfiled and filed under it
// what the ledger had posted since: February answered empty to one caller
// and 150.00 to the other.
func TestRemitTaxRunsOfAMonthPlanOnce(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	w := record(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00 on 20 February, not posted at February's first plan
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	held, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	s.app.Store = &hookedStore{Store: s.app.Store, beforeRecordRun: func(string) {
		if first.CompareAndSwap(false, true) {
			// The first run has planned nothing; the ledger posts k1 now.
			l.settle("k1", w.Jurisdiction, w.Currency, w.TaxWithheld)
			close(held)
			<-release
		}
	}}
	var a, b app.Remitted
	var errA, errB error
	aDone, bDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(aDone); a, errA = s.app.RemitTax(context.Background(), "2026-02", 10) }()
	<-held
	go func() { defer close(bDone); b, errB = s.app.RemitTax(context.Background(), "2026-02", 10) }()
	select {
	case <-bDone:
	case <-time.After(sideBySideWait):
	}
	close(release)
	<-aDone
	<-bDone
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if len(a.Remittances) != 0 || len(b.Remittances) != 0 || len(l.postedKeys()) != 0 || b.Outstanding != 1 {
		t.Fatalf("February's two runs answered %v and %v (outstanding %d), posted %v; want one plan: February filed with nothing, "+
			"k1 (posted after it) outstanding for March", appRemIDs(a.Remittances), appRemIDs(b.Remittances), b.Outstanding, l.postedKeys())
	}
	clk.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
	if got := remIDs(remitted(t, s, "2026-03").Remittances); !slices.Equal(got, []string{"rem-2026-03-CN-CNY 150.00 remitted"}) {
		t.Fatalf("March = %v; want k1's 150.00", got)
	}
	wantPostedOnce(t, s, l, []string{"150.00"})
}

// A reversal check marking an earlier month's remittance reversed while a
// run plans its own month leaves the reversed one's tax to its month: the
// run took January's withholding given back into February's remittance
// (rem-2026-02-CN-CNY 310.00), and January's reversed remittance was never
// remitted again (its month had nothing left to plan).
func TestReversalCheckDuringARunLeavesTheReversedMonthItsTax(t *testing.T) {
	t.Parallel()
	s, l, clk := newTax(t)
	clk.Set(time.Date(2026, 1, 20, 0, 0, 0, 0, time.UTC))
	compute(t, s, "p-1", "1000.00", "0.25", "individual", "k1") // 150.00 in January
	clk.Set(time.Date(2026, 2, 2, 0, 0, 0, 0, time.UTC))
	remitted(t, s, "2026-01")
	clk.Set(time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC))
	compute(t, s, "p-2", "1000.00", "0.20", "individual", "k2") // 160.00 in February
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))

	runHeld, runGoes, runDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var heldOnce, goesOnce sync.Once
	s.app.Store = &hookedStore{Store: s.app.Store,
		// The run has found no reversal and planned no earlier month: the
		// ledger reverses January's remittance now.
		beforePendingBefore: func(period string) {
			if period != "2026-02" {
				return
			}
			heldOnce.Do(func() {
				l.reverseTx(t, "rem-2026-01-CN-CNY", "tx-reversal")
				close(runHeld)
				select {
				case <-runGoes:
				case <-time.After(sideBySideWait):
				}
			})
		},
		// The check has marked January reversed: the run goes on, then the
		// check.
		beforeReversedUnplanned: func(period string) {
			if period != "2026-03" {
				return
			}
			goesOnce.Do(func() { close(runGoes) })
			select {
			case <-runDone:
			case <-time.After(sideBySideWait):
			}
		},
	}
	var errRun, errCheck error
	checkDone := make(chan struct{})
	go func() { defer close(runDone); _, errRun = s.app.RemitTax(context.Background(), "2026-02", 0) }()
	<-runHeld
	go func() { defer close(checkDone); _, errCheck = s.app.RemitReversed(context.Background()) }()
	<-runDone
	<-checkDone
	if errRun != nil || errCheck != nil {
		t.Fatal(errRun, errCheck)
	}
	if _, err := s.app.RemitReversed(context.Background()); err != nil {
		t.Fatal(err)
	}
	var held []string
	rows, err := s.d.Pool.Query(context.Background(), `select w.idempotency_key || ' ' || coalesce(r.remittance_id || ' ' || r.status, 'none')
		from tax.withholdings w left join tax.remittances r on r.remittance_id = w.remittance_id order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var x string
		if err := rows.Scan(&x); err != nil {
			t.Fatal(err)
		}
		held = append(held, x)
	}
	if want := []string{"k1 rem-2026-01-CN-CNY-2 remitted", "k2 rem-2026-02-CN-CNY remitted"}; !slices.Equal(held, want) {
		t.Fatalf("withholdings held by %v, posted %v; want %v: January's tax remitted again under January", held, l.postedKeys(), want)
	}
	wantPostedOnce(t, s, l, []string{"150.00", "160.00", "150.00"})
}
