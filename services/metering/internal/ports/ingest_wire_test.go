package ports

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gpubill/gpubill/pkg/apperr"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

func TestIngestFieldNumbersMatchTheProto(t *testing.T) {
	req := (&meteringv1.IngestUsageEventsRequest{}).ProtoReflect().Descriptor()
	if got := req.Fields().ByName("events").Number(); got != ingestEvents || req.Fields().Len() != 1 {
		t.Fatalf("IngestUsageEventsRequest: events is field %d of %d fields", got, req.Fields().Len())
	}
	fields := (&meteringv1.UsageEventInput{}).ProtoReflect().Descriptor().Fields()
	want := map[protoreflect.Name]protowire.Number{"id": inputID, "lease_id": inputLeaseID, "provider_id": inputProviderID,
		"renter_id": inputRenterID, "gpu_model": inputGPUModel, "gpu_count": inputGPUCount, "start_time": inputStartTime,
		"end_time": inputEndTime, "region": inputRegion, "workload": inputWorkload, "malformed": inputMalformed}
	if fields.Len() != len(want) {
		t.Fatalf("UsageEventInput has %d fields, the decoder knows %d", fields.Len(), len(want))
	}
	for name, num := range want {
		f := fields.ByName(name)
		if f == nil || f.Number() != num {
			t.Fatalf("UsageEventInput.%s: descriptor %v, decoder %d", name, f, num)
		}
	}
}

// randomText is a string from a small alphabet that recurs (as a batch's
// parties and times do), sometimes with non-ASCII or empty.
func randomText(r *rand.Rand, pool []string) string {
	switch r.IntN(12) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("é-%d-水", r.IntN(5))
	}
	return pool[r.IntN(len(pool))]
}

// randomInput is a request body of n events, written field by field in
// random order, some fields left out and some written twice.
func randomInput(r *rand.Rand, n int) []byte {
	pool := []string{"p-001", "r-002", "RTX_4090", "cn-east", "training", "2026-12-01T10:00:00Z", "2026-12-01T10:06:00Z"}
	var b []byte
	for i := 0; i < n; i++ {
		var ev []byte
		nums := []protowire.Number{inputID, inputLeaseID, inputProviderID, inputRenterID, inputGPUModel, inputGPUCount,
			inputStartTime, inputEndTime, inputRegion, inputWorkload}
		r.Shuffle(len(nums), func(a, c int) { nums[a], nums[c] = nums[c], nums[a] })
		for _, num := range nums {
			times := 1 // mostly once; sometimes absent, sometimes twice
			switch r.IntN(10) {
			case 0:
				times = 0
			case 1:
				times = 2
			}
			for k := 0; k < times; k++ {
				if num == inputGPUCount {
					v := uint64(r.IntN(70))
					if r.IntN(10) == 0 {
						v = r.Uint64() // past int32: protobuf keeps the low 32 bits
					}
					ev = protowire.AppendVarint(protowire.AppendTag(ev, num, protowire.VarintType), v)
					continue
				}
				s := randomText(r, pool)
				if num == inputID || num == inputLeaseID {
					s = fmt.Sprintf("id-%d-%d", i, r.IntN(1000))
				}
				ev = protowire.AppendString(protowire.AppendTag(ev, num, protowire.BytesType), s)
			}
		}
		b = protowire.AppendBytes(protowire.AppendTag(b, ingestEvents, protowire.BytesType), ev)
	}
	return b
}

