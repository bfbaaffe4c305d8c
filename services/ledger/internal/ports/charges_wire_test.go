package ports

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// decodeChargesProto is what decodeCharges replaced: proto.Unmarshal into
// the generated messages, then the charges the ledger posts.
func decodeChargesProto(m ChargesMessage) app.ChargeMessage {
	var b eventsv1.ChargesRatedBatch
	if err := proto.Unmarshal(m.Payload, &b); err != nil {
		return app.ChargeMessage{ID: m.ID, Err: err}
	}
	nLines := 0
	for _, c := range b.Charges {
		nLines += len(c.GetLines())
	}
	lines := make([]app.ChargeLine, 0, nLines)
	out := app.ChargeMessage{ID: m.ID, Charges: make([]app.RatedCharge, len(b.Charges))}
	for i, c := range b.Charges {
		first := len(lines)
		for _, l := range c.GetLines() {
			lines = append(lines, app.ChargeLine{Kind: l.GetKind(), GPUModel: l.GetGpuModel(), GPUHours: l.GetGpuHours()})
		}
		rc := &out.Charges[i]
		*rc = app.RatedCharge{ChargeID: c.GetChargeId(), LeaseID: c.GetLeaseId(), RenterID: c.GetRenterId(),
			ProviderID: c.GetProviderId(), CycleID: c.GetCycleId(), Currency: c.GetCurrency(), Amount: c.GetAmount(),
			Lines: lines[first:len(lines):len(lines)]}
		if c.GetEffectiveAt() != nil {
			rc.EffectiveAt = c.GetEffectiveAt().AsTime()
		}
	}
	return out
}

// TestDecodeChargesIsProtoUnmarshal holds decodeCharges to the generated
// decode it replaced: the same charges for every well-formed batch (unknown
// fields at every level, repeated fields, timestamps split in two), and a
// refusal wherever it refuses, over random batches, truncations and bytes
// changed at random (wrong wire types, broken lengths, invalid UTF-8 in a
// field the ledger reads or one it only checks).
func TestDecodeChargesIsProtoUnmarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	const marker = "MARK"
	words := []string{"", "chg_1", "lease-7", "r-001", "p-002", "cyc-20261112", "CNY", "2.83", "0", "usage", "pue_surcharge", "RTX_4090",
		"1.5", "night", "100+ GPU-h", "rc_01", "租户", "bev-9", marker}
	w := func() string { return words[r.IntN(len(words))] }
	ts := func() *timestamppb.Timestamp {
		if r.IntN(4) == 0 {
			return nil
		}
		return &timestamppb.Timestamp{Seconds: r.Int64N(4e9) - 1e9, Nanos: r.Int32N(1e9)}
	}
	unknown := func(m proto.Message) {
		if r.IntN(3) == 0 {
			b := protowire.AppendTag(nil, protowire.Number(50+r.IntN(10)), protowire.BytesType)
			b = protowire.AppendBytes(b, []byte(w()))
			b = protowire.AppendVarint(protowire.AppendTag(b, 60, protowire.VarintType), r.Uint64())
			m.ProtoReflect().SetUnknown(b)
		}
	}
	check := func(payload []byte, what string) {
		t.Helper()
		m := ChargesMessage{ID: "m-1", Payload: payload}
		got, want := decodeCharges(m), decodeChargesProto(m)
		if (got.Err == nil) != (want.Err == nil) {
			t.Fatalf("%s: decodeCharges err %v, proto.Unmarshal err %v (payload %x)", what, got.Err, want.Err, payload)
		}
		if got.Err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: decodeCharges\n%+v\nproto.Unmarshal\n%+v", what, got, want)
		}
	}
	for i := 0; i < 5_000; i++ {
		b := &eventsv1.ChargesRatedBatch{BatchId: w()}
		for c := r.IntN(5); c > 0; c-- {
			rc := &eventsv1.RatedCharge{ChargeId: w(), LeaseId: w(), RenterId: w(), ProviderId: w(), CycleId: w(), Currency: w(),
				Amount: w(), ExactAmount: w(), EffectiveAt: ts()}
			for e := r.IntN(4); e > 0; e-- {
				rc.EventIds = append(rc.EventIds, w())
			}
			for l := r.IntN(4); l > 0; l-- {
				cl := &eventsv1.ChargeLine{EventId: w(), Kind: w(), GpuModel: w(), GpuCount: r.Int32N(70) - 3, Band: w(), Tier: w(),
					RateCardId: w(), StartTime: ts(), EndTime: ts(), GpuHours: w(), UnitPrice: w(), Multiplier: w(), Amount: w()}
				unknown(cl)
				rc.Lines = append(rc.Lines, cl)
			}
			unknown(rc)
			b.Charges = append(b.Charges, rc)
		}
		unknown(b)
		payload, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		check(payload, "well-formed")
		if at := bytes.Index(payload, []byte(marker)); at >= 0 { // one field's string made invalid UTF-8, wherever it was
			p := append([]byte(nil), payload...)
			p[at] = 0xff
			check(p, "invalid UTF-8")
		}
		if r.IntN(2) == 0 && len(payload) > 0 {
			check(payload[:r.IntN(len(payload))], "truncated")
		}
		for k := 0; k < 3 && len(payload) > 0; k++ {
			p := append([]byte(nil), payload...)
			p[r.IntN(len(p))] = byte(r.IntN(256))
			check(p, "changed")
		}
	}
	// A timestamp given twice merges; a field of the wrong wire type is unknown.
	var p []byte
	for _, part := range [][]byte{
		protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7),
		protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 9),
	} {
		p = protowire.AppendBytes(protowire.AppendTag(p, 11, protowire.BytesType), part)
	}
	p = protowire.AppendVarint(protowire.AppendTag(p, 1, protowire.VarintType), 3)
	charge := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), p)
	check(charge, "merged timestamp")
	if got := decodeCharges(ChargesMessage{Payload: charge}); len(got.Charges) != 1 || !got.Charges[0].EffectiveAt.Equal(time.Unix(7, 9)) {
		t.Fatalf("merged timestamp: %+v", got)
	}
}

