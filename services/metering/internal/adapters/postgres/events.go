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
// (renter currency, provider tier and PUE, cycle). The batch ids are new
// (ids.New), so the messages are copied in: binding a call's payloads
// (~600 KB for 5 000 events) as one bytea array made pgx grow its buffer by
// appending, the largest allocation of the pipeline bench (memory profile).
//
// The messages are also held for this process's relay once the write
// commits (WithTx): it publishes them without reading them back.
func (t *Tx) PublishRecorded(ctx context.Context, acc []domain.Recorded, provs map[string]domain.Provider, rents map[string]domain.Renter) error {
	msgs := recordedMessages(acc, provs, rents)
	if err := outbox.Copy(ctx, t.tx, Schema, msgs...); err != nil {
		return err
	}
	*t.held = append(*t.held, msgs...)
	return nil
}

// recordedMessages builds one UsageRecordedBatch per provider, in the order
// of each provider's first event, encoded straight from acc (usage_wire.go):
// proto.Marshal of the same messages cost ~2 µs per event, most of it
// building the messages and their timestamps.
func recordedMessages(acc []domain.Recorded, provs map[string]domain.Provider, rents map[string]domain.Renter) []outbox.Message {
	type batch struct {
		id, subject    string
		tier, pue, cur string // the provider's, and the last renter's currency
		renter         string
		n              int
		buf            []byte
	}
	groups := map[string]*batch{}
	var order []*batch
	for i := range acc {
		b := groups[acc[i].ProviderID]
		if b == nil {
			p := provs[acc[i].ProviderID]
			b = &batch{id: ids.New("ub"), subject: subjects.UsageRecorded.Of(acc[i].ProviderID), tier: p.Tier, pue: domain.PUEString(p.PUE)}
			groups[acc[i].ProviderID] = b
			order = append(order, b)
		}
		b.n++
	}
	for _, b := range order {
		b.buf = appendBatchID(make([]byte, 0, 32+b.n*recordedEventSizeHint), b.id)
	}
	var scratch []byte
	for i := range acc {
		r := &acc[i]
		b := groups[r.ProviderID]
		if r.RenterID != b.renter {
			b.renter, b.cur = r.RenterID, rents[r.RenterID].Currency
		}
		b.buf, scratch = appendUsageEvent(b.buf, scratch, &wireEvent{
			id: r.ID, lease: r.LeaseID, provider: r.ProviderID, renter: r.RenterID, model: r.GPUModel, count: r.GPUCount,
			start: r.Start, end: r.End, region: r.Region, workload: r.Workload,
			currency: b.cur, tier: b.tier, pue: b.pue, cycle: r.CycleID, received: r.ReceivedAt,
		})
	}
	msgs := make([]outbox.Message, len(order))
	for i, b := range order {
		msgs[i] = outbox.Message{ID: b.id, Subject: b.subject, Payload: b.buf}
	}
	return msgs
}

// recordedEventSizeHint sizes a batch's buffer: an event of the pipeline
// bench encodes to ~126 bytes.
const recordedEventSizeHint = 160

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
	ev := &eventsv1.PartyUpdated{
		PartyId: r.ID, Kind: domain.KindRenter, Name: r.Name, Currency: r.Currency,
		CreditLimit: r.CreditLimit.String(), Version: r.Version, UpdatedAt: timestamppb.New(r.UpdatedAt), Status: r.Status,
	}
	if r.Closed() {
		ev.ClosedAt = timestamppb.New(r.ClosedAt)
	}
	return t.publishParty(ctx, ev)
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
