package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/metering"
	"github.com/gpubill/gpubill/services/pricing"
)

// Shape of the stream-capacity test.
const (
	capBytes      = 128 << 10 // GPUBILL_STREAM_MAX_BYTES for the test
	capPushFactor = 3         // at least this many caps through each work-queue stream
	capEventsCall = 200       // events per ingest call: one usage.recorded message each, well under the cap
	capLeaseLen   = 10        // 6-minute events per lease: one hour
	capProviders  = 20
	capRenters    = 40
	capHourly     = "2.83"
)

// TestStreamsNeverFillUp pushes more than capPushFactor × the byte cap of
// USAGE and CHARGES through metering → pricing → ledger with a small
// GPUBILL_STREAM_MAX_BYTES, while a core NATS subscriber counts the bytes
// that went through. Under limits retention the streams would keep every
// acknowledged message, fill at one cap and refuse every publish after it,
// so the pipeline would stall; work-queue retention frees a message when its
// consumer acks it. Every event must be billed exactly once: counted in
// pricing's charges and summed in the ledger, against totals computed here
// from the events alone.
func TestStreamsNeverFillUp(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool, _ := testkit.NewPool(t)
	js := testkit.NewJetStream(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	limits := natsx.Limits{MaxBytes: capBytes, Replicas: 1}

	var usageBytes, chargeBytes atomic.Int64
	for subj, n := range map[string]*atomic.Int64{"usage.recorded.>": &usageBytes, "charges.rated.>": &chargeBytes} {
		sub, err := js.Conn.Subscribe(subj, func(m *nats.Msg) { n.Add(int64(len(m.Data))) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}

	deps := svc.Deps{Pool: pool, JS: js.JS, Log: log, Clock: clock.System{}, Calendar: cycles.Default(), Streams: limits}
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
	for _, name := range []string{natsx.StreamUsage, natsx.StreamCharges} {
		st, err := js.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxBytes; got != capBytes {
			t.Fatalf("%s max bytes %d, want the configured %d", name, got, capBytes)
		}
	}
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

	for i := 0; i < capProviders; i++ {
		if _, err := m.Parties().CreateProvider(ctx, &meteringv1.CreateProviderRequest{ProviderId: fmt.Sprintf("p-%03d", i), Name: "cap",
			Tier: "standard", TaxProfile: "individual", Jurisdiction: "CN", Pue: "1.2", Currency: "CNY"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < capRenters; i++ {
		if _, err := m.Parties().CreateRenter(ctx, &meteringv1.CreateRenterRequest{RenterId: fmt.Sprintf("r-%03d", i), Name: "cap", Currency: "CNY", CreditLimit: "0"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.API().CreateRateCard(ctx, &pricingv1.CreateRateCardRequest{Currency: "CNY",
		EffectiveFrom: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		GpuPrices:     []*pricingv1.GpuPrice{{GpuModel: "RTX_4090", Hourly: capHourly}}}); err != nil {
		t.Fatal(err)
	}

	// Each lease is capLeaseLen consecutive 6-minute events (one hour) of
	// gpu_count GPUs, so its charge is gpu_count × hourly exactly.
	hourly := decimal.RequireFromString(capHourly)
	base := time.Now().UTC().Add(-30 * time.Hour).Truncate(time.Minute)
	want := decimal.Zero
	events := 0
	for call := 0; usageBytes.Load() < capPushFactor*capBytes+capBytes/2 || chargeBytes.Load() < capPushFactor*capBytes; call++ {
		if call > 10_000 {
			t.Fatalf("pushed %d usage and %d charge bytes in %d calls; the pipeline stalled", usageBytes.Load(), chargeBytes.Load(), call)
		}
		req := &meteringv1.IngestUsageEventsRequest{}
		for k := 0; k < capEventsCall; k++ {
			i := events
			lease, step := i/capLeaseLen, i%capLeaseLen
			count := int32(1 + lease%4)
			if step == 0 {
				want = want.Add(hourly.Mul(decimal.NewFromInt32(count)))
			}
			start := base.Add(time.Duration(lease%600) * time.Minute).Add(time.Duration(step) * 6 * time.Minute)
			req.Events = append(req.Events, &meteringv1.UsageEventInput{
				Id: fmt.Sprintf("cev-%d", i), LeaseId: fmt.Sprintf("clease-%d", lease),
				ProviderId: fmt.Sprintf("p-%03d", lease%capProviders), RenterId: fmt.Sprintf("r-%03d", lease%capRenters),
				GpuModel: "RTX_4090", GpuCount: count, StartTime: start.Format(time.RFC3339), EndTime: start.Add(6 * time.Minute).Format(time.RFC3339),
				Region: "cn-east", Workload: "training"})
			events++
		}
		res, err := m.Ingest(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Accepted != capEventsCall || len(res.Rejected) > 0 {
			t.Fatalf("call %d: accepted %d, rejected %v", call, res.Accepted, res.Rejected)
		}
		// Every 10 calls, wait until the ledger has charged everything, so
		// the byte counts measure what went through, not a backlog.
		if call%10 == 9 {
			testkit.Eventually(t, 60*time.Second, func() bool { return ledgerChargedEvents(t, pool) == events },
				"events of the first %d calls charged in the ledger (usage %d B, charges %d B through streams of %d B)", call+1, usageBytes.Load(), chargeBytes.Load(), capBytes)
		}
	}
	testkit.Eventually(t, 60*time.Second, func() bool { return ledgerChargedEvents(t, pool) == events }, "every event charged")

	// Exactly once: every event in exactly one pricing charge, every charge
	// in exactly one ledger transaction, and the money is the expected money.
	var eventRefs, distinctEvents, charges, ledgerTx int
	if err := pool.QueryRow(ctx, `select count(*), count(distinct e) from pricing.charges, unnest(event_ids) e`).Scan(&eventRefs, &distinctEvents); err != nil {
		t.Fatal(err)
	}
	if eventRefs != events || distinctEvents != events {
		t.Errorf("pricing charges name %d events (%d distinct), want %d once each", eventRefs, distinctEvents, events)
	}
	if err := pool.QueryRow(ctx, `select (select count(*) from pricing.charges where amount <> 0), (select count(*) from ledger.transactions where kind = 'charge')`).Scan(&charges, &ledgerTx); err != nil {
		t.Fatal(err)
	}
	if charges != ledgerTx {
		t.Errorf("%d priced charges, %d ledger charge transactions", charges, ledgerTx)
	}
	var wallets, pending decimal.Decimal
	if err := pool.QueryRow(ctx, `select coalesce(sum(debits - credits) filter (where account like 'renter:%:wallet'), 0),
		coalesce(sum(credits - debits) filter (where account like 'provider:%:pending:%'), 0)
		from ledger.balances where currency = 'CNY'`).Scan(&wallets, &pending); err != nil {
		t.Fatal(err)
	}
	if !wallets.Equal(want) || !pending.Equal(want) {
		t.Errorf("renter wallets debited %s, provider pending credited %s; want %s each", wallets, pending, want)
	}
	dl := 0
	for _, s := range []string{"metering", "pricing", "ledger"} {
		var n int
		if err := pool.QueryRow(ctx, `select count(*) from `+s+`.dead_letters`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		dl += n
	}
	if dl != 0 {
		t.Errorf("%d dead letters", dl)
	}
	t.Logf("%d events; %d usage bytes and %d charge bytes through streams capped at %d bytes", events, usageBytes.Load(), chargeBytes.Load(), capBytes)
	if usageBytes.Load() < capPushFactor*capBytes || chargeBytes.Load() < capPushFactor*capBytes {
		t.Errorf("pushed %d usage and %d charge bytes; the test needs more than %d× the cap", usageBytes.Load(), chargeBytes.Load(), capPushFactor)
	}
}

// ledgerChargedEvents counts the events of the charges the ledger has
// posted (a charge transaction's idempotency key is its pricing charge id).
func ledgerChargedEvents(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `select coalesce(sum(cardinality(c.event_ids)), 0) from pricing.charges c
		join ledger.transactions x on x.idempotency_key = c.charge_id and x.kind = 'charge'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