// TestDecodeIngestRequestIsProtoUnmarshal holds decodeIngestRequest to the
// generated decode: where it decodes, the request equals proto.Unmarshal's
// of the same bytes; where protobuf refuses the bytes, it declines; and it
// decodes every clean request (else it would never run).
func TestDecodeIngestRequestIsProtoUnmarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var clean [][]byte
	for i := 0; i < 2000; i++ {
		clean = append(clean, randomInput(r, r.IntN(40)))
	}
	gen, err := proto.Marshal(&meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{
		{Id: "e-1", LeaseId: "l-1", ProviderId: "p-1", RenterId: "r-1", GpuModel: "H100", GpuCount: 8, StartTime: "2026-12-01T00:00:00Z",
			EndTime: "2026-12-01T01:00:00Z", Region: "cn-east", Workload: "training"}, {}, {GpuCount: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	clean = append(clean, gen, nil, nil)
	for i, b := range clean {
		var got, want meteringv1.IngestUsageEventsRequest
		if i%10 == 0 || i == len(clean)-1 { // a request that already holds something: Unmarshal replaces it
			got.Events = []*meteringv1.UsageEventInput{{Id: "before"}}
			want.Events = []*meteringv1.UsageEventInput{{Id: "before"}}
		}
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatalf("clean input %d: protobuf refused it: %v", i, err)
		}
		if !decodeIngestRequest(b, &got) {
			t.Fatalf("clean input %d: declined", i)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("clean input %d:\n got %v\nwant %v", i, &got, &want)
		}
	}

	// What it must leave to protobuf: unknown fields (kept by protobuf),
	// known fields of another wire type, invalid UTF-8, and corruptions.
	var odd [][]byte
	odd = append(odd, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1))
	odd = append(odd, protowire.AppendVarint(protowire.AppendTag(clean[0], ingestEvents, protowire.VarintType), 1))
	for _, ev := range [][]byte{
		protowire.AppendString(protowire.AppendTag(nil, 11, protowire.BytesType), "x"),
		protowire.AppendString(protowire.AppendTag(nil, inputGPUCount, protowire.BytesType), "8"),
		protowire.AppendVarint(protowire.AppendTag(nil, inputRegion, protowire.VarintType), 3),
		protowire.AppendFixed32(protowire.AppendTag(nil, inputID, protowire.Fixed32Type), 3),
		protowire.AppendString(protowire.AppendTag(nil, inputRegion, protowire.BytesType), "cn-\xff"),
		protowire.AppendString(protowire.AppendTag(nil, inputID, protowire.BytesType), "\xc3"),
		protowire.AppendString(protowire.AppendTag(nil, inputProviderID, protowire.BytesType), "p-\xe6\xb0"),
	} {
		odd = append(odd, protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), clean[1]...), ingestEvents, protowire.BytesType), ev))
	}
	for i := 0; i < 4000; i++ {
		b := append([]byte(nil), clean[r.IntN(len(clean)-1)]...)
		if len(b) == 0 {
			continue
		}
		switch i % 3 {
		case 0:
			b = b[:r.IntN(len(b))]
		case 1:
			b[r.IntN(len(b))] = byte(r.IntN(256))
		default:
			b[r.IntN(len(b))] ^= 0x80
		}
		odd = append(odd, b)
	}
	var decoded, declined, refused int
	for i, b := range odd {
		var got, want meteringv1.IngestUsageEventsRequest
		wantErr := proto.Unmarshal(b, &want)
		if !decodeIngestRequest(b, &got) {
			declined++
			if !proto.Equal(&got, &meteringv1.IngestUsageEventsRequest{}) {
				t.Fatalf("odd input %d: declined but changed the request: %v", i, &got)
			}
			if wantErr != nil {
				refused++
			}
			continue
		}
		decoded++
		if wantErr != nil {
			t.Fatalf("odd input %d: decoded what protobuf refuses (%v): %v", i, wantErr, &got)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("odd input %d:\n got %v\nwant %v", i, &got, &want)
		}
	}
	if decoded < 500 || declined < 500 || refused < 200 {
		t.Fatalf("%d decoded, %d declined (%d refused by protobuf) of the odd inputs: the corruptions did not exercise each path", decoded, declined, refused)
	}
}

// BenchmarkDecodeIngestRequest is one 5 000-event request shaped as the
// pipeline bench's (services/gpubill/internal/e2e): leases of ten
// consecutive six-minute events, 50 providers, 100 renters.
func BenchmarkDecodeIngestRequest(b *testing.B) {
	body, err := proto.Marshal(benchIngestRequest())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m meteringv1.IngestUsageEventsRequest
			if err := proto.Unmarshal(body, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m meteringv1.IngestUsageEventsRequest
			if !decodeIngestRequest(body, &m) {
				b.Fatal("declined")
			}
		}
	})
}

