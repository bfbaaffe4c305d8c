package pricingstack_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/pricing"
)

// failOnce fails the named point once, on its nth call, and counts the
// calls and the failures it injected.
type failOnce struct {
	point        string
	nth          int32
	calls, fired atomic.Int32
}

func (f *failOnce) hook(p string) error {
	if p == f.point && f.calls.Add(1) == f.nth {
		f.fired.Add(1)
		return errors.New("injected failure at " + p)
	}
	return nil
}

// waitFiredAndRetried waits until the fault fired exactly once and the
// rating went through the same point again (the redelivered batch): a fault
// that never fired proves nothing.
func (f *failOnce) waitFiredAndRetried(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, func() bool { return f.calls.Load() > f.nth }, "%s reached again after the injected failure", f.point)
	if got := f.fired.Load(); got != 1 {
		t.Fatalf("fault at %s fired %d times, want 1", f.point, got)
	}
}

func (s *stack) ingest(t *testing.T, evs []*meteringv1.UsageEventInput, chunk int) (accepted, dups int) {
	t.Helper()
	for len(evs) > 0 {
		n := min(chunk, len(evs))
		res, err := s.metering.Ingest(context.Background(), &meteringv1.IngestUsageEventsRequest{Events: evs[:n]})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Rejected) > 0 {
			t.Fatalf("rejected: %v", res.Rejected[0])
		}
		accepted, dups = accepted+int(res.Accepted), dups+int(res.Duplicates)
		evs = evs[n:]
	}
	return accepted, dups
}

