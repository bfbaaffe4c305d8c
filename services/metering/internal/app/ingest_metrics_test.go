package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// counterValues reads a counter family from the default registry, by the
// value of its one label.
func counterValues(t *testing.T, name string) map[string]float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestIngestCountsByReason: what ingest answers is what it counts, every
// rejection in a named class (none as "other"). Not parallel: the counters
// are the process's, and parallel tests wait until this one is done.
func TestIngestCountsByReason(t *testing.T) {
	a := newApp(t)
	ctx := context.Background()
	with := func(e domain.EventInput, f func(*domain.EventInput)) domain.EventInput { f(&e); return e }
	base := ev("", "lease-m", "2026-11-01T22:00:00Z", "2026-11-01T23:30:00Z")
	bad := []struct {
		give  domain.EventInput
		class string
	}{
		{with(base, func(e *domain.EventInput) { e.LeaseID = "" }), "missing_field"},
		{with(base, func(e *domain.EventInput) { e.ID = strings.Repeat("x", 300) }), "too_long"},
		{with(base, func(e *domain.EventInput) { e.Region = strings.Repeat("r", 300) }), "too_long"},
		{with(base, func(e *domain.EventInput) { e.RenterID = "r 1" }), "invalid_id"},
		{with(base, func(e *domain.EventInput) { e.ID = "m-\x00" }), "bad_text"},
		{with(base, func(e *domain.EventInput) { e.Workload = "\xff" }), "bad_text"},
		{with(base, func(e *domain.EventInput) { e.GPUModel = "GTX_9999" }), "unknown_gpu_model"},
		{with(base, func(e *domain.EventInput) { e.ProviderID = "p-x" }), "unknown_party"},
		{with(base, func(e *domain.EventInput) { e.RenterID = "r-x" }), "unknown_party"},
		{with(base, func(e *domain.EventInput) { e.GPUCount = 0 }), "gpu_count"},
		{with(base, func(e *domain.EventInput) { e.StartTime = "yesterday" }), "malformed_time"},
		{with(base, func(e *domain.EventInput) { e.EndTime = "2026-11-01T21:00:00Z" }), "bad_interval"},
		{with(base, func(e *domain.EventInput) { e.EndTime = "2026-11-02T22:00:01Z" }), "duration_too_long"},
		{with(base, func(e *domain.EventInput) { e.EndTime = "2026-11-02T12:05:01Z" }), "in_future"},
		{with(base, func(e *domain.EventInput) { e.StartTime, e.EndTime = "2026-09-27T11:00:00Z", "2026-09-27T13:00:00Z" }), "too_late"},
	}
	want := map[string]float64{}
	in := []domain.EventInput{ev("m-ok", "lease-ok", "2026-11-01T22:00:00Z", "2026-11-01T23:30:00Z")}
	for i, b := range bad {
		e := b.give
		if e.ID == "" {
			e.ID = fmt.Sprintf("m-%d", i)
		}
		in = append(in, e)
		want[b.class]++
	}
	// Then the same good event again (a duplicate), one with its id and
	// another body (an id conflict), and one overlapping it on its lease.
	again := []domain.EventInput{
		ev("m-ok", "lease-ok", "2026-11-01T22:00:00Z", "2026-11-01T23:30:00Z"),
		ev("m-ok", "lease-ok", "2026-11-01T22:00:00Z", "2026-11-01T23:00:00Z"),
		ev("m-over", "lease-ok", "2026-11-01T23:00:00Z", "2026-11-01T23:45:00Z"),
	}
	want["id_conflict"]++
	want["overlap"]++

	rejectedBefore := counterValues(t, "gpubill_usage_events_rejected_total")
	ingestedBefore := counterValues(t, "gpubill_usage_events_ingested_total")
	for _, batch := range [][]domain.EventInput{in, again} {
		if _, err := a.Ingest(ctx, batch, app.IngestOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rejected := counterValues(t, "gpubill_usage_events_rejected_total")
	for class, n := range want {
		if got := rejected[class] - rejectedBefore[class]; got != n {
			t.Errorf("rejected{reason=%q} grew by %v, want %v", class, got, n)
		}
	}
	if got := rejected["other"] - rejectedBefore["other"]; got != 0 {
		t.Errorf(`rejected{reason="other"} grew by %v: a reason is not classified`, got)
	}
	ingested := counterValues(t, "gpubill_usage_events_ingested_total")
	for result, n := range map[string]float64{"accepted": 1, "duplicate": 1} {
		if got := ingested[result] - ingestedBefore[result]; got != n {
			t.Errorf("ingested{result=%q} grew by %v, want %v", result, got, n)
		}
	}
}

// A closed renter's refused usage is counted as renter_closed (on NATS:
// dead-lettered for good), not as "other".
func TestClosedRenterRejectionClass(t *testing.T) {
	closedAt := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	r := domain.Renter{ID: "r-1", Status: domain.RenterClosed, ClosedAt: closedAt}
	reason := r.RefusesUsage(closedAt)
	if got := app.RejectionClass(reason); got != "renter_closed" {
		t.Fatalf("class of %q = %q, want renter_closed", reason, got)
	}
	if before := r.RefusesUsage(closedAt.Add(-time.Nanosecond)); before != "" {
		t.Fatalf("usage started before the close refused: %q", before)
	}
}