// benchIngestRequest is one 5 000-event request shaped as the pipeline
// bench's (services/gpubill/internal/e2e): leases of ten consecutive
// six-minute events, 50 providers, 100 renters.
func benchIngestRequest() *meteringv1.IngestUsageEventsRequest {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	req := &meteringv1.IngestUsageEventsRequest{}
	for i := 0; i < 5000; i++ {
		lease, k := i/10, i%10
		start := base.Add(time.Duration(lease%600) * time.Minute).Add(time.Duration(k) * 6 * time.Minute)
		req.Events = append(req.Events, &meteringv1.UsageEventInput{Id: fmt.Sprintf("tbev-%d", i), LeaseId: fmt.Sprintf("tblease-%d", lease),
			ProviderId: fmt.Sprintf("tp-%03d", lease%50), RenterId: fmt.Sprintf("tr-%03d", lease%100), GpuModel: "RTX_4090",
			GpuCount: int32(1 + lease%4), StartTime: start.Format(time.RFC3339), EndTime: start.Add(6 * time.Minute).Format(time.RFC3339),
			Region: "cn-east", Workload: "training"})
	}
	return req
}

// emptyEventsWire is an encoded request of n empty events (two bytes each:
// 4 million in the 8 MiB the listener takes).
func emptyEventsWire(n int) []byte {
	return bytes.Repeat(protowire.AppendBytes(protowire.AppendTag(nil, ingestEvents, protowire.BytesType), nil), n)
}

// TestIngestRequestOfTooManyEventsIsRefusedUndecoded: the listener counts
// an ingest request's events before decodeIngestRequest or protobuf decodes
// it (server.LimitWith), and refuses more than domain.BatchEventsMax as
// invalid events, without allocating per event: 4 million empty events in
// 8 MiB were 4 million UsageEventInputs (decodeIngestRequest's
// make([]UsageEventInput, n)) before the guard or the use case looked.
func TestIngestRequestOfTooManyEventsIsRefusedUndecoded(t *testing.T) {
	if err := limitIngestWire(emptyEventsWire(domain.BatchEventsMax)); err != nil {
		t.Fatalf("%d events: %v", domain.BatchEventsMax, err)
	}
	for _, n := range []int{domain.BatchEventsMax + 1, 4_000_000} {
		b := emptyEventsWire(n)
		err := limitIngestWire(b)
		var inv *apperr.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "events" ||
			!strings.Contains(err.Error(), fmt.Sprintf("%d events in one call; at most %d", n, domain.BatchEventsMax)) {
			t.Fatalf("%d events: %v, want events refused", n, err)
		}
		if allocs := testing.AllocsPerRun(3, func() {
			if limitIngestWire(b) == nil {
				t.Fatal("passed")
			}
		}); allocs > 10 {
			t.Errorf("%d events: %.0f allocations to refuse, want a few (none per event)", n, allocs)
		}
	}
	// Counted wherever the field occurs, among unknown fields, and up to
	// a truncation (protobuf decodes that far before it refuses).
	b := emptyEventsWire(3000)
	b = protowire.AppendString(protowire.AppendTag(b, 99, protowire.BytesType), "unknown")
	b = append(b, emptyEventsWire(3000)...)
	b = append(b, protowire.AppendTag(nil, ingestEvents, protowire.BytesType)...)
	b = append(b, 0x7f) // a length past the end
	if n := wireEvents(b); n != 6000 {
		t.Errorf("wireEvents = %d, want 6000", n)
	}
	if limitIngestWire(b) == nil {
		t.Error("6 000 events around an unknown field and a truncation: not refused")
	}
}

// BenchmarkIngestLimit is what counting a 5 000-event request's events
// costs, per call (ns/op / 5 000 is per event), on the wire and as JSON.
func BenchmarkIngestLimit(b *testing.B) {
	req := benchIngestRequest()
	wire, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(wire)))
		for b.Loop() {
			if wireEvents(wire) != len(req.Events) {
				b.Fatal("miscounted")
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if jsonEvents(body) != len(req.Events) {
				b.Fatal("miscounted")
			}
		}
	})
	// What the counts are beside: the decoding of the same request.
	b.Run("wire-decode", func(b *testing.B) {
		b.SetBytes(int64(len(wire)))
		for b.Loop() {
			var m meteringv1.IngestUsageEventsRequest
			if !decodeIngestRequest(wire, &m) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("json-decode", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var m meteringv1.IngestUsageEventsRequest
			if !decodeIngestJSON(body, &m) {
				b.Fatal("declined")
			}
		}
	})
}
