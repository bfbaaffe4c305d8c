package ports

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// fuzzRules are the rules FuzzIngestDecode validates with; its seeds' times
// are chosen against this clock.
var fuzzRules = domain.Rules{Now: time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC), LateArrival: 35 * 24 * time.Hour,
	KnownModel: func(m string) bool { return m == "RTX_4090" || m == "H100" }}

// TestIngestFuzzSeedsReachValidEvents: every testdata seed named valid-*
// decodes and each of its events passes every rule, so the fuzzer starts
// from events of each shape (offsets, fractions, bounds, optional fields
// absent, several per body, camelCase names, non-ASCII text) that reach the
// accepted path, not only the decoder's refusals.
func TestIngestFuzzSeedsReachValidEvents(t *testing.T) {
	paths, err := filepath.Glob("testdata/fuzz/FuzzIngestDecode/valid-*")
	if err != nil || len(paths) < 10 {
		t.Fatalf("valid seeds: %v %v", paths, err)
	}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		_, lit, ok := strings.Cut(strings.TrimSpace(string(raw)), "\n[]byte(")
		if !ok {
			t.Fatalf("%s: not a []byte seed", p)
		}
		body, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		evs, err := DecodeIngestJSON([]byte(body))
		if err != nil || len(evs) == 0 {
			t.Errorf("%s: %d events, %v", p, len(evs), err)
		}
		for i, in := range evs {
			if _, reason := domain.Validate(in, fuzzRules); reason != "" {
				t.Errorf("%s: event %d refused: %s", p, i, reason)
			}
		}
	}
}

// FuzzIngestDecode feeds arbitrary bodies to the ingest decoder and the
// per-event validator: nothing panics, every event is either valid (and then
// satisfies every rule) or carries a reason.
func FuzzIngestDecode(f *testing.F) {
	f.Add([]byte(`{"events":[{"id":"evt-123","lease_id":"lease-9","provider_id":"p-001","renter_id":"r-001","gpu_model":"RTX_4090","gpu_count":2,"start_time":"2026-11-01T22:00:00Z","end_time":"2026-11-01T23:30:00Z","region":"cn-east","workload":"training"}]}`))
	f.Add([]byte(`{"events":[{"id":"a","gpu_count":-1,"start_time":"2026-11-01T22:00:00+08:00","end_time":"2026-11-01T22:00:00.000000001+08:00"}]}`))
	f.Add([]byte(`{"events":[]}`))
	f.Add([]byte(`{"events":[{"id":"x","unknown":1}], "extra": true}`))
	f.Add([]byte(`not json`))
	rules := fuzzRules
	now := rules.Now
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := DecodeIngestJSON(body)
		if err != nil {
			return
		}
		for _, in := range evs {
			e, reason := domain.Validate(in, rules)
			if reason != "" {
				continue
			}
			switch {
			case e.ID == "" || e.LeaseID == "" || e.ProviderID == "" || e.RenterID == "":
				t.Fatalf("accepted without ids: %+v", e)
			case !e.End.After(e.Start):
				t.Fatalf("accepted empty interval: %+v", e)
			case e.End.Sub(e.Start) > domain.EventDurationMax:
				t.Fatalf("accepted > 24h: %+v", e)
			case e.GPUCount < 1 || e.GPUCount > 64:
				t.Fatalf("accepted gpu_count %d", e.GPUCount)
			case e.End.After(now.Add(domain.FutureSkewMax)) || e.Start.Before(now.Add(-rules.LateArrival)):
				t.Fatalf("accepted out of the time window: %+v", e)
			case e.Start.Nanosecond()%1000 != 0:
				t.Fatalf("not truncated to microseconds: %v", e.Start)
			}
		}
	})
}
