package ports

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/subjects"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// Consumer limits: large batches, so one Postgres transaction (and one fsync)
// carries many charges. The fetch wait is short: it only applies when fewer
// than chargesFetchMax messages are pending (the tail of a burst), where it
// is pure idle latency.
// Two pull loops share the durable consumer (as two replicas would): while
// one batch's transaction commits or waits on the hot balance rows (the
// upsert is its last statement, in one lock order), the other is decoded and
// inserted, so a burst is posted on two cores instead of one.
const (
	chargesFetchMax  = 500
	chargesFetchWait = 10 * time.Millisecond
	chargesPullers   = 2
)

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
// ctx ends, chargesPullers batches at a time.
func ConsumeCharges(ctx context.Context, js jetstream.JetStream, log *slog.Logger, a *app.App, dl natsx.DeadLetters) error {
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		in := make([]ChargesMessage, 0, len(msgs))
		for _, m := range msgs {
			if strings.HasPrefix(m.Subject(), subjects.ChargesRated.Prefix()) {
				in = append(in, ChargesMessage{ID: natsx.MsgID(m), Payload: m.Data()})
			}
		}
		_, err := PostCharges(ctx, a, in)
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	for range chargesPullers {
		g.Go(func() error { return natsx.Consume(ctx, js, log, ChargesSpec(dl), h) })
	}
	return g.Wait()
}

// ChargesMessage is one charges.rated message: its Nats-Msg-Id and payload.
type ChargesMessage struct {
	ID      string
	Payload []byte
}

// PostCharges decodes a fetched batch of charges.rated messages and posts it
// (app.PostCharges: one database transaction). It returns the number of
// transactions posted; messages that can never be posted are named in a
// *natsx.PoisonError, which Consume dead-letters.
func PostCharges(ctx context.Context, a *app.App, msgs []ChargesMessage) (int, error) {
	in := make([]app.ChargeMessage, len(msgs))
	for i, m := range msgs {
		in[i] = decodeCharges(m)
	}
	ctx, span := obs.StartSpan(ctx, "ledger post charges")
	n, err := a.PostCharges(ctx, in)
	obs.EndSpan(span, err, obs.Int("messaging.batch.message_count", len(msgs)), obs.Int("gpubill.ledger.transactions_posted", n))
	if bad := (*app.UnpostableError)(nil); errors.As(err, &bad) {
		return n, &natsx.PoisonError{ByID: bad.ByID}
	}
	return n, err
}
