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
	checkNumbers(t, &eventsv1.UsageRecordedBatch{}, map[string]protowire.Number{"batch_id": eventwire.UsageBatchID, "events": eventwire.UsageBatchEvents})
	checkNumbers(t, &eventsv1.UsageEvent{}, map[string]protowire.Number{
		"id": eventwire.UsageID, "lease_id": eventwire.UsageLeaseID, "provider_id": eventwire.UsageProviderID,
		"renter_id": eventwire.UsageRenterID, "gpu_model": eventwire.UsageGPUModel, "gpu_count": eventwire.UsageGPUCount,
		"start_time": eventwire.UsageStart, "end_time": eventwire.UsageEnd, "region": eventwire.UsageRegion,
		"workload": eventwire.UsageWorkload, "currency": eventwire.UsageCurrency, "provider_tier": eventwire.UsageProviderTier,
		"provider_pue": eventwire.UsageProviderPUE, "cycle_id": eventwire.UsageCycleID, "received_at": eventwire.UsageReceivedAt,
	})
	checkNumbers(t, &timestamppb.Timestamp{}, map[string]protowire.Number{"seconds": eventwire.TimestampSeconds, "nanos": eventwire.TimestampNanos})
}

// TestLedgerPostedNumbersMatchEventsProto: the same for ledger.posted.
func TestLedgerPostedNumbersMatchEventsProto(t *testing.T) {
	checkNumbers(t, &eventsv1.LedgerPostedBatch{}, map[string]protowire.Number{
		"batch_id": eventwire.PostedBatchID, "transactions": eventwire.PostedBatchTransactions})
	checkNumbers(t, &eventsv1.LedgerPosted{}, map[string]protowire.Number{
		"transaction_id": eventwire.PostedTransactionID, "idempotency_key": eventwire.PostedIdempotencyKey,
		"effective_at": eventwire.PostedEffectiveAt, "created_at": eventwire.PostedCreatedAt, "postings": eventwire.PostedPostings})
	checkNumbers(t, &eventsv1.Posting{}, map[string]protowire.Number{
		"account": eventwire.PostingAccount, "direction": eventwire.PostingDirection,
		"amount": eventwire.PostingAmount, "currency": eventwire.PostingCurrency})
}

// TestChargesRatedNumbersMatchEventsProto: the same for charges.rated.
func TestChargesRatedNumbersMatchEventsProto(t *testing.T) {
	checkNumbers(t, &eventsv1.ChargesRatedBatch{}, map[string]protowire.Number{"batch_id": eventwire.RatedBatchID, "charges": eventwire.RatedBatchCharges})
	checkNumbers(t, &eventsv1.RatedCharge{}, map[string]protowire.Number{
		"charge_id": eventwire.RatedChargeID, "lease_id": eventwire.RatedLeaseID, "renter_id": eventwire.RatedRenterID,
		"provider_id": eventwire.RatedProviderID, "cycle_id": eventwire.RatedCycleID, "currency": eventwire.RatedCurrency,
		"amount": eventwire.RatedAmount, "exact_amount": eventwire.RatedExactAmount, "event_ids": eventwire.RatedEventIDs,
		"lines": eventwire.RatedLines, "effective_at": eventwire.RatedEffectiveAt})
	checkNumbers(t, &eventsv1.ChargeLine{}, map[string]protowire.Number{
		"event_id": eventwire.LineEventID, "kind": eventwire.LineKind, "gpu_model": eventwire.LineGPUModel,
		"gpu_count": eventwire.LineGPUCount, "band": eventwire.LineBand, "tier": eventwire.LineTier,
		"rate_card_id": eventwire.LineRateCardID, "start_time": eventwire.LineStart, "end_time": eventwire.LineEnd,
		"gpu_hours": eventwire.LineGPUHours, "unit_price": eventwire.LineUnitPrice, "multiplier": eventwire.LineMultiplier,
		"amount": eventwire.LineAmount})
}

// checkNumbers: m has exactly the fields want names, with those numbers.
func checkNumbers(t *testing.T, m proto.Message, want map[string]protowire.Number) {
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
