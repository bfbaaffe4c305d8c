package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/gpubill/internal/benchkit"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/metering"
	"github.com/gpubill/gpubill/services/pricing"
)

// Shape of the pipeline benchmark.
const (
	pipelineEvents     = 200_000
	pipelineEventsCall = 5_000 // the ingest API's batch limit
	pipelineLeaseLen   = 10    // events per lease, 6 minutes each
	pipelineProviders  = 50
	pipelineRenters    = 100
	pipelineClients    = 4
	pipelineHourly     = "2.83"
)

// TestBenchPipeline measures events/s from the ingest API accepting them
// until the ledger balances include them, through metering → JetStream →
// pricing → JetStream → ledger, all on real Postgres and JetStream: the
// second of two passes of the same load (runPipeline).
//
// ceiling_durable_events (benchkit.DurableUsage: the JetStream ceiling with
// each event also copied into a table shaped like metering.usage_events)
// runs only when BENCH_FILTER names it, after the pipeline on its
// database. It prints its ratio to ceiling_jetstream_events, and a second
// pipeline line its ratio to it; neither has a goal.
func TestBenchPipeline(t *testing.T) {
	testkit.Bench(t, "pipeline", "ceiling_jetstream_events", "ceiling_durable_events")
	// The ceiling first, on a JetStream server of its own, before the
	// pipeline's services start: the figure is a ratio to it.
	jsCeiling := benchkit.JetStreamUsageEvents(t, pipelineEvents)
	pool, dsn := testkit.NewPool(t)
	t.Logf("database %s", dsn) // for perf -p on its backends
	r := runPipeline(t, pool, "")
	fig := r.figure("pipeline")
	testkit.ReportAgainst(t, fig, jsCeiling)
	if !strings.Contains(os.Getenv("BENCH_FILTER"), "ceiling_durable_events") {
		return
	}
	durable := benchkit.DurableUsageEvents(t, pool, pipelineEvents)
	for _, f := range []struct{ figure, ceiling testkit.Figure }{{durable, jsCeiling}, {fig, durable}} {
		r, err := f.figure.Against(f.ceiling)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Report(t, r)
	}
}

// pipelineResult is one timed pipeline run, and the untimed pass before it.
type pipelineResult struct {
	elapsed, ingested time.Duration
	cpu               testkit.CPU
	machine           string       // the whole machine's CPU (testkit.Machine)
	first             pipelinePass // the first pass, which the figure leaves out
}

func (r pipelineResult) figure(name string) testkit.Figure {
	return testkit.Figure{Bench: name, Value: float64(int(float64(pipelineEvents) / r.elapsed.Seconds())), Unit: "events/s", N: pipelineEvents,
		Load: testkit.LoadAvg(), Note: fmt.Sprintf("ingest API alone %.0f events/s; total %s; CPU per event: test process %.1f µs, Postgres %.1f µs (this database's backends, %d samples missed); %s; %s",
			float64(pipelineEvents)/r.ingested.Seconds(), r.elapsed.Round(time.Millisecond),
			float64(r.cpu.Process.Nanoseconds())/1e3/pipelineEvents, float64(r.cpu.Postgres.Nanoseconds())/1e3/pipelineEvents, r.cpu.Missed, r.machine,
			r.first.note())}
}

// pipelinePass is one pass of pipelineEvents events through the services.
type pipelinePass struct {
	elapsed time.Duration
	cpu     testkit.CPU
}

func (p pipelinePass) note() string {
	return fmt.Sprintf("first pass (the same load on the same services and connections just before, not in the figure) %.0f events/s, CPU per event: test process %.1f µs, Postgres %.1f µs",
		float64(pipelineEvents)/p.elapsed.Seconds(), float64(p.cpu.Process.Nanoseconds())/1e3/pipelineEvents, float64(p.cpu.Postgres.Nanoseconds())/1e3/pipelineEvents)
}

