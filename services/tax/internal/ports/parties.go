package ports

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/split"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/tax/internal/adapters"
	"github.com/gpubill/gpubill/services/tax/internal/app"
)

// PartyConsumerName is the durable consumer of party.updated.* that keeps the
// tax profile and jurisdiction read model.
const PartyConsumerName = "tax-parties"

const partyBatchMax = 500

// ConsumeParties keeps the tax profiles until ctx ends.
func ConsumeParties(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, store *adapters.Store, log *slog.Logger) error {
	return natsx.Consume(ctx, js, log, natsx.ConsumerSpec{
		Stream: natsx.StreamParty, Durable: PartyConsumerName, FilterSubjects: []string{"party.updated.>"}, BatchMax: partyBatchMax,
	}, func(ctx context.Context, msgs []jetstream.Msg) error {
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = natsx.MsgID(m)
		}
		return pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			fresh, err := outbox.Claim(ctx, tx, adapters.Schema, PartyConsumerName, ids)
			if err != nil {
				return err
			}
			var rows []adapters.Profile
			for i, m := range msgs {
				if !fresh[ids[i]] {
					continue
				}
				var ev eventsv1.PartyUpdated
				if err := proto.Unmarshal(m.Data(), &ev); err != nil {
					log.Error("undecodable party.updated; skipped", "id", ids[i], "err", err)
					continue
				}
				if ev.Kind != "" && ev.Kind != "provider" {
					continue
				}
				j := strings.ToUpper(strings.TrimSpace(ev.Jurisdiction))
				if j == "" {
					j = app.DefaultJurisdiction
				}
				profile := ev.TaxProfile
				if profile == "" {
					profile = split.ProfileIndividual
				}
				rows = append(rows, adapters.Profile{ProviderID: ev.PartyId, TaxProfile: profile, Jurisdiction: j, Version: ev.Version})
			}
			if err := store.UpsertProfiles(ctx, tx, rows); err != nil {
				return fmt.Errorf("party updates: %w", err)
			}
			return nil
		})
	})
}
