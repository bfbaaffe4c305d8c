package postgres

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// protoRecorded is what recordedMessages wrote before usage_wire.go: the
// messages built as eventsv1 structs and proto.Marshal'ed, given the batch
// ids recordedMessages chose.
func protoRecorded(t *testing.T, acc []domain.Recorded, provs map[string]domain.Provider, rents map[string]domain.Renter, batchIDs map[string]string) map[string][]byte {
	t.Helper()
	groups := map[string]*eventsv1.UsageRecordedBatch{}
	for _, r := range acc {
		b, ok := groups[r.ProviderID]
		if !ok {
			b = &eventsv1.UsageRecordedBatch{BatchId: batchIDs[r.ProviderID]}
			groups[r.ProviderID] = b
		}
		p := provs[r.ProviderID]
		b.Events = append(b.Events, &eventsv1.UsageEvent{
			Id: r.ID, LeaseId: r.LeaseID, ProviderId: r.ProviderID, RenterId: r.RenterID,
			GpuModel: r.GPUModel, GpuCount: r.GPUCount,
			StartTime: timestamppb.New(r.Start), EndTime: timestamppb.New(r.End),
			Region: r.Region, Workload: r.Workload,
			Currency: rents[r.RenterID].Currency, ProviderTier: p.Tier, ProviderPue: domain.PUEString(p.PUE),
			CycleId: r.CycleID, ReceivedAt: timestamppb.New(r.ReceivedAt),
		})
	}
	out := map[string][]byte{}
	for prov, b := range groups {
		payload, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		out[prov] = payload
	}
	return out
}

// TestRecordedWireMatchesProtobuf: the hand-written encoding of
// usage.recorded is byte for byte proto.Marshal's, on random batches with
// every field's edge values (empty strings, zero and negative counts, zero
// and pre-1970 times, nanoseconds, non-ASCII text, nil and set PUE).
func TestRecordedWireMatchesProtobuf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "p-001", "租户-é", "x\x00y", string(make([]byte, 200))}
	times := []time.Time{{}, time.Unix(0, 0).UTC(), time.Unix(-5, 7).UTC(), time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 20, 9, 0, 0, 123456000, time.UTC), time.Date(1900, 1, 1, 0, 0, 0, 1, time.UTC)}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	pickT := func() time.Time { return times[rng.IntN(len(times))] }
	pue := decimal.RequireFromString("1.25")
	for round := 0; round < 200; round++ {
		provs := map[string]domain.Provider{}
		rents := map[string]domain.Renter{}
		var acc []domain.Recorded
		for i := 0; i < 1+rng.IntN(40); i++ {
			prov, rent := fmt.Sprintf("p-%d", rng.IntN(4)), fmt.Sprintf("r-%d", rng.IntN(5))
			p := domain.Provider{ID: prov, Tier: pick(strs)}
			if rng.IntN(2) == 0 {
				p.PUE = &pue
			}
			if _, ok := provs[prov]; !ok {
				provs[prov] = p
			}
			if _, ok := rents[rent]; !ok {
				rents[rent] = domain.Renter{ID: rent, Currency: pick([]string{"", "CNY", "USD"})}
			}
			acc = append(acc, domain.Recorded{
				Event: domain.Event{ID: pick(strs) + fmt.Sprint(i), LeaseID: pick(strs), ProviderID: prov, RenterID: rent, GPUModel: pick(strs),
					GPUCount: []int32{0, 1, 8, 64, -1, 1 << 30}[rng.IntN(6)], Start: pickT(), End: pickT(), Region: pick(strs), Workload: pick(strs)},
				CycleID: pick(strs), Status: "recorded", ReceivedAt: pickT(),
			})
		}
		msgs := recordedMessages(acc, provs, rents)
		batchIDs := map[string]string{}
		seen := map[string]bool{}
		var wantOrder []string
		for _, r := range acc {
			if !seen[r.ProviderID] {
				seen[r.ProviderID] = true
				wantOrder = append(wantOrder, r.ProviderID)
			}
		}
		if len(msgs) != len(wantOrder) {
			t.Fatalf("round %d: %d messages for %d providers", round, len(msgs), len(wantOrder))
		}
		for i, m := range msgs {
			var b eventsv1.UsageRecordedBatch
			if err := proto.Unmarshal(m.Payload, &b); err != nil {
				t.Fatalf("round %d: message %d does not decode: %v", round, i, err)
			}
			if m.ID != b.BatchId || m.Subject != "usage.recorded."+wantOrder[i] {
				t.Fatalf("round %d: message %d is %s on %s, batch %s, want usage.recorded.%s", round, i, m.ID, m.Subject, b.BatchId, wantOrder[i])
			}
			batchIDs[wantOrder[i]] = m.ID
		}
		want := protoRecorded(t, acc, provs, rents, batchIDs)
		for i, m := range msgs {
			if !bytes.Equal(m.Payload, want[wantOrder[i]]) {
				t.Fatalf("round %d, provider %s: payload differs from proto.Marshal\n got %x\nwant %x", round, wantOrder[i], m.Payload, want[wantOrder[i]])
			}
		}
	}
}
