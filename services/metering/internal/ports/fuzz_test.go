package ports

import (
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// FuzzIngestDecode feeds arbitrary bodies to the ingest decoder and the
// per-event validator: nothing panics, every event is either valid (and then
// satisfies every rule) or carries a reason.
func FuzzIngestDecode(f *testing.F) {
	f.Add([]byte(`{"events":[{"id":"evt-123","lease_id":"lease-9","provider_id":"p-001","renter_id":"r-001","gpu_model":"RTX_4090","gpu_count":2,"start_time":"2026-11-01T22:00:00Z","end_time":"2026-11-01T23:30:00Z","region":"cn-east","workload":"training"}]}`))
	f.Add([]byte(`{"events":[{"id":"a","gpu_count":-1,"start_time":"2026-11-01T22:00:00+08:00","end_time":"2026-11-01T22:00:00.000000001+08:00"}]}`))
	f.Add([]byte(`{"events":[]}`))
	f.Add([]byte(`{"events":[{"id":"x","unknown":1}], "extra": true}`))
	f.Add([]byte(`not json`))
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	rules := domain.Rules{Now: now, LateArrival: 35 * 24 * time.Hour, KnownModel: func(m string) bool { return m == "RTX_4090" || m == "H100" }}
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
