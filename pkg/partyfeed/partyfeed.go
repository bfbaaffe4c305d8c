// Package partyfeed is the one consumer of party.updated.* behind the
// services' read models of parties (tax keeps providers' profiles and
// jurisdictions, settlement and pricing (quotes) their tiers, the ledger
// renters' currencies and credit limits). Parties are owned by metering; a
// read model only ever applies its events.
package partyfeed

import (
	"context"
	"log/slog"

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

// Apply applies one batch of party events in stream order: ids[i] is
// evs[i]'s message id, and the batch holds every kind's events. A read model
// claims every id (outbox inbox) in the transaction that applies the fresh
// ones and keeps only its kind's (IsProvider, IsRenter); it may return a
// natsx.PoisonError naming the events that can never be applied.
type Apply func(ctx context.Context, ids []string, evs []*eventsv1.PartyUpdated) error

// Consume runs the durable consumer named durable until ctx ends, handing
// apply each batch of party.updated.* events; an undecodable event goes to
// dl at once, as does one that keeps failing.
func Consume(ctx context.Context, js jetstream.JetStream, log *slog.Logger, durable string, dl natsx.DeadLetters, apply Apply) error {
	spec := natsx.ConsumerSpec{Stream: natsx.StreamParty, Durable: durable, FilterSubjects: []string{subjects.PartyUpdated.All()},
		BatchMax: batchMax, DeadLetters: dl}
	return outbox.ConsumeDecoded[eventsv1.PartyUpdated](ctx, js, log, spec, apply)
}
