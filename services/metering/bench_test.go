package metering_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/testkit"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/metering"
)

const (
	benchEvents    = 200_000
	benchLeases    = 2_000
	benchProviders = 50
	benchRenters   = 200
	benchWorkers   = 2
)

// BenchRequests builds n usage events from many leases in ingest calls of
// metering.BatchEventsMax events: each lease's events are consecutive
// 10-minute intervals, interleaved across leases.
func benchRequests(n int) []*meteringv1.IngestUsageEventsRequest {
	start := now.Add(-30 * 24 * time.Hour)
	var reqs []*meteringv1.IngestUsageEventsRequest
	var cur *meteringv1.IngestUsageEventsRequest
	for i := 0; i < n; i++ {
		if i%metering.BatchEventsMax == 0 {
			cur = &meteringv1.IngestUsageEventsRequest{}
			reqs = append(reqs, cur)
		}
		l := i % benchLeases
		at := start.Add(time.Duration(i/benchLeases) * 10 * time.Minute)
		cur.Events = append(cur.Events, &meteringv1.UsageEventInput{Id: fmt.Sprintf("evt-%07d", i), LeaseId: fmt.Sprintf("lease-%05d", l),
			ProviderId: fmt.Sprintf("p-%03d", l%benchProviders), RenterId: fmt.Sprintf("r-%03d", l%benchRenters), GpuModel: "RTX_4090", GpuCount: 2,
			StartTime: at.Format(time.RFC3339), EndTime: at.Add(10 * time.Minute).Format(time.RFC3339), Region: "cn-east", Workload: "training"})
	}
	return reqs
}

func TestBenchMeteringIngest(t *testing.T) {
	testkit.Bench(t, "metering_ingest")
	s, d := newService(t)
	ctx := context.Background()
	for i := 0; i < benchProviders; i++ {
		if _, err := s.Parties().CreateProvider(ctx, &meteringv1.CreateProviderRequest{ProviderId: fmt.Sprintf("p-%03d", i), Tier: "pro", TaxProfile: "individual", Jurisdiction: "CN", Pue: "1.4"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < benchRenters; i++ {
		if _, err := s.Parties().CreateRenter(ctx, &meteringv1.CreateRenterRequest{RenterId: fmt.Sprintf("r-%03d", i), Currency: "CNY"}); err != nil {
			t.Fatal(err)
		}
	}
	reqs := benchRequests(benchEvents)
	work := make(chan *meteringv1.IngestUsageEventsRequest, len(reqs))
	for _, r := range reqs {
		work <- r
	}
	close(work)
	var mu sync.Mutex
	accepted := 0
	// CPU per event (this process and this database's backends): the
	// machine is shared, so it compares runs where events/s does not.
	meter := testkit.NewCPUMeter(d.Pool)
	if err := meter.Start(ctx); err != nil {
		t.Fatal(err)
	}
	meterCtx, stopMeter := context.WithCancel(ctx)
	defer stopMeter()
	go meter.Run(meterCtx, 100*time.Millisecond)
	began := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < benchWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				res, err := s.Ingest(ctx, r)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				accepted += int(res.Accepted)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	cpu, err := meter.Used(ctx)
	stopMeter()
	if err != nil {
		t.Fatal(err)
	}
	if accepted != benchEvents {
		t.Fatalf("accepted %d of %d", accepted, benchEvents)
	}
	testkit.Report(t, testkit.Figure{Bench: "metering_ingest", Value: float64(accepted) / elapsed.Seconds(), Unit: "events/s", N: accepted,
		Load: testkit.LoadAvg(), Note: fmt.Sprintf("%d calls of %d events, %d leases, %d workers, usage.recorded outbox in the same tx; CPU per event: test process %.1f µs, Postgres %.1f µs (this database's backends, %d samples missed)",
			len(reqs), metering.BatchEventsMax, benchLeases, benchWorkers,
			float64(cpu.Process.Nanoseconds())/1e3/benchEvents, float64(cpu.Postgres.Nanoseconds())/1e3/benchEvents, cpu.Missed)})
}
