package ports

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// Consumer limits: large batches, so one Postgres transaction (and one fsync)
// carries many charges. The fetch wait is short: it only applies when fewer
// than chargesFetchMax messages are pending (the tail of a burst), where it
// is pure idle latency.
const (
	chargesFetchMax  = 500
	chargesFetchWait = 10 * time.Millisecond
)

const chargesRatedPrefix = "charges.rated."

// ChargesSpec is the durable pull consumer on CHARGES. It takes no subject
// filter: natsx sends filters as filter_subjects, which NATS servers before
// 2.10 (Debian's 2.9) refuse, and CHARGES holds only charges.>; the handler
// keeps charges.rated.* and acks anything else unread.
// What cannot be posted goes to dl (ledger.dead_letters).
func ChargesSpec(dl natsx.DeadLetters) natsx.ConsumerSpec {
	return natsx.ConsumerSpec{
		Stream: natsx.StreamCharges, Durable: app.ChargesConsumer,
		BatchMax: chargesFetchMax, MaxWait: chargesFetchWait, DeadLetters: dl,
	}
}

// ConsumeCharges posts every fetched batch in one Postgres transaction until
// ctx ends.
func ConsumeCharges(ctx context.Context, js jetstream.JetStream, log *slog.Logger, a *app.App, dl natsx.DeadLetters) error {
	return natsx.Consume(ctx, js, log, ChargesSpec(dl), func(ctx context.Context, msgs []jetstream.Msg) error {
		in := make([]app.Message, 0, len(msgs))
		for _, m := range msgs {
			if strings.HasPrefix(m.Subject(), chargesRatedPrefix) {
				in = append(in, app.Message{ID: natsx.MsgID(m), Payload: m.Data()})
			}
		}
		_, err := a.PostCharges(ctx, in)
		return err
	})
}
