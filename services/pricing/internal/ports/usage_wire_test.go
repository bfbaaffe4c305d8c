package ports

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/eventwire"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// referenceDecode is what decodeUsageBatch replaces: the generated message,
// then the conversion the consumer did before.
func referenceDecode(b []byte) ([]domain.UsageEvent, error) {
	var m eventsv1.UsageRecordedBatch
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	out := make([]domain.UsageEvent, 0, len(m.Events))
	for _, e := range m.Events {
		ev := domain.UsageEvent{ID: e.Id, LeaseID: e.LeaseId, ProviderID: e.ProviderId, RenterID: e.RenterId,
			GPUModel: e.GpuModel, GPUCount: e.GpuCount, Start: e.StartTime.AsTime(), End: e.EndTime.AsTime(),
			Region: e.Region, Workload: e.Workload, Currency: e.Currency, ProviderTier: e.ProviderTier,
			ProviderPUE: e.ProviderPue, CycleID: e.CycleId}
		if e.ReceivedAt != nil {
			ev.ReceivedAt = e.ReceivedAt.AsTime()
		}
		out = append(out, ev)
	}
	return out, nil
}

// randomBatch is a batch with every field exercised, some left unset.
func randomBatch(r *rand.Rand, n int) *eventsv1.UsageRecordedBatch {
	pick := func(vs ...string) string { return vs[r.IntN(len(vs))] }
	b := &eventsv1.UsageRecordedBatch{BatchId: fmt.Sprintf("ub-%d", r.Int64())}
	for i := 0; i < n; i++ {
		start := time.Unix(r.Int64N(4e9)-1e9, r.Int64N(1e9))
		e := &eventsv1.UsageEvent{Id: fmt.Sprintf("ev-%d", i), LeaseId: pick("l-1", "l-2", "租约-3"),
			ProviderId: pick("p-1", "p-2"), RenterId: pick("r-1", "r-2", ""), GpuModel: pick("RTX_4090", "H100"),
			GpuCount: int32(r.IntN(9) - 1), Region: pick("cn-east", ""), Workload: pick("training", "inference"),
			Currency: pick("CNY", "USD"), ProviderTier: pick("standard", "pro", ""), ProviderPue: pick("", "1.2", "1.45"),
			CycleId: pick("cyc-20261101", "cyc-20261201")}
		if r.IntN(8) != 0 {
			e.StartTime = timestamppb.New(start)
		}
		if r.IntN(8) != 0 {
			e.EndTime = timestamppb.New(start.Add(time.Duration(r.IntN(3600)) * time.Second))
		}
		if r.IntN(2) == 0 {
			e.ReceivedAt = timestamppb.New(start.Add(time.Hour))
		}
		b.Events = append(b.Events, e)
	}
	return b
}

// TestDecodeUsageBatchMatchesProtobuf: on valid batches, on batches with
// extra and repeated fields, and on corrupted bytes, decodeUsageBatch gives
// what proto.Unmarshal and the old conversion give, or fails where they fail.
func TestDecodeUsageBatchMatchesProtobuf(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var inputs [][]byte
	for i := 0; i < 200; i++ {
		b, err := proto.Marshal(randomBatch(r, r.IntN(20)))
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
	}
	// Hand-made shapes protobuf accepts: an unknown field, a known field
	// with another wire type, a string and a timestamp given twice.
	ev := protowire.AppendTag(nil, eventwire.UsageID, protowire.BytesType)
	ev = protowire.AppendString(ev, "first")
	ev = protowire.AppendTag(ev, 99, protowire.VarintType)
	ev = protowire.AppendVarint(ev, 7)
	ev = protowire.AppendTag(ev, eventwire.UsageGPUCount, protowire.BytesType)
	ev = protowire.AppendString(ev, "not a count")
	ev = protowire.AppendTag(ev, eventwire.UsageID, protowire.BytesType)
	ev = protowire.AppendString(ev, "second")
	ts1 := protowire.AppendVarint(protowire.AppendTag(nil, eventwire.TimestampSeconds, protowire.VarintType), 1_700_000_000)
	ts2 := protowire.AppendVarint(protowire.AppendTag(nil, eventwire.TimestampNanos, protowire.VarintType), 5)
	ev = protowire.AppendBytes(protowire.AppendTag(ev, eventwire.UsageStart, protowire.BytesType), ts1)
	ev = protowire.AppendBytes(protowire.AppendTag(ev, eventwire.UsageStart, protowire.BytesType), ts2)
	ev = protowire.AppendBytes(protowire.AppendTag(ev, eventwire.UsageReceivedAt, protowire.BytesType), nil)
	inputs = append(inputs, protowire.AppendBytes(protowire.AppendTag(nil, eventwire.UsageBatchEvents, protowire.BytesType), ev))
	// Invalid UTF-8 in an event's string and in the batch id.
	bad := protowire.AppendString(protowire.AppendTag(nil, eventwire.UsageRegion, protowire.BytesType), "cn-\xff")
	inputs = append(inputs, protowire.AppendBytes(protowire.AppendTag(nil, eventwire.UsageBatchEvents, protowire.BytesType), bad))
	inputs = append(inputs, protowire.AppendString(protowire.AppendTag(nil, eventwire.UsageBatchID, protowire.BytesType), "\xc3"))
	// Corruptions of valid batches: truncated, one byte changed.
	for i := 0; i < 400; i++ {
		b := append([]byte(nil), inputs[r.IntN(200)]...)
		if len(b) == 0 {
			continue
		}
		if i%2 == 0 {
			b = b[:r.IntN(len(b))]
		} else {
			b[r.IntN(len(b))] = byte(r.IntN(256))
		}
		inputs = append(inputs, b)
	}
	var accepted, refused int
	for i, b := range inputs {
		want, wantErr := referenceDecode(b)
		got, gotErr := decodeUsageBatch(b, eventwire.NewInterner())
		if (wantErr != nil) != (gotErr != nil) {
			t.Fatalf("input %d: error %v, protobuf's %v", i, gotErr, wantErr)
		}
		if wantErr != nil {
			refused++
			continue
		}
		accepted++
		if len(got) == 0 && len(want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("input %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if accepted < 200 || refused < 50 {
		t.Fatalf("%d accepted and %d refused inputs: the corruptions did not exercise both paths", accepted, refused)
	}
}

func FuzzDecodeUsageBatch(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 8; i++ {
		b, err := proto.Marshal(randomBatch(r, i))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := referenceDecode(b)
		got, gotErr := decodeUsageBatch(b, eventwire.NewInterner())
		if (wantErr != nil) != (gotErr != nil) {
			t.Fatalf("error %v, protobuf's %v", gotErr, wantErr)
		}
		if wantErr == nil && (len(got) != 0 || len(want) != 0) && !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})
}

// BenchmarkDecodeUsage is one fetch's worth of metering's messages.
func BenchmarkDecodeUsage(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	var msgs [][]byte
	for i := 0; i < 256; i++ {
		m, err := proto.Marshal(randomBatch(r, 100))
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				if _, err := referenceDecode(m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			in := eventwire.NewInterner()
			for _, m := range msgs {
				if _, err := decodeUsageBatch(m, in); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