// runPipeline starts metering, pricing and the ledger on pool with a
// JetStream server of their own, creates the rate card, and sends
// pipelineEvents events through the ingest API twice: the figure is the
// second pass, timed from the first request until the ledger's provider
// balances hold its events. The first pass is the same load on the same
// services and connections; it is what the figure leaves out, the start of
// a deployment rather than its running: Postgres backends new to the
// database (the pool's connections when the services start) fault in the
// shared buffers and their own memory as they first touch them, and this
// process's heap, caches and connections grow to their size. A first pass
// cost 15-32 % more CPU per event (this process and the database's
// backends) than the pass after it (DEVELOPERS.md). Every party, lease and event id starts with idp
// and then the pass ("w" for the first, "t" for the timed), and only the
// timed pass's providers are summed: a database with history
// (pipeline_history) holds other parties, whose balances are not this
// run's. The services stop when t ends.
func runPipeline(t *testing.T, pool *pgxpool.Pool, idp string) pipelineResult {
	t.Helper()
	ctx := testkit.Context(t)
	js := testkit.NewJetStream(t)
	secret := []byte("gpubill-bench-secret-0123456789abcdef")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	deps := svc.Deps{Pool: pool, JS: js.JS, Log: log, Clock: clock.System{}, Calendar: cycles.Default()}
	m, err := metering.New(ctx, deps)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pricing.New(ctx, deps)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(ctx, deps)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(ctx, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: secret, Log: log,
		Services: []server.Service{m, p, l}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	for _, s := range []svc.Service{m, p, l} {
		wg.Add(1)
		go func(s svc.Service) {
			defer wg.Done()
			if err := s.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", s.Name(), err)
			}
		}(s)
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	tok := testkit.Token(t, secret, auth.RoleAdmin, "bench", time.Hour)
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.BearerCreds(tok)), grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(32<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pricingv1.NewPricingServiceClient(conn).CreateRateCard(ctx, &pricingv1.CreateRateCardRequest{Currency: "CNY",
		EffectiveFrom: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		GpuPrices:     []*pricingv1.GpuPrice{{GpuModel: "RTX_4090", Hourly: pipelineHourly}}}); err != nil {
		t.Fatal(err)
	}
	first := pipelineLoad(t, pool, conn, idp+"w")
	r := pipelineLoad(t, pool, conn, idp+"t")
	return pipelineResult{elapsed: r.elapsed, ingested: r.ingested, cpu: r.cpu, machine: r.machine,
		first: pipelinePass{elapsed: first.elapsed, cpu: first.cpu}}
}

// pipelineLoad creates the parties named by idp and times pipelineEvents
// events from the ingest API until the ledger's provider balances (those
// of idp's providers) hold them, exactly.
func pipelineLoad(t *testing.T, pool *pgxpool.Pool, conn *grpc.ClientConn, idp string) pipelineResult {
	t.Helper()
	ctx := testkit.Context(t)
	parties := meteringv1.NewPartyServiceClient(conn)
	ledgerAPI := ledgerv1.NewLedgerServiceClient(conn)
	for i := 0; i < pipelineProviders; i++ {
		if _, err := parties.CreateProvider(ctx, &meteringv1.CreateProviderRequest{ProviderId: fmt.Sprintf("%sp-%03d", idp, i), Name: "bench",
			Tier: "standard", TaxProfile: "individual", Jurisdiction: "CN", Pue: "1.2", Currency: "CNY"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < pipelineRenters; i++ {
		if _, err := parties.CreateRenter(ctx, &meteringv1.CreateRenterRequest{RenterId: fmt.Sprintf("%sr-%03d", idp, i), Name: "bench", Currency: "CNY", CreditLimit: "0"}); err != nil {
			t.Fatal(err)
		}
	}

	// Build every request up front; each lease is 10 consecutive 6-minute
	// events, so its exact total is gpu_count × 1 h × hourly.
	hourly := decimal.RequireFromString(pipelineHourly)
	base := time.Now().UTC().Add(-30 * time.Hour).Truncate(time.Minute)
	var reqs []*meteringv1.IngestUsageEventsRequest
	want := decimal.Zero
	cur := &meteringv1.IngestUsageEventsRequest{}
	for i := 0; i < pipelineEvents; i++ {
		lease, k := i/pipelineLeaseLen, i%pipelineLeaseLen
		count := int32(1 + lease%4)
		if k == 0 {
			want = want.Add(hourly.Mul(decimal.NewFromInt32(count)))
		}
		start := base.Add(time.Duration(lease%600) * time.Minute).Add(time.Duration(k) * 6 * time.Minute)
		cur.Events = append(cur.Events, &meteringv1.UsageEventInput{
			Id: fmt.Sprintf("%sbev-%d", idp, i), LeaseId: fmt.Sprintf("%sblease-%d", idp, lease),
			ProviderId: fmt.Sprintf("%sp-%03d", idp, lease%pipelineProviders), RenterId: fmt.Sprintf("%sr-%03d", idp, lease%pipelineRenters),
			GpuModel: "RTX_4090", GpuCount: count, StartTime: start.Format(time.RFC3339), EndTime: start.Add(6 * time.Minute).Format(time.RFC3339),
			Region: "cn-east", Workload: "training",
		})
		if len(cur.Events) == pipelineEventsCall {
			reqs = append(reqs, cur)
			cur = &meteringv1.IngestUsageEventsRequest{}
		}
	}
	if len(cur.Events) > 0 {
		reqs = append(reqs, cur)
	}
	// Each request's bytes are made before the clock starts, as the REST
	// bench prepares its bodies: marshalling them in the timed part cost
	// this process ~0.5 µs per event, the load generator's and not the path
	// measured.
	bodies := make([]preEncoded, len(reqs))
	for i, r := range reqs {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		bodies[i] = preEncoded{b: b, events: len(r.Events)}
	}
	codec := grpc.ForceCodecV2(preEncodedCodec{encoding.GetCodecV2(protocodec.Name)})

	// CPU per event, this process (services, embedded JetStream, the
	// gRPC clients) and this database's backends: the machine is shared,
	// so it compares runs where events/s alone does not.
	meter := testkit.NewCPUMeter(pool)
	if err := meter.Start(ctx); err != nil {
		t.Fatal(err)
	}
	meterCtx, stopMeter := context.WithCancel(ctx)
	defer stopMeter()
	go meter.Run(meterCtx, 100*time.Millisecond)
	machine := testkit.StartMachine()
	began := time.Now()
	work := make(chan preEncoded)
	var ingestWG sync.WaitGroup
	errs := make(chan error, pipelineClients)
	for c := 0; c < pipelineClients; c++ {
		ingestWG.Add(1)
		go func() {
			defer ingestWG.Done()
			for r := range work {
				res := &meteringv1.IngestUsageEventsResponse{}
				if err := conn.Invoke(ctx, meteringv1.UsageService_IngestUsageEvents_FullMethodName, r, res, codec); err != nil {
					errs <- err
					return
				}
				if int(res.Accepted) != r.events {
					errs <- fmt.Errorf("accepted %d of %d: %v", res.Accepted, r.events, res.Rejected[:min(3, len(res.Rejected))])
					return
				}
			}
		}()
	}
	for _, r := range bodies {
		work <- r
	}
	close(work)
	ingestWG.Wait()
	ingested := time.Since(began)
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	pending := func() decimal.Decimal {
		sum := decimal.Zero
		token := ""
		for {
			res, err := ledgerAPI.ListAccounts(ctx, &ledgerv1.ListAccountsRequest{Prefix: "provider:" + idp, PageSize: 500, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range res.Accounts {
				for _, b := range a.Balances {
					sum = sum.Add(decimal.RequireFromString(b.Amount))
				}
			}
			if token = res.NextPageToken; token == "" {
				return sum
			}
		}
	}
	var got decimal.Decimal
	testkit.Eventually(t, 10*time.Minute, func() bool {
		got = pending()
		return got.GreaterThanOrEqual(want)
	}, "ledger never reached the expected total")
	elapsed := time.Since(began)
	used := machine.Note(pipelineEvents, "event")
	cpu, err := meter.Used(ctx)
	stopMeter()
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) {
		t.Fatalf("provider pending total %s, want exactly %s", got, want)
	}
	return pipelineResult{elapsed: elapsed, ingested: ingested, cpu: cpu, machine: used}
}

// preEncoded is a request's protobuf, made before the clock starts, and
// how many events it carries.
type preEncoded struct {
	b      []byte
	events int
}

// preEncodedCodec sends a preEncoded request's bytes as they are; anything
// else (the answers) goes through protobuf's codec.
type preEncodedCodec struct{ encoding.CodecV2 }

func (c preEncodedCodec) Marshal(v any) (mem.BufferSlice, error) {
	if p, ok := v.(preEncoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(p.b)}, nil
	}
	return c.CodecV2.Marshal(v)
}
