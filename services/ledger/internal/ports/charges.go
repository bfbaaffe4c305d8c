package ports

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// Consumer limits: large batches, so one Postgres transaction (and one fsync)
// carries many charges.
const (
	chargesFetchMax  = 500
	chargesFetchWait = 100 * time.Millisecond
)

// ChargesSpec is the durable pull consumer on charges.rated.>.
func ChargesSpec() natsx.ConsumerSpec {
	return natsx.ConsumerSpec{
		Stream: natsx.StreamCharges, Durable: app.ChargesConsumer,
		FilterSubjects: []string{"charges.rated.>"}, BatchMax: chargesFetchMax, MaxWait: chargesFetchWait,
	}
}

// ConsumeCharges posts every fetched batch in one Postgres transaction until
// ctx ends.
func ConsumeCharges(ctx context.Context, js jetstream.JetStream, log *slog.Logger, a *app.App) error {
	return natsx.Consume(ctx, js, log, ChargesSpec(), func(ctx context.Context, msgs []jetstream.Msg) error {
		in := make([]app.Message, len(msgs))
		for i, m := range msgs {
			in[i] = app.Message{ID: natsx.MsgID(m), Payload: m.Data()}
		}
		_, err := a.PostCharges(ctx, in)
		return err
	})
}
