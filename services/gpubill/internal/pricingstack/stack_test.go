package pricingstack_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/metering"
	"github.com/gpubill/gpubill/services/pricing"
)

var now = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

// stack is metering and pricing on one pool and one JetStream, as in `gpubill dev`.
type stack struct {
	deps     svc.Deps
	dsn      string // the stack's database, for a helper process
	metering *metering.Service
	pricing  *pricing.Service
	js       *testkit.JetStream
}

func newStack(t testing.TB) *stack {
	t.Helper()
	ctx := context.Background()
	pool, dsn := testkit.NewPool(t)
	js := testkit.NewJetStream(t)
	d := svc.Deps{Pool: pool, JS: js.JS, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.NewManual(now), Calendar: cycles.Default()}
	m, err := metering.New(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pricing.New(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	p.SetSplitQuoter(pricing.FlatSplits{})
	return &stack{deps: d, dsn: dsn, metering: m, pricing: p, js: js}
}

// run runs a service until the returned stop is called (or the test ends).
func run(t testing.TB, s svc.Service) (stop func()) {
	return testkit.Run(t, s.Name(), s.Run)
}

func (s *stack) parties(t testing.TB, providers, renters int, currency string) {
	t.Helper()
	party := meteringPartyClient{s.metering}
	for i := 0; i < providers; i++ {
		party.provider(t, fmt.Sprintf("p-%03d", i))
	}
	for i := 0; i < renters; i++ {
		party.renter(t, fmt.Sprintf("r-%03d", i), currency)
	}
}

// meteringPartyClient drives metering's party API in-process.
type meteringPartyClient struct{ m *metering.Service }

func (c meteringPartyClient) provider(t testing.TB, id string) {
	t.Helper()
	if _, err := c.m.Parties().CreateProvider(context.Background(), &meteringv1.CreateProviderRequest{
		ProviderId: id, Name: id, Tier: "pro", TaxProfile: "individual", Jurisdiction: "CN", Pue: "1.3"}); err != nil {
		t.Fatal(err)
	}
}

func (c meteringPartyClient) renter(t testing.TB, id, currency string) {
	t.Helper()
	if _, err := c.m.Parties().CreateRenter(context.Background(), &meteringv1.CreateRenterRequest{RenterId: id, Currency: currency}); err != nil {
		t.Fatal(err)
	}
}

func (s *stack) card(t testing.TB, currency, hourly string) {
	t.Helper()
	if _, err := s.pricing.API().CreateRateCard(context.Background(), &pricingv1.CreateRateCardRequest{
		Currency: currency, EffectiveFrom: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		GpuPrices: []*pricingv1.GpuPrice{{GpuModel: "RTX_4090", Hourly: hourly}, {GpuModel: "H100", Hourly: "2.50"}},
	}); err != nil {
		t.Fatal(err)
	}
}

func usage(id, lease, provider, renter string, start time.Time, d time.Duration) *meteringv1.UsageEventInput {
	return &meteringv1.UsageEventInput{Id: id, LeaseId: lease, ProviderId: provider, RenterId: renter, GpuModel: "RTX_4090",
		GpuCount: 1, StartTime: start.Format(time.RFC3339Nano), EndTime: start.Add(d).Format(time.RFC3339Nano), Region: "cn-east", Workload: "training"}
}