// TestDecodeChargesAllocatesWhatTheMessageHolds: a message's charges and
// lines are allocated at the size the message needs, not at a fixed guess
// (64 of each: ~13 KB for the ten charges here, against ~3.5 KB).
func TestDecodeChargesAllocatesWhatTheMessageHolds(t *testing.T) {
	const charges, linesEach = 10, 3
	b := &eventsv1.ChargesRatedBatch{BatchId: "b-1"}
	for i := range charges {
		rc := &eventsv1.RatedCharge{ChargeId: fmt.Sprintf("ch-%06d", i), LeaseId: fmt.Sprintf("lease-%06d", i), RenterId: "r-1",
			ProviderId: "p-1", CycleId: "cyc-20261112", Currency: "USD", Amount: "1.25", EffectiveAt: timestamppb.New(time.Unix(1.8e9, 0))}
		for range linesEach {
			rc.Lines = append(rc.Lines, &eventsv1.ChargeLine{Kind: "usage", GpuModel: "RTX_4090", GpuHours: "0.1"})
		}
		b.Charges = append(b.Charges, rc)
	}
	payload, err := proto.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if c, l := countCharges(payload); c != charges || l != charges*linesEach {
		t.Fatalf("counted %d charges and %d lines, want %d and %d", c, l, charges, charges*linesEach)
	}
	// A truncated message sizes nothing: decodeCharges refuses it.
	if c, l := countCharges(payload[:len(payload)-1]); c != 0 || l != 0 {
		t.Fatalf("a truncated message counted %d charges and %d lines, want none", c, l)
	}
	m := ChargesMessage{ID: "m-1", Payload: payload}
	got := decodeCharges(m)
	if got.Err != nil || len(got.Charges) != charges || cap(got.Charges) != charges {
		t.Fatalf("charges: len %d cap %d err %v, want %d", len(got.Charges), cap(got.Charges), got.Err, charges)
	}
	var before, after runtime.MemStats
	const runs = 1000
	runtime.ReadMemStats(&before)
	for range runs {
		_ = decodeCharges(m)
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	// The charges and lines themselves, then each charge's two strings of
	// its own (its id and lease id: ~16 bytes each) and amount.
	want := uint64(charges)*uint64(unsafe.Sizeof(app.RatedCharge{})) + uint64(charges*linesEach)*uint64(unsafe.Sizeof(app.ChargeLine{})) + charges*3*16
	t.Logf("%d bytes per decode, %d held", per, want)
	if per > want*5/4 {
		t.Fatalf("decodeCharges allocated %d bytes for a message whose charges, lines and strings take %d", per, want)
	}
}
