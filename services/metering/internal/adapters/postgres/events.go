package postgres

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// PublishRecorded puts usage.recorded.{provider} into the outbox: the
// accepted events grouped by provider, enriched with what pricing needs
// (renter currency, provider tier and PUE, cycle).
func (t *Tx) PublishRecorded(ctx context.Context, acc []domain.Recorded, provs map[string]domain.Provider, rents map[string]domain.Renter) error {
	msgs, err := recordedMessages(acc, provs, rents)
	if err != nil {
		return err
	}
	return outbox.Add(ctx, t.tx, Schema, msgs...)
}

func recordedMessages(acc []domain.Recorded, provs map[string]domain.Provider, rents map[string]domain.Renter) ([]outbox.Message, error) {
	groups := map[string]*eventsv1.UsageRecordedBatch{}
	var order []string
	for _, r := range acc {
		b, ok := groups[r.ProviderID]
		if !ok {
			b = &eventsv1.UsageRecordedBatch{BatchId: ids.New("ub")}
			groups[r.ProviderID] = b
			order = append(order, r.ProviderID)
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
	msgs := make([]outbox.Message, 0, len(order))
	for _, prov := range order {
		b := groups[prov]
		payload, err := proto.Marshal(b)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, outbox.Message{ID: b.BatchId, Subject: subjects.UsageRecorded.Of(prov), Payload: payload})
	}
	return msgs, nil
}

// PublishProvider puts party.updated.{id} for p's version into the outbox.
func (t *Tx) PublishProvider(ctx context.Context, p domain.Provider) error {
	return t.publishParty(ctx, &eventsv1.PartyUpdated{
		PartyId: p.ID, Kind: domain.KindProvider, Name: p.Name, Tier: p.Tier, TaxProfile: p.TaxProfile,
		Jurisdiction: p.Jurisdiction, Pue: domain.PUEString(p.PUE), Currency: p.Currency,
		Version: p.Version, UpdatedAt: timestamppb.New(p.UpdatedAt),
	})
}

// PublishRenter puts party.updated.{id} for r's version into the outbox.
func (t *Tx) PublishRenter(ctx context.Context, r domain.Renter) error {
	return t.publishParty(ctx, &eventsv1.PartyUpdated{
		PartyId: r.ID, Kind: domain.KindRenter, Name: r.Name, Currency: r.Currency,
		CreditLimit: r.CreditLimit.String(), Version: r.Version, UpdatedAt: timestamppb.New(r.UpdatedAt),
	})
}

// publishParty adds party.updated.{id} to the outbox; the message id names
// the party and version, so a version is published once.
func (t *Tx) publishParty(ctx context.Context, ev *eventsv1.PartyUpdated) error {
	b, err := proto.Marshal(ev)
	if err != nil {
		return err
	}
	return outbox.Add(ctx, t.tx, Schema, outbox.Message{
		ID:      fmt.Sprintf("party-%s-%s-v%d", ev.Kind, ev.PartyId, ev.Version),
		Subject: subjects.PartyUpdated.Of(ev.PartyId),
		Payload: b,
	})
}
