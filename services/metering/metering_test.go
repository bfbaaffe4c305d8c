package metering_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/metering"
)

var now = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

func newService(t *testing.T) (*metering.Service, svc.Deps) {
	t.Helper()
	return newServiceAt(t, clock.NewManual(now))
}

// newServiceAt is newService on the clock given.
func newServiceAt(t *testing.T, clk clock.Clock) (*metering.Service, svc.Deps) {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	js := testkit.NewJetStream(t)
	d := svc.Deps{Pool: pool, JS: js.JS, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clk, Calendar: cycles.Default()}
	s, err := metering.New(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("metering: %v", err)
		}
	})
	return s, d
}

func TestNATSIngestUsesTheSamePath(t *testing.T) {
	t.Parallel()
	s, d := newService(t)
	ctx := context.Background()
	if _, err := s.Parties().CreateProvider(ctx, &meteringv1.CreateProviderRequest{ProviderId: "p-001", Tier: "standard", TaxProfile: "enterprise", Jurisdiction: "US"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Parties().CreateRenter(ctx, &meteringv1.CreateRenterRequest{RenterId: "r-001", Currency: "USD"}); err != nil {
		t.Fatal(err)
	}
	body := `{"events":[
		{"id":"evt-1","lease_id":"l-1","provider_id":"p-001","renter_id":"r-001","gpu_model":"H100","gpu_count":8,"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z"},
		{"id":"evt-2","lease_id":"l-2","provider_id":"p-002","renter_id":"r-001","gpu_model":"H100","gpu_count":8,"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z"}]}`
	for i := 0; i < 2; i++ { // a node agent retry is harmless
		if _, err := d.JS.Publish(ctx, "usage.ingest.p-001", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		res, err := s.Usage().ListUsageEvents(ctx, &meteringv1.ListUsageEventsRequest{RenterId: "r-001"})
		return err == nil && len(res.UsageEvents) == 1 && res.UsageEvents[0].Id == "evt-1" && res.UsageEvents[0].CycleId == "cyc-20261112"
	}, "evt-1 recorded from NATS, evt-2 (another provider's) refused")
	// usage.recorded carries the enriched event.
	// USAGE is a work queue: an observer reads with explicit acks.
	cons, err := d.JS.CreateConsumer(ctx, natsx.StreamUsage, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "usage.recorded.>"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var b eventsv1.UsageRecordedBatch
	if err := proto.Unmarshal(m.Data(), &b); err != nil {
		t.Fatal(err)
	}
	if m.Subject() != "usage.recorded.p-001" || len(b.Events) != 1 || b.Events[0].Currency != "USD" || b.Events[0].ProviderTier != "standard" || b.Events[0].CycleId != "cyc-20261112" {
		t.Fatalf("%s %v", m.Subject(), &b)
	}
}

func TestPartyUpdatesArePublishedWithVersions(t *testing.T) {
	t.Parallel()
	s, d := newService(t)
	ctx := context.Background()
	if _, err := s.Parties().CreateProvider(ctx, &meteringv1.CreateProviderRequest{ProviderId: "p-7", Tier: "pro", TaxProfile: "individual", Jurisdiction: "CN", Pue: "1.2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Parties().UpdateProvider(ctx, &meteringv1.UpdateProviderRequest{
		Provider: &meteringv1.Provider{ProviderId: "p-7", Pue: "1.55"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"pue"}}}); err != nil {
		t.Fatal(err)
	}
	cons, err := d.JS.OrderedConsumer(ctx, natsx.StreamParty, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var got []*eventsv1.PartyUpdated
	for len(got) < 2 {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var p eventsv1.PartyUpdated
		if err := proto.Unmarshal(m.Data(), &p); err != nil {
			t.Fatal(err)
		}
		got = append(got, &p)
	}
	if got[0].Version != 1 || got[0].Pue != "1.2" || got[1].Version != 2 || got[1].Pue != "1.55" || got[1].Tier != "pro" {
		t.Fatalf("party updates %v", got)
	}
}

// TestUsageKeysCompareBytewise: the text keys of metering.usage_events are
// collated "C" (migration 0009), so each of an event's four index inserts
// compares with memcmp, not the database locale's strcoll (~15 % of the
// insert).
func TestUsageKeysCompareBytewise(t *testing.T) {
	t.Parallel()
	_, d := newService(t)
	rows, err := d.Pool.Query(context.Background(), `select a.attname::text, c.collname::text
		from pg_attribute a join pg_collation c on c.oid = a.attcollation
		where a.attrelid = 'metering.usage_events'::regclass and a.attname in ('id', 'lease_id', 'provider_id', 'renter_id')
		order by a.attnum`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var col, coll string
		if err := rows.Scan(&col, &coll); err != nil {
			t.Fatal(err)
		}
		got[col] = coll
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"id", "lease_id", "provider_id", "renter_id"} {
		if got[col] != "C" {
			t.Errorf("metering.usage_events.%s is collated %q, want \"C\"", col, got[col])
		}
	}
}

// GPUBILL_LATE_ARRIVAL_DAYS reaches metering (svc.Deps.LateArrival): with 7
// days, usage that started 8 days ago is rejected as too late and usage of 6
// days ago recorded. DESIGN's "35 days, configurable" was a code option only.
func TestLateArrivalFromDeps(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	d := svc.Deps{Pool: pool, JS: testkit.NewJetStream(t).JS, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.NewManual(now),
		Calendar: cycles.Default(), LateArrival: 7 * 24 * time.Hour}
	s, err := metering.New(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Parties().CreateProvider(ctx, &meteringv1.CreateProviderRequest{ProviderId: "p-1", Tier: "standard", TaxProfile: "individual", Jurisdiction: "CN"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Parties().CreateRenter(ctx, &meteringv1.CreateRenterRequest{RenterId: "r-1", Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	event := func(id string, daysAgo int) *meteringv1.UsageEventInput {
		start := now.AddDate(0, 0, -daysAgo)
		return &meteringv1.UsageEventInput{Id: id, LeaseId: "l-" + id, ProviderId: "p-1", RenterId: "r-1", GpuModel: "H100", GpuCount: 1,
			StartTime: start.Format(time.RFC3339), EndTime: start.Add(time.Hour).Format(time.RFC3339)}
	}
	res, err := s.Usage().IngestUsageEvents(ctx, &meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{event("old", 8), event("recent", 6)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 1 || len(res.Rejected) != 1 || res.Rejected[0].Id != "old" || !strings.Contains(res.Rejected[0].Reason, "7-day late-arrival limit") {
		t.Fatalf("8 and 6 days old under a 7-day limit: %v; want the 8-day-old one rejected naming the limit", res)
	}
}