func (s *stack) ratedEvents(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.deps.Pool.QueryRow(context.Background(), `select coalesce(sum(cardinality(event_ids)), 0) from pricing.charges`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// onceLease is one lease of the exactly-once workload and the GPU-seconds
// it used in total.
type onceLease struct {
	id, provider, renter string
	secs                 int64
}

// onceUsage is 30 leases of 9 events each, durations chosen so per-event
// rounding would drift, interleaved so each message mixes leases.
func onceUsage() ([]*onceLease, []*meteringv1.UsageEventInput) {
	var leases []*onceLease
	var all []*meteringv1.UsageEventInput
	base := now.Add(-72 * time.Hour)
	durations := []time.Duration{30 * time.Minute, 17*time.Minute + 13*time.Second, 30 * time.Minute, 90 * time.Second}
	for i := 0; i < 30; i++ {
		l := &onceLease{id: fmt.Sprintf("lease-%02d", i), provider: fmt.Sprintf("p-%03d", i%3), renter: fmt.Sprintf("r-%03d", i%2)}
		leases = append(leases, l)
		at := base
		for j := 0; j < 9; j++ {
			d := durations[(i+j)%len(durations)]
			all = append(all, usage(fmt.Sprintf("evt-%02d-%d", i, j), l.id, l.provider, l.renter, at, d))
			l.secs += int64(d / time.Second)
			at = at.Add(d)
		}
	}
	mixed := make([]*meteringv1.UsageEventInput, 0, len(all))
	for j := 0; j < 9; j++ {
		for i := 0; i < 30; i++ {
			mixed = append(mixed, all[i*9+j])
		}
	}
	return leases, mixed
}

func TestExactlyOnceMeteringToPricing(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.parties(t, 3, 2, "CNY")
	s.card(t, "CNY", "0.01")
	run(t, s.metering)
	leases, mixed := onceUsage()
	half := len(mixed) / 2

	// Phase 1: the first rating transaction fails once (rolled back, redelivered).
	p1 := s.pricing
	beforeCommit := &failOnce{point: "before-commit", nth: 1}
	p1.SetFailPoint(beforeCommit.hook)
	stop1 := run(t, p1)
	if acc, _ := s.ingest(t, mixed[:half], 20); acc != half {
		t.Fatalf("accepted %d, want %d", acc, half)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return s.ratedEvents(t) == half }, "first half rated")
	beforeCommit.waitFiredAndRetried(t)
	stop1()

	// While pricing is down: the second half, and the first half again.
	if acc, dups := s.ingest(t, mixed, 20); acc != len(mixed)-half || dups != half {
		t.Fatalf("second send: accepted %d duplicates %d", acc, dups)
	}

	// Phase 2: a restarted pricing; one batch commits but its ack is lost.
	p2, err := pricing.New(context.Background(), s.deps)
	if err != nil {
		t.Fatal(err)
	}
	afterCommit := &failOnce{point: "after-commit", nth: 1}
	p2.SetFailPoint(afterCommit.hook)
	run(t, p2)
	afterCommit.waitFiredAndRetried(t)
	s.checkChargedOnce(t, leases, len(mixed))
}

// checkChargedOnce waits until events usage events are rated and pricing's
// outbox is relayed, then checks what the ledger will post: every event
// charged once, every charge's lines explaining it (summing to its exact
// amount, each naming one of its events), and per lease, billed ==
// round(exact) in the database and on the wire.
func (s *stack) checkChargedOnce(t *testing.T, leases []*onceLease, events int) {
	t.Helper()
	ctx := context.Background()
	testkit.Eventually(t, 20*time.Second, func() bool { return s.ratedEvents(t) == events }, "all rated")
	testkit.Eventually(t, 10*time.Second, func() bool {
		var n int
		if err := s.deps.Pool.QueryRow(ctx, `select count(*) from pricing.outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, "outbox relayed")

	// Every event charged once (ratedEvents counts with repeats).
	var distinct int
	if err := s.deps.Pool.QueryRow(ctx, `select count(distinct e) from pricing.charges, unnest(event_ids) e`).Scan(&distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != events {
		t.Fatalf("%d distinct events charged, want %d", distinct, events)
	}
	// Every charge explains itself: its stored lines sum to its exact amount.
	var unexplained int
	if err := s.deps.Pool.QueryRow(ctx, `select count(*) from pricing.charges c
		where jsonb_array_length(c.lines) = 0
		   or c.exact_amount <> (select sum((l->>'amount')::numeric) from jsonb_array_elements(c.lines) l)`).Scan(&unexplained); err != nil {
		t.Fatal(err)
	}
	if unexplained != 0 {
		t.Fatalf("%d charges whose lines do not sum to their exact amount", unexplained)
	}
	// ... and every stored line names a usage event of its charge.
	var unnamed int
	if err := s.deps.Pool.QueryRow(ctx, `select count(*) from pricing.charges c, jsonb_array_elements(c.lines) l
		where coalesce(l->>'event_id', '') = '' or not (l->>'event_id' = any(c.event_ids))`).Scan(&unnamed); err != nil {
		t.Fatal(err)
	}
	if unnamed != 0 {
		t.Fatalf("%d stored charge lines without an event_id of their charge", unnamed)
	}
	wire := chargesOnWire(t, s.js.JS)
	for _, l := range leases {
		exact := decimal.NewFromInt(l.secs).Mul(decimal.RequireFromString("0.01")).Div(decimal.NewFromInt(3600))
		want := decimal.NewFromInt(l.secs).Mul(decimal.RequireFromString("0.01")).DivRound(decimal.NewFromInt(3600), 2)
		var billed decimal.Decimal
		if err := s.deps.Pool.QueryRow(ctx, `select coalesce(sum(amount), 0) from pricing.charges where lease_id = $1`, l.id).Scan(&billed); err != nil {
			t.Fatal(err)
		}
		if !billed.Equal(want) || !wire[l.id].Equal(want) {
			t.Errorf("%s: billed %s in db, %s on the wire; want round(%s) = %s", l.id, billed, wire[l.id], exact.StringFixed(6), want)
		}
	}
}

// chargesOnWire sums the amounts of every charges.rated message per lease,
// counting each charge id once; it fails the test for a charge published
// twice or a line that does not name one of its charge's events.
func chargesOnWire(t *testing.T, js jetstream.JetStream) map[string]decimal.Decimal {
	t.Helper()
	ctx := context.Background()
	// CHARGES is a work queue: an observer reads with explicit acks and
	// acks nothing (the messages stay for the ledger), then goes away.
	cons, err := js.CreateConsumer(ctx, natsx.StreamCharges, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	defer js.DeleteConsumer(ctx, natsx.StreamCharges, cons.CachedInfo().Name) //nolint:errcheck // cleanup: a consumer left behind goes with the test's server
	info, err := js.Stream(ctx, natsx.StreamCharges)
	if err != nil {
		t.Fatal(err)
	}
	st, err := info.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]decimal.Decimal{}
	seen := map[string]bool{}
	for i := uint64(0); i < st.State.Msgs; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var b eventsv1.ChargesRatedBatch
		if err := proto.Unmarshal(m.Data(), &b); err != nil {
			t.Fatal(err)
		}
		for _, c := range b.Charges {
			if seen[c.ChargeId] {
				t.Errorf("charge %s published twice", c.ChargeId)
			}
			seen[c.ChargeId] = true
			for i, l := range c.Lines {
				if l.EventId == "" || !slices.Contains(c.EventIds, l.EventId) {
					t.Errorf("charge %s line %d: event_id %q is not one of the charge's events %v", c.ChargeId, i, l.EventId, c.EventIds)
				}
			}
			out[c.LeaseId] = out[c.LeaseId].Add(decimal.RequireFromString(c.Amount))
		}
	}
	return out
}

func TestThreeHalfHoursBillTwoCents(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.parties(t, 1, 1, "USD")
	s.card(t, "USD", "0.01")
	run(t, s.metering)
	run(t, s.pricing)
	at := now.Add(-5 * time.Hour)
	for i := 0; i < 3; i++ { // one event per call: three separate charges
		s.ingest(t, []*meteringv1.UsageEventInput{usage(fmt.Sprintf("evt-%d", i), "lease-9", "p-000", "r-000", at.Add(time.Duration(i)*30*time.Minute), 30*time.Minute)}, 1)
		testkit.Eventually(t, 10*time.Second, func() bool { return s.ratedEvents(t) == i+1 }, "event %d rated", i)
	}
	rows, err := s.deps.Pool.Query(context.Background(), `select amount::text from pricing.charges where lease_id = 'lease-9' order by effective_at`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		got = append(got, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[0.01 0 0.01]" {
		t.Fatalf("charges %v, want [0.01 0 0.01] (0.02 in total, not 0.03)", got)
	}
}

func TestUsageWithoutCardWaitsThenRates(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.parties(t, 1, 1, "JPY")
	run(t, s.metering)
	run(t, s.pricing)
	s.ingest(t, []*meteringv1.UsageEventInput{usage("evt-1", "lease-1", "p-000", "r-000", now.Add(-2*time.Hour), time.Hour)}, 1)
	var reason string
	testkit.Eventually(t, 10*time.Second, func() bool {
		return s.deps.Pool.QueryRow(context.Background(), `select reason from pricing.pending_rating where event_id = 'evt-1'`).Scan(&reason) == nil
	}, "pending row")
	if reason != "no rate card in JPY effective at 2026-11-20T10:00:00Z" {
		t.Fatalf("reason %q", reason)
	}
	s.card(t, "JPY", "150")
	testkit.Eventually(t, 10*time.Second, func() bool { return s.ratedEvents(t) == 1 }, "rated after the card appeared")
	var amount string
	if err := s.deps.Pool.QueryRow(context.Background(), `select amount::text from pricing.charges`).Scan(&amount); err != nil {
		t.Fatal(err)
	}
	if amount != "150" {
		t.Fatalf("amount %s, want 150 (JPY has no minor unit)", amount)
	}
}
