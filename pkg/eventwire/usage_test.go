package eventwire_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/eventwire"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
)

// TestUsageNumbersMatchEventsProto: every number here is the generated
// descriptor's for the field it names, and every field of the messages has
// one (a field added to events.proto fails here until both sides know it).
func TestUsageNumbersMatchEventsProto(t *testing.T) {
	check := func(m proto.Message, want map[string]protowire.Number) {
		t.Helper()
		fields := m.ProtoReflect().Descriptor().Fields()
		if fields.Len() != len(want) {
			t.Errorf("%s has %d fields, eventwire names %d", m.ProtoReflect().Descriptor().FullName(), fields.Len(), len(want))
		}
		for name, n := range want {
			fd := fields.ByName(protoreflect.Name(name))
			if fd == nil {
				t.Errorf("%s has no field %s", m.ProtoReflect().Descriptor().FullName(), name)
				continue
			}
			if fd.Number() != n {
				t.Errorf("%s.%s is field %d, eventwire says %d", m.ProtoReflect().Descriptor().FullName(), name, fd.Number(), n)
			}
		}
	}
	check(&eventsv1.UsageRecordedBatch{}, map[string]protowire.Number{"batch_id": eventwire.UsageBatchID, "events": eventwire.UsageBatchEvents})
	check(&eventsv1.UsageEvent{}, map[string]protowire.Number{
		"id": eventwire.UsageID, "lease_id": eventwire.UsageLeaseID, "provider_id": eventwire.UsageProviderID,
		"renter_id": eventwire.UsageRenterID, "gpu_model": eventwire.UsageGPUModel, "gpu_count": eventwire.UsageGPUCount,
		"start_time": eventwire.UsageStart, "end_time": eventwire.UsageEnd, "region": eventwire.UsageRegion,
		"workload": eventwire.UsageWorkload, "currency": eventwire.UsageCurrency, "provider_tier": eventwire.UsageProviderTier,
		"provider_pue": eventwire.UsageProviderPUE, "cycle_id": eventwire.UsageCycleID, "received_at": eventwire.UsageReceivedAt,
	})
	check(&timestamppb.Timestamp{}, map[string]protowire.Number{"seconds": eventwire.TimestampSeconds, "nanos": eventwire.TimestampNanos})
}
