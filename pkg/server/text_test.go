package server

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gpubill/gpubill/pkg/apperr"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
)

func str(s string) *structpb.Value {
	return &structpb.Value{Kind: &structpb.Value_StringValue{StringValue: s}}
}

func list(vs ...*structpb.Value) *structpb.Value {
	return &structpb.Value{Kind: &structpb.Value_ListValue{ListValue: &structpb.ListValue{Values: vs}}}
}

func obj(f map[string]*structpb.Value) *structpb.Value {
	return &structpb.Value{Kind: &structpb.Value_StructValue{StructValue: &structpb.Struct{Fields: f}}}
}

func events(n, bad int, leaseID string) *meteringv1.IngestUsageEventsRequest {
	r := &meteringv1.IngestUsageEventsRequest{}
	for i := 0; i < n; i++ {
		l := fmt.Sprintf("lease-%d", i)
		if i == bad {
			l = leaseID
		}
		r.Events = append(r.Events, &meteringv1.UsageEventInput{Id: fmt.Sprintf("ev-%d", i), LeaseId: l, GpuModel: "RTX_4090", Region: "cn-east"})
	}
	return r
}

// TestCheckTextNamesTheField: each bad string is named by its path as the
// JSON body names it (list index, map key, nesting), and only bad ones are.
func TestCheckTextNamesTheField(t *testing.T) {
	tests := []struct {
		name string
		give proto.Message
		want []string // "field: reason"
	}{
		{name: "clean", give: events(3, -1, ""), want: nil},
		{name: "list element", give: events(3, 2, "l\x00"), want: []string{"events[2].lease_id: contains a NUL byte"}},
		{name: "invalid UTF-8", give: events(3, 0, "\xff"), want: []string{"events[0].lease_id: is not valid UTF-8"}},
		{name: "top-level field", give: &meteringv1.UsageEventInput{Id: "e\x00", Region: "\xff", Workload: "ok"},
			want: []string{"id: contains a NUL byte", "region: is not valid UTF-8"}},
		{name: "two fields of one element", give: &meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{
			{Id: "ok"}, {Id: "x", LeaseId: "\x00", GpuModel: "RTX_4090", Workload: "\xfe"}}},
			want: []string{"events[1].lease_id: contains a NUL byte", "events[1].workload: is not valid UTF-8"}},
		{name: "nested list in map", give: &structpb.Struct{Fields: map[string]*structpb.Value{"a": list(str("ok"), str("b\x00"))}},
			want: []string{`fields["a"].list_value.values[1].string_value: contains a NUL byte`}},
		{name: "map key", give: &structpb.Struct{Fields: map[string]*structpb.Value{"k\x00": str("x")}},
			want: []string{"fields key: contains a NUL byte"}},
		{name: "map in map", give: &structpb.Struct{Fields: map[string]*structpb.Value{"b": obj(map[string]*structpb.Value{"c": str("\xff")})}},
			want: []string{`fields["b"].struct_value.fields["c"].string_value: is not valid UTF-8`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			if err := checkText(tt.give); err != nil {
				var inv *apperr.InvalidError
				if !errors.As(err, &inv) {
					t.Fatalf("error %v is not an InvalidError", err)
				}
				for _, v := range inv.Violations {
					got = append(got, v.Field+": "+v.Reason)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// BenchmarkCheckTextIngest is the guard on one full ingest request.
func BenchmarkCheckTextIngest(b *testing.B) {
	r := events(5000, -1, "")
	b.ReportAllocs()
	for b.Loop() {
		if err := checkText(r); err != nil {
			b.Fatal(err)
		}
	}
}
