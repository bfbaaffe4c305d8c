package pricingstack_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/gpubill/internal/benchkit"
)

const (
	benchEvents    = 200_000
	benchLeases    = 2_000
	benchProviders = 50
	benchRenters   = 200
	benchCall      = 5_000
)

// benchUsage is benchEvents events from benchLeases leases, interleaved.
func benchUsage() []*meteringv1.UsageEventInput {
	start := now.Add(-30 * 24 * time.Hour)
	out := make([]*meteringv1.UsageEventInput, benchEvents)
	for i := range out {
		l := i % benchLeases
		at := start.Add(time.Duration(i/benchLeases) * 10 * time.Minute)
		out[i] = usage(fmt.Sprintf("evt-%07d", i), fmt.Sprintf("lease-%05d", l), fmt.Sprintf("p-%03d", l%benchProviders),
			fmt.Sprintf("r-%03d", l%benchRenters), at, 10*time.Minute)
	}
	return out
}

// TestBenchCeilingJetStream is JetStream alone carrying the pricing
// benchmark's events (benchkit.JetStreamUsage; the pipeline benchmark
// measures the same ceiling beside its figure).
func TestBenchCeilingJetStream(t *testing.T) {
	testkit.Bench(t, "ceiling_jetstream", "ceiling_jetstream_events")
	msgs, events := benchkit.JetStreamUsage(t, benchEvents)
	testkit.Report(t, msgs)
	testkit.Report(t, events)
}

func TestBenchPricingRate(t *testing.T) {
	testkit.Bench(t, "pricing_rate")
	s := newStack(t)
	s.parties(t, benchProviders, benchRenters, "CNY")
	s.card(t, "CNY", "2.00")
	run(t, s.metering)
	evs := benchUsage()
	if acc, dups := s.ingest(t, evs, benchCall); acc != benchEvents || dups != 0 {
		t.Fatalf("ingest: accepted %d duplicates %d, want %d and 0", acc, dups, benchEvents)
	}
	// Wait until metering's outbox has reached JetStream; pricing is not running yet.
	testkit.Eventually(t, 2*time.Minute, func() bool {
		var n int
		if err := s.deps.Pool.QueryRow(context.Background(), `select count(*) from metering.outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, "metering outbox relayed")
	// CPU per event while pricing alone works (metering's relay has
	// drained): this process and the database's backends.
	meter := testkit.NewCPUMeter(s.deps.Pool)
	if err := meter.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	meterCtx, stopMeter := context.WithCancel(context.Background())
	defer stopMeter()
	go meter.Run(meterCtx, 100*time.Millisecond)
	t.Logf("pricing starts on database %s", s.dsn) // for perf -p on its backends
	began := time.Now()
	run(t, s.pricing)
	// Poll the USAGE work queue (empty once pricing has acked every
	// message, after its commit), not the charges table: a scan of it
	// every 20 ms would be Postgres CPU counted against pricing.
	usageStream, err := s.js.JS.Stream(context.Background(), natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Minute, func() bool {
		info, err := usageStream.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	}, "usage consumed")
	el := time.Since(began).Seconds()
	cpu, err := meter.Used(context.Background())
	stopMeter()
	if err != nil {
		t.Fatal(err)
	}
	if n := s.ratedEvents(t); n != benchEvents {
		t.Fatalf("%d events rated, want %d", n, benchEvents)
	}
	// The figure counts only work verified exactly: every event charged once,
	// and per lease billed = round(GPU-seconds × 2.00 / 3600) from the inputs.
	secs := map[string]int64{}
	for _, e := range evs {
		start, end := mustTime(t, e.StartTime), mustTime(t, e.EndTime)
		secs[e.LeaseId] += int64(end.Sub(start) / time.Second)
	}
	var distinct int
	if err := s.deps.Pool.QueryRow(context.Background(), `select count(distinct e) from pricing.charges, unnest(event_ids) e`).Scan(&distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != benchEvents {
		t.Fatalf("%d distinct events charged, want %d", distinct, benchEvents)
	}
	billed := map[string]decimal.Decimal{}
	rows, err := s.deps.Pool.Query(context.Background(), `select lease_id, sum(amount)::text from pricing.charges group by lease_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var lease, sum string
		if err := rows.Scan(&lease, &sum); err != nil {
			t.Fatal(err)
		}
		billed[lease] = decimal.RequireFromString(sum)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(billed) != len(secs) {
		t.Fatalf("%d leases billed, want %d", len(billed), len(secs))
	}
	for lease, sec := range secs {
		want := decimal.NewFromInt(sec).Mul(decimal.RequireFromString("2.00")).DivRound(decimal.NewFromInt(3600), 2)
		if !billed[lease].Equal(want) {
			t.Fatalf("%s: billed %s, want %s", lease, billed[lease], want)
		}
	}
	testkit.Report(t, testkit.Figure{Bench: "pricing_rate", Value: benchEvents / el, Unit: "events/s", N: benchEvents,
		Load: testkit.LoadAvg(),
		Note: fmt.Sprintf("JetStream usage.recorded (%d-event messages) to committed charges + charges.rated outbox; %d leases; CPU per event: test process %.1f µs, Postgres %.1f µs (%d samples missed)",
			benchCall/benchProviders, benchLeases, float64(cpu.Process.Nanoseconds())/1e3/benchEvents, float64(cpu.Postgres.Nanoseconds())/1e3/benchEvents, cpu.Missed)})
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}
