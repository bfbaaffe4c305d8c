package outbox

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/pg"
)

// ConsumeOnce runs a durable consumer whose effects are exactly-once: each
// pulled batch is applied in one Postgres transaction that also records the
// message ids in the schema's inbox, and apply sees only the messages not
// seen before, decoded as M. An undecodable message goes to the schema's
// dead_letters table (pkg/deadletter), as does one that keeps failing, unless
// spec names its own DeadLetters.
func ConsumeOnce[M any, PM interface {
	*M
	proto.Message
}](ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, log *slog.Logger, spec natsx.ConsumerSpec, schema string,
	apply func(ctx context.Context, tx pgx.Tx, msgs []PM) error) error {
	if spec.DeadLetters == nil {
		spec.DeadLetters = deadletter.New(pool, schema, log)
	}
	return ConsumeDecoded(ctx, js, log, spec, func(ctx context.Context, ids []string, events []PM) error {
		return pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			fresh, err := Claim(ctx, tx, schema, spec.Durable, ids)
			if err != nil {
				return err
			}
			decoded := make([]PM, 0, len(fresh))
			for i := range events {
				if fresh[ids[i]] {
					decoded = append(decoded, events[i])
					delete(fresh, ids[i]) // the same id twice in one fetch counts once
				}
			}
			if len(decoded) == 0 {
				return nil
			}
			return apply(ctx, tx, decoded)
		})
	})
}

// ConsumeDecoded runs a durable consumer that hands each pulled batch to
// apply decoded as M, with the message ids (ids[i] is msgs[i]'s); an
// undecodable message goes to spec.DeadLetters at once. apply makes its
// effects exactly-once itself, for a service whose use case owns the
// transaction: it claims the ids in the transaction that applies them and
// applies only the fresh ones, an id twice in one batch once.
func ConsumeDecoded[M any, PM interface {
	*M
	proto.Message
}](ctx context.Context, js jetstream.JetStream, log *slog.Logger, spec natsx.ConsumerSpec,
	apply func(ctx context.Context, ids []string, msgs []PM) error) error {
	return natsx.Consume(ctx, js, log, spec, func(ctx context.Context, msgs []jetstream.Msg) error {
		ids := make([]string, len(msgs))
		events := make([]PM, len(msgs))
		var poison natsx.PoisonError
		for i, m := range msgs {
			ids[i] = natsx.MsgID(m)
			events[i] = PM(new(M))
			if err := proto.Unmarshal(m.Data(), events[i]); err != nil {
				poison.Add(ids[i], fmt.Errorf("undecodable %T: %w", events[i], err))
			}
		}
		if len(poison.ByID) > 0 {
			return &poison
		}
		return apply(ctx, ids, events)
	})
}
