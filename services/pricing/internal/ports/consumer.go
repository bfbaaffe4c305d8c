package ports

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/eventwire"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/subjects"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
)

// Rating consumer limits: one fetch is one Postgres transaction, so big
// fetches amortise the commit; metering's messages already carry batches.
// A fetch waits ratingFetchWait only when fewer than ratingFetchMax messages
// are pending, i.e. at the end of a burst, where every millisecond is idle
// latency added to the hop.
const (
	ratingDurable   = "pricing-rating"
	ratingFetchMax  = 256
	ratingFetchWait = 10 * time.Millisecond
	pendingEvery    = 10 * time.Second
)

// RatingConsumer rates usage.recorded.* into charges.
type RatingConsumer struct {
	App *app.App
	JS  jetstream.JetStream
	Log *slog.Logger
	// AckWait overrides natsx.DefaultAckWait: how long a fetched batch
	// stays unacknowledged before redelivery (0 = the default).
	AckWait time.Duration
	// DeadLetters keeps what cannot be rated (pricing.dead_letters).
	DeadLetters natsx.DeadLetters
}

// Run consumes until ctx ends.
func (c *RatingConsumer) Run(ctx context.Context) error {
	return natsx.Consume(ctx, c.JS, c.Log, natsx.ConsumerSpec{
		Stream: natsx.StreamUsage, Durable: ratingDurable, FilterSubjects: []string{subjects.UsageRecorded.All()},
		BatchMax: ratingFetchMax, MaxWait: ratingFetchWait, AckWait: c.AckWait, DeadLetters: c.DeadLetters,
	}, func(ctx context.Context, msgs []jetstream.Msg) error {
		in, err := decodeUsage(msgs)
		if err != nil {
			return err
		}
		return c.App.RateMessages(ctx, in)
	})
}

// decodeUsage decodes every message of a fetch; one that does not decode is
// poison (dead-lettered by Consume; the rest comes again).
func decodeUsage(msgs []jetstream.Msg) ([]app.UsageMessage, error) {
	in := make([]app.UsageMessage, len(msgs))
	var poison natsx.PoisonError
	strs := eventwire.NewInterner()
	for i, m := range msgs {
		id := natsx.MsgID(m)
		evs, err := decodeUsageBatch(m.Data(), strs)
		if err != nil {
			poison.Add(id, fmt.Errorf("undecodable usage batch: %w", err))
			continue
		}
		in[i] = app.UsageMessage{ID: id, Events: evs}
	}
	if len(poison.ByID) > 0 {
		return nil, &poison
	}
	return in, nil
}

// PendingRetrier rates usage that waited for a rate card: when a card is
// created here, and periodically (cards created by another process).
type PendingRetrier struct {
	App *app.App
	Log *slog.Logger
}

// Run retries until ctx ends.
func (p *PendingRetrier) Run(ctx context.Context) error {
	t := time.NewTicker(pendingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-p.App.CardAdded():
		}
		for {
			n, err := p.App.RetryPending(ctx)
			if err != nil {
				if ctx.Err() == nil {
					p.Log.Error("retry pending usage", "err", err)
				}
				break
			}
			if n > 0 {
				p.Log.Info("rated usage that waited for a rate card", "events", n)
			}
			if n == 0 {
				break
			}
		}
	}
}
