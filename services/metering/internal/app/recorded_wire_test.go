package app

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/metering/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// appendUsageEvent must encode exactly what proto.Marshal of the generated
// message does, defaults and odd times included.
func TestAppendUsageEventMatchesProtoMarshal(t *testing.T) {
	at := time.Date(2026, 11, 2, 12, 0, 0, 123456789, time.FixedZone("x", 8*3600))
	cases := []struct {
		r                   postgres.Recorded
		currency, tier, pue string
	}{
		{postgres.Recorded{Event: domain.Event{ID: "evt-1", LeaseID: "l-1", ProviderID: "p-1", RenterID: "r-1", GPUModel: "RTX_4090",
			GPUCount: 8, Start: at, End: at.Add(time.Hour), Region: "cn-east", Workload: "training"},
			CycleID: "2026-11", Status: domain.StatusAccepted, ReceivedAt: at.Add(2 * time.Hour)}, "CNY", "pro", "1.6"},
		{postgres.Recorded{Event: domain.Event{ID: "é✓", Start: time.Unix(0, 0), End: time.Unix(-5, -7)}}, "", "", ""},
		{postgres.Recorded{Event: domain.Event{GPUCount: -1, Start: time.Unix(1<<40, 999)}}, "USD", "", ""},
	}
	for i, c := range cases {
		r := c.r
		m := &eventsv1.UsageEvent{
			Id: r.ID, LeaseId: r.LeaseID, ProviderId: r.ProviderID, RenterId: r.RenterID,
			GpuModel: r.GPUModel, GpuCount: r.GPUCount,
			StartTime: timestamppb.New(r.Start), EndTime: timestamppb.New(r.End),
			Region: r.Region, Workload: r.Workload,
			Currency: c.currency, ProviderTier: c.tier, ProviderPue: c.pue,
			CycleId: r.CycleID, ReceivedAt: timestamppb.New(r.ReceivedAt),
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := appendUsageEvent(nil, &r, c.currency, c.tier, c.pue)
		if !bytes.Equal(got, want) {
			t.Errorf("case %d:\n got %x\nwant %x", i, got, want)
		}
		var back eventsv1.UsageEvent
		if err := proto.Unmarshal(got, &back); err != nil || !proto.Equal(&back, m) {
			t.Errorf("case %d: round trip %v: %v", i, err, &back)
		}
	}
	// A whole batch decodes to the generated message.
	msgs, err := (&App{}).recordedMessages([]postgres.Recorded{cases[0].r, cases[0].r},
		map[string]domain.Provider{"p-1": {Tier: "pro"}}, map[string]domain.Renter{"r-1": {Currency: "CNY"}})
	if err != nil || len(msgs) != 1 || msgs[0].Subject != "usage.recorded.p-1" {
		t.Fatalf("messages %v %v", msgs, err)
	}
	var b eventsv1.UsageRecordedBatch
	if err := proto.Unmarshal(msgs[0].Payload, &b); err != nil || b.BatchId != msgs[0].ID || len(b.Events) != 2 ||
		b.Events[1].Currency != "CNY" || b.Events[1].ProviderTier != "pro" || !b.Events[1].EndTime.AsTime().Equal(at.Add(time.Hour)) {
		t.Fatalf("batch %v %v", &b, err)
	}
}
