// Package partyfeed is the one consumer of party.updated.* behind the
// services' read models of parties (tax keeps providers' profiles and
// jurisdictions, settlement their tiers, the ledger renters' currencies and
// credit limits). Parties are owned by metering; a read model only ever
// applies its events.
package partyfeed

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
)

// batchMax is the party events applied in one transaction.
const batchMax = 500

// PartyUpdated.kind of each party; events published before kinds existed
// carry none and are providers'.
const (
	KindProvider = "provider"
	KindRenter   = "renter"
)

// IsProvider reports whether ev is a provider's.
func IsProvider(ev *eventsv1.PartyUpdated) bool { return ev.Kind == "" || ev.Kind == KindProvider }

// IsRenter reports whether ev is a renter's.
func IsRenter(ev *eventsv1.PartyUpdated) bool { return ev.Kind == KindRenter }

// Apply applies one batch of a kind's party events inside tx; it may return
// a natsx.PoisonError naming the events that can never be applied.
type Apply func(ctx context.Context, tx pgx.Tx, evs []*eventsv1.PartyUpdated) error

// ConsumeProviders runs the durable consumer named durable until ctx ends:
// each batch of party.updated.* events is applied exactly once (outbox
// inbox in schema) in one transaction, apply seeing the providers' events in
// stream order; an undecodable event is dead-lettered in schema.
func ConsumeProviders(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, log *slog.Logger, schema, durable string, apply Apply) error {
	return consume(ctx, js, pool, log, schema, durable, IsProvider, apply)
}

// ConsumeRenters is ConsumeProviders for the renters' events.
func ConsumeRenters(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, log *slog.Logger, schema, durable string, apply Apply) error {
	return consume(ctx, js, pool, log, schema, durable, IsRenter, apply)
}

func consume(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, log *slog.Logger, schema, durable string,
	keep func(*eventsv1.PartyUpdated) bool, apply Apply) error {
	spec := natsx.ConsumerSpec{Stream: natsx.StreamParty, Durable: durable, FilterSubjects: []string{subjects.PartyUpdated.All()}, BatchMax: batchMax}
	return outbox.ConsumeOnce(ctx, js, pool, log, spec, schema, func(ctx context.Context, tx pgx.Tx, evs []*eventsv1.PartyUpdated) error {
		kept := evs[:0:0]
		for _, ev := range evs {
			if keep(ev) {
				kept = append(kept, ev)
			}
		}
		return apply(ctx, tx, kept)
	})
}
