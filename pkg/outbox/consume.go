package outbox

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/pg"
)

// ConsumeOnce runs a durable consumer whose effects are exactly-once: each
// pulled batch is applied in one Postgres transaction that also records the
// message ids in the schema's inbox, and apply sees only the messages not
// seen before, decoded as M. Undecodable messages are logged and skipped
// (their ids are recorded, so they do not loop).
func ConsumeOnce[M any, PM interface {
	*M
	proto.Message
}](ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, log *slog.Logger, spec natsx.ConsumerSpec, schema string,
	apply func(ctx context.Context, tx pgx.Tx, msgs []PM) error) error {
	return natsx.Consume(ctx, js, log, spec, func(ctx context.Context, msgs []jetstream.Msg) error {
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = natsx.MsgID(m)
		}
		return pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			fresh, err := Claim(ctx, tx, schema, spec.Durable, ids)
			if err != nil {
				return err
			}
			decoded := make([]PM, 0, len(fresh))
			for i, m := range msgs {
				if !fresh[ids[i]] {
					continue
				}
				ev := PM(new(M))
				if err := proto.Unmarshal(m.Data(), ev); err != nil {
					log.Error("undecodable message skipped", "consumer", spec.Durable, "subject", m.Subject(), "id", ids[i], "err", err)
					continue
				}
				decoded = append(decoded, ev)
			}
			if len(decoded) == 0 {
				return nil
			}
			return apply(ctx, tx, decoded)
		})
	})
}
