package postgres

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// A card body is stored as the CreateRateCardRequest it came in as (without
// its id), so bodies stored before and after read and compare alike.
func TestCardBodyIsTheRequest(t *testing.T) {
	eff := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	req := &pricingv1.CreateRateCardRequest{Currency: "CNY", EffectiveFrom: timestamppb.New(eff),
		GpuPrices:    []*pricingv1.GpuPrice{{GpuModel: "RTX_4090", Hourly: "2.00"}, {GpuModel: "H100", Hourly: "9", Region: "cn-east"}},
		TimeBands:    []*pricingv1.TimeBand{{Name: "night", Start: "23:00", End: "07:00", Timezone: "Asia/Shanghai", Multiplier: "0.80"}},
		VolumeTiers:  []*pricingv1.VolumeTier{{UpToGpuHours: "100", Discount: "0"}, {Discount: "0.10"}},
		PueSurcharge: &pricingv1.PueSurcharge{Threshold: "1.5", PerGpuHour: "0.05"}}
	in := domain.CardInput{Currency: "CNY", EffectiveFrom: eff,
		Prices: []domain.PriceInput{{Model: "RTX_4090", Hourly: "2.00"}, {Model: "H100", Hourly: "9", Region: "cn-east"}},
		Bands:  []domain.BandInput{{Name: "night", Start: "23:00", End: "07:00", TimeZone: "Asia/Shanghai", Multiplier: "0.80"}},
		Tiers:  []domain.TierInput{{UpToGPUHours: "100", Discount: "0"}, {Discount: "0.10"}},
		PUE:    &domain.PUEInput{Threshold: "1.5", PerGPUHour: "0.05"}}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := encodeCardBody(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("stored body differs from the request's encoding")
	}
	back, err := decodeCardBody(want)
	if err != nil {
		t.Fatal(err)
	}
	if !back.SameBody(in) {
		t.Fatalf("decoded %+v, want %+v", back, in)
	}
}

// A pending event keeps every field of the usage.recorded event it came in.
func TestPendingUsageRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 18, 14, 0, 0, 123000, time.UTC)
	e := domain.UsageEvent{ID: "evt-1", LeaseID: "l-1", ProviderID: "p-1", RenterID: "r-1", GPUModel: "RTX_4090", GPUCount: 2,
		Start: at, End: at.Add(time.Hour), Region: "cn-east", Workload: "training", Currency: "CNY", ProviderTier: "pro",
		ProviderPUE: "1.6", CycleID: "cyc-20261112", ReceivedAt: at.Add(2 * time.Hour)}
	b, err := encodeUsageEvent(&e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeUsageEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	if got != e {
		t.Fatalf("round trip: %+v, want %+v", got, e)
	}
}
