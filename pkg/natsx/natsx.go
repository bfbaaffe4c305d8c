// Package natsx holds the JetStream conventions every service shares: the
// stream table (explicit limits, retention by arrival age), publishing with
// Nats-Msg-Id, batched pull consumers, and the embedded server.
package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Limits every stream gets. MaxAge is measured by JetStream on arrival, not on
// event time, so a late event is never aged out before it is consumed.
const (
	streamMaxAge        = 14 * 24 * time.Hour
	streamMaxBytes      = 1 << 30 // per stream; 7 streams fit the embedded server's store
	streamMaxMsgSize    = 8 << 20
	streamDupWindow     = 10 * time.Minute
	consumerMaxDeliver  = -1 // a stuck message stays visible as lag, never dropped
	consumerMaxAckPend  = 20000
	fetchMaxWaitDefault = 250 * time.Millisecond
)

// DefaultAckWait is how long a delivered message may stay unacknowledged
// before JetStream redelivers it (a consumer that died mid-batch), unless a
// ConsumerSpec sets its own AckWait.
const DefaultAckWait = 60 * time.Second

// Stream names and the subjects they hold (DESIGN §1: <domain>.<event>.<key>).
const (
	StreamUsage      = "USAGE"
	StreamCharges    = "CHARGES"
	StreamLedger     = "LEDGER"
	StreamBilling    = "BILLING"
	StreamParty      = "PARTY"
	StreamSettlement = "SETTLEMENT"
	StreamPayout     = "PAYOUT"
)

var streamSubjects = map[string][]string{
	StreamUsage:      {"usage.>"},
	StreamCharges:    {"charges.>"},
	StreamLedger:     {"ledger.>"},
	StreamBilling:    {"billing.>"},
	StreamParty:      {"party.>"},
	StreamSettlement: {"settlement.>"},
	StreamPayout:     {"payout.>"},
}

// StreamConfig returns the canonical configuration of a named stream.
func StreamConfig(name string) (jetstream.StreamConfig, error) {
	subj, ok := streamSubjects[name]
	if !ok {
		return jetstream.StreamConfig{}, fmt.Errorf("unknown stream %q", name)
	}
	return jetstream.StreamConfig{
		Name:       name,
		Subjects:   subj,
		Retention:  jetstream.LimitsPolicy,
		Storage:    jetstream.FileStorage,
		MaxAge:     streamMaxAge,
		MaxBytes:   streamMaxBytes,
		MaxMsgSize: streamMaxMsgSize,
		Discard:    jetstream.DiscardNew, // refuse rather than silently drop unconsumed events
		Duplicates: streamDupWindow,
	}, nil
}

// EnsureStreams creates or updates the named streams.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, names ...string) error {
	for _, n := range names {
		cfg, err := StreamConfig(n)
		if err != nil {
			return err
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("ensure stream %s: %w", n, err)
		}
	}
	return nil
}

// Connect dials NATS and returns the connection and its JetStream context.
func Connect(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("connect nats %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// Handler processes one pulled batch. It returns nil when every message's
// effect is durable (then all are acked); an error naks the whole batch for
// redelivery, which consumers make harmless by recording message ids with
// their effects.
type Handler func(ctx context.Context, msgs []jetstream.Msg) error

// ConsumerSpec names a durable pull consumer.
type ConsumerSpec struct {
	Stream         string
	Durable        string
	FilterSubjects []string
	BatchMax       int           // messages per fetch
	MaxWait        time.Duration // how long a fetch waits to fill a batch
	// AckWait is how long a delivered batch may stay unacknowledged before
	// it is redelivered; 0 means DefaultAckWait. It must exceed the longest
	// time a handler takes, or a slow batch is delivered twice (harmless,
	// deduplicated, but wasted work).
	AckWait time.Duration
}

// Consume runs a batched pull loop until ctx ends.
func Consume(ctx context.Context, js jetstream.JetStream, log *slog.Logger, spec ConsumerSpec, h Handler) error {
	if spec.BatchMax <= 0 {
		spec.BatchMax = 100
	}
	if spec.MaxWait <= 0 {
		spec.MaxWait = fetchMaxWaitDefault
	}
	if spec.AckWait <= 0 {
		spec.AckWait = DefaultAckWait
	}
	cc := jetstream.ConsumerConfig{
		Durable:       spec.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       spec.AckWait,
		MaxDeliver:    consumerMaxDeliver,
		MaxAckPending: consumerMaxAckPend,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	// One subject goes in FilterSubject: servers before 2.10 (Debian's
	// nats-server 2.9) refuse the multi-subject filter_subjects field.
	switch len(spec.FilterSubjects) {
	case 0:
	case 1:
		cc.FilterSubject = spec.FilterSubjects[0]
	default:
		cc.FilterSubjects = spec.FilterSubjects
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, spec.Stream, cc)
	if err != nil {
		return fmt.Errorf("consumer %s on %s: %w", spec.Durable, spec.Stream, err)
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		batch, err := cons.Fetch(spec.BatchMax, jetstream.FetchMaxWait(spec.MaxWait))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			log.Warn("fetch failed", "consumer", spec.Durable, "err", err)
			sleep(ctx, backoff)
			continue
		}
		msgs := make([]jetstream.Msg, 0, spec.BatchMax)
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			log.Debug("fetch ended", "consumer", spec.Durable, "err", err)
		}
		if len(msgs) == 0 {
			continue
		}
		if err := h(ctx, msgs); err != nil {
			if ctx.Err() != nil {
				break
			}
			log.Error("batch failed; will be redelivered", "consumer", spec.Durable, "messages", len(msgs), "err", err)
			for _, m := range msgs {
				_ = m.NakWithDelay(backoff)
			}
			sleep(ctx, backoff)
			continue
		}
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				log.Warn("ack failed; message will be redelivered and deduplicated", "consumer", spec.Durable, "err", err)
			}
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// MsgID returns the message's Nats-Msg-Id header, falling back to its stream
// sequence so every message has a stable identity.
func MsgID(m jetstream.Msg) string {
	if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return id
	}
	md, err := m.Metadata()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d", md.Stream, md.Sequence.Stream)
}
