package postgres

import (
	"context"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// PublishCharges puts charges.rated.{provider} into the outbox, one
// ChargesRatedBatch per batch. A batch's id is unique to the rating's first
// source message (app.batchByProvider), which the inbox lets rate once, as
// its charges' ids are: the batches are copied in (outbox.Copy; a repeated
// id fails the transaction, as a repeated charge id fails InsertCharges'
// COPY), where an insert of bound payload arrays that skipped existing ids
// cost the backends ~2 % of their CPU in the pipeline bench. They are also
// held for this process's relay once the write commits (WithTx): reading
// them back was another ~1.4 %.
func (t *Tx) PublishCharges(ctx context.Context, bs []domain.ChargeBatch) error {
	msgs := make([]outbox.Message, 0, len(bs))
	for _, b := range bs {
		pb := &eventsv1.ChargesRatedBatch{BatchId: b.ID, Charges: make([]*eventsv1.RatedCharge, 0, len(b.Charges))}
		for _, c := range b.Charges {
			pb.Charges = append(pb.Charges, ratedCharge(c))
		}
		payload, err := proto.Marshal(pb)
		if err != nil {
			return err
		}
		msgs = append(msgs, outbox.Message{ID: b.ID, Subject: subjects.ChargesRated.Of(b.ProviderID), Payload: payload})
	}
	if err := outbox.Copy(ctx, t.tx, Schema, msgs...); err != nil {
		return err
	}
	*t.held = append(*t.held, msgs...)
	return nil
}

func ratedCharge(c *domain.Charge) *eventsv1.RatedCharge {
	rc := &eventsv1.RatedCharge{ChargeId: c.ID, LeaseId: c.LeaseID, RenterId: c.RenterID, ProviderId: c.ProviderID,
		CycleId: c.CycleID, Currency: c.Currency.Code, EventIds: c.EventIDs, EffectiveAt: timestamppb.New(c.EffectiveAt),
		Amount: c.Currency.Format(c.Amount), ExactAmount: domain.Str(c.ExactAmount),
		Lines: make([]*eventsv1.ChargeLine, 0, len(c.Lines))}
	for _, l := range c.Lines {
		rc.Lines = append(rc.Lines, &eventsv1.ChargeLine{EventId: l.EventID, Kind: l.Kind, GpuModel: l.GPUModel, GpuCount: l.GPUCount,
			Band: l.Band, Tier: l.Tier, RateCardId: l.RateCardID, StartTime: timestamppb.New(l.Start), EndTime: timestamppb.New(l.End),
			GpuHours: l.GPUHours, UnitPrice: l.UnitPrice, Multiplier: l.Multiplier, Amount: l.Amount})
	}
	return rc
}

// encodeUsageEvent is a pending event's payload: the usage.recorded event.
func encodeUsageEvent(e *domain.UsageEvent) ([]byte, error) {
	pb := &eventsv1.UsageEvent{Id: e.ID, LeaseId: e.LeaseID, ProviderId: e.ProviderID, RenterId: e.RenterID,
		GpuModel: e.GPUModel, GpuCount: e.GPUCount, StartTime: timestamppb.New(e.Start), EndTime: timestamppb.New(e.End),
		Region: e.Region, Workload: e.Workload, Currency: e.Currency, ProviderTier: e.ProviderTier,
		ProviderPue: e.ProviderPUE, CycleId: e.CycleID}
	if !e.ReceivedAt.IsZero() {
		pb.ReceivedAt = timestamppb.New(e.ReceivedAt)
	}
	return proto.Marshal(pb)
}

func decodeUsageEvent(b []byte) (domain.UsageEvent, error) {
	var e eventsv1.UsageEvent
	if err := proto.Unmarshal(b, &e); err != nil {
		return domain.UsageEvent{}, err
	}
	out := domain.UsageEvent{ID: e.Id, LeaseID: e.LeaseId, ProviderID: e.ProviderId, RenterID: e.RenterId,
		GPUModel: e.GpuModel, GPUCount: e.GpuCount, Start: e.StartTime.AsTime(), End: e.EndTime.AsTime(),
		Region: e.Region, Workload: e.Workload, Currency: e.Currency, ProviderTier: e.ProviderTier,
		ProviderPUE: e.ProviderPue, CycleID: e.CycleId}
	if e.ReceivedAt != nil {
		out.ReceivedAt = e.ReceivedAt.AsTime()
	}
	return out, nil
}

// encodeCardBody is how a card's body is stored: the CreateRateCardRequest
// it was created with (without its id), deterministic.
func encodeCardBody(in domain.CardInput) ([]byte, error) {
	r := &pricingv1.CreateRateCardRequest{Currency: in.Currency, EffectiveFrom: timestamppb.New(in.EffectiveFrom)}
	for _, p := range in.Prices {
		r.GpuPrices = append(r.GpuPrices, &pricingv1.GpuPrice{GpuModel: p.Model, Hourly: p.Hourly, Region: p.Region})
	}
	for _, b := range in.Bands {
		r.TimeBands = append(r.TimeBands, &pricingv1.TimeBand{Name: b.Name, Start: b.Start, End: b.End, Timezone: b.TimeZone, Multiplier: b.Multiplier})
	}
	for _, t := range in.Tiers {
		r.VolumeTiers = append(r.VolumeTiers, &pricingv1.VolumeTier{UpToGpuHours: t.UpToGPUHours, Discount: t.Discount})
	}
	if p := in.PUE; p != nil {
		r.PueSurcharge = &pricingv1.PueSurcharge{Threshold: p.Threshold, PerGpuHour: p.PerGPUHour}
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(r)
}

func decodeCardBody(b []byte) (domain.CardInput, error) {
	var r pricingv1.CreateRateCardRequest
	if err := proto.Unmarshal(b, &r); err != nil {
		return domain.CardInput{}, err
	}
	in := domain.CardInput{Currency: r.GetCurrency()}
	if r.EffectiveFrom != nil {
		in.EffectiveFrom = r.EffectiveFrom.AsTime()
	}
	for _, p := range r.GpuPrices {
		in.Prices = append(in.Prices, domain.PriceInput{Model: p.GpuModel, Hourly: p.Hourly, Region: p.Region})
	}
	for _, b := range r.TimeBands {
		in.Bands = append(in.Bands, domain.BandInput{Name: b.Name, Start: b.Start, End: b.End, TimeZone: b.Timezone, Multiplier: b.Multiplier})
	}
	for _, t := range r.VolumeTiers {
		in.Tiers = append(in.Tiers, domain.TierInput{UpToGPUHours: t.UpToGpuHours, Discount: t.Discount})
	}
	if p := r.PueSurcharge; p != nil {
		in.PUE = &domain.PUEInput{Threshold: p.Threshold, PerGPUHour: p.PerGpuHour}
	}
	return in, nil
}
