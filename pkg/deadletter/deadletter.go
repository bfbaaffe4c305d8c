// Package deadletter is the one policy for messages a service cannot apply
// (DESIGN §1, §7): a JetStream message that is undecodable or keeps failing,
// or an outbox row NATS refuses, is kept in the service's own
// <schema>.dead_letters table, counted by gpubill_dead_letters_total, listed
// by GET /v1/ops/dead-letters and replayed, after a fix, by
// POST /v1/ops/dead-letters/{id}:replay.
//
// Each service's migration creates the table:
//
//	create table <schema>.dead_letters (
//	    id bigserial primary key,
//	    consumer text not null,        -- the durable consumer, or "outbox"
//	    message_id text not null,      -- Nats-Msg-Id (or outbox id)
//	    subject text not null,
//	    headers jsonb not null default '{}',
//	    payload bytea not null,
//	    error text not null,           -- the last failure
//	    attempts int not null,         -- deliveries, plus failed replays
//	    first_seen_at timestamptz not null,
//	    last_seen_at timestamptz not null,
//	    replay_requested_at timestamptz,
//	    replayed_at timestamptz,
//	    unique (consumer, message_id));
//
// A row is "dead" until an operator asks for a replay ("replay_requested");
// the consumer that owns it, wherever it runs, then applies it through its
// own handler, with its original message id (so the inbox still makes it
// exactly-once), and marks it "replayed", or records the new error and
// leaves it dead.
package deadletter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/pkg/natsx"
)

// Table is the dead-letter table's name in every service schema.
const Table = "dead_letters"

// ConsumerOutbox is the consumer name of outbox rows NATS refused.
const ConsumerOutbox = "outbox"

// Limits.
const (
	replayPoll     = time.Second // how often a consumer looks for replay requests
	replayBatchMax = 100
	errorTextMax   = 2000 // bytes of an error kept
)

// Counted on the default registry; another part of gpubill serves /metrics.
var (
	deadLettered = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_dead_letters_total",
		Help: "Messages moved to a service's dead_letters table (could not be applied or published).",
	}, []string{"service", "consumer"})
	replayed = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_dead_letter_replays_total",
		Help: "Dead letters replayed, by outcome (replayed, failed).",
	}, []string{"service", "consumer", "outcome"})
)

// Sink is one service's dead-letter table. It implements natsx.DeadLetters.
type Sink struct {
	Pool   *pgxpool.Pool
	Schema string // the service's schema, also its name in metrics and ids
	Log    *slog.Logger
}

// New returns the sink of a service's schema.
func New(pool *pgxpool.Pool, schema string, log *slog.Logger) *Sink {
	return &Sink{Pool: pool, Schema: schema, Log: log}
}

var _ natsx.DeadLetters = (*Sink)(nil)

// Letter is what is kept of one message.
type Letter struct {
	Consumer  string
	MessageID string
	Subject   string
	Headers   map[string][]string
	Payload   []byte
}

// Put implements natsx.DeadLetters. The letter keeps when the stream stored
// the message (natsx.HeaderStoredAt, replacing a publisher's): a replay is
// judged by it where arrival counts (usage's late-arrival limit).
func (s *Sink) Put(ctx context.Context, consumer string, m jetstream.Msg, deliveries int, cause error) error {
	headers := make(nats.Header, len(m.Headers())+1)
	for k, vs := range m.Headers() {
		headers[k] = vs
	}
	headers.Del(natsx.HeaderStoredAt)
	if md, err := m.Metadata(); err == nil {
		headers.Set(natsx.HeaderStoredAt, md.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	l := Letter{Consumer: consumer, MessageID: natsx.MsgID(m), Subject: m.Subject(), Headers: headers, Payload: m.Data()}
	return s.PutLetter(ctx, s.Pool, l, deliveries, cause)
}

// Execer is a pool or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PutLetter records a letter (inside a transaction when q is one). A letter
// seen again (the same consumer, message id and payload) keeps its
// first_seen_at and adds the new attempts. Another payload under a message
// id already kept (a stream recreated, its sequence numbers, the ids of
// messages without Nats-Msg-Id, counting again; a publisher reusing an id)
// is kept beside it, under the id followed by "#" and its payload's
// SHA-256 (16 hex digits): it was counted on the first letter and its body
// lost. Text columns get valid UTF-8 without NUL (the payload, bytea, is
// kept as it came).
func (s *Sink) PutLetter(ctx context.Context, q Execer, l Letter, attempts int, cause error) error {
	headers := make(map[string][]string, len(l.Headers))
	for k, vs := range l.Headers {
		clean := make([]string, len(vs))
		for i, v := range vs {
			clean[i] = toValidUTF8(v)
		}
		headers[toValidUTF8(k)] = clean
	}
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	if len(msg) > errorTextMax {
		msg = msg[:errorTextMax]
	}
	put := func(id string) (bool, error) {
		tag, err := q.Exec(ctx, `insert into `+s.table()+` as d
			(consumer, message_id, subject, headers, payload, error, attempts, first_seen_at, last_seen_at)
			values ($1, $2, $3, $4, $5, $6, $7, now(), now())
			on conflict (consumer, message_id) do update set error = excluded.error,
				attempts = d.attempts + excluded.attempts, last_seen_at = now(),
				replay_requested_at = null, replayed_at = null
			where d.payload = excluded.payload`,
			l.Consumer, id, toValidUTF8(l.Subject), headers, l.Payload, toValidUTF8(msg), max(attempts, 1))
		return tag.RowsAffected() == 1, err
	}
	id := toValidUTF8(l.MessageID)
	kept, err := put(id)
	if err == nil && !kept {
		sum := sha256.Sum256(l.Payload)
		if kept, err = put(id + "#" + hex.EncodeToString(sum[:8])); err == nil && !kept {
			err = errors.New("another payload is kept under the same id and digest")
		}
	}
	if err != nil {
		return fmt.Errorf("dead letter %s/%s: %w", l.Consumer, l.MessageID, err)
	}
	deadLettered.WithLabelValues(s.Schema, l.Consumer).Inc()
	return nil
}

func (s *Sink) table() string { return pgx.Identifier{s.Schema, Table}.Sanitize() }

// Replay implements natsx.DeadLetters: until ctx ends, it applies through h
// the consumer's letters an operator asked to replay.
func (s *Sink) Replay(ctx context.Context, consumer string, h natsx.Handler) error {
	return s.ReplayLetters(ctx, consumer, func(ctx context.Context, l Letter) error {
		return h(ctx, []jetstream.Msg{letterMsg{l}})
	})
}

// ReplayLetters is Replay for a consumer that is not a JetStream handler
// (the outbox relay puts its letters back into the outbox).
func (s *Sink) ReplayLetters(ctx context.Context, consumer string, apply func(ctx context.Context, l Letter) error) error {
	t := time.NewTicker(replayPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := s.replayOnce(ctx, consumer, apply); err != nil && ctx.Err() == nil {
			s.Log.Warn("dead-letter replay", "service", s.Schema, "consumer", consumer, "err", err)
		}
	}
}

type replayRow struct {
	id       int64
	attempts int // when taken: a letter written back since counts more
	l        Letter
}

func (s *Sink) replayOnce(ctx context.Context, consumer string, apply func(ctx context.Context, l Letter) error) error {
	// Taking a request clears it, so two replicas of a consumer do not both
	// apply a letter (either would be harmless: the handlers are idempotent);
	// a process that dies mid-replay leaves the letter dead, to ask again.
	rows, err := s.Pool.Query(ctx, `update `+s.table()+` set replay_requested_at = null
		where id in (select id from `+s.table()+`
			where consumer = $1 and replay_requested_at is not null and replayed_at is null
			order by id limit $2 for update skip locked)
		returning id, attempts, message_id, subject, headers, payload`, consumer, replayBatchMax)
	if err != nil {
		return err
	}
	taken, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (replayRow, error) {
		x := replayRow{l: Letter{Consumer: consumer}}
		err := r.Scan(&x.id, &x.attempts, &x.l.MessageID, &x.l.Subject, &x.l.Headers, &x.l.Payload)
		return x, err
	})
	if err != nil {
		return err
	}
	for _, x := range taken {
		applyErr := apply(ctx, x.l)
		if applyErr != nil && ctx.Err() != nil {
			return nil // shutting down: the letter stays dead, to ask again
		}
		if applyErr == nil {
			// Marked only if not dead-lettered again meanwhile (PutLetter
			// adds to attempts): an outbox letter's apply requeues it, and
			// the relay may refuse it and write it back before this mark,
			// which then hid a letter in neither the outbox nor the stream.
			var tag pgconn.CommandTag
			tag, err = s.Pool.Exec(ctx, `update `+s.table()+` set replayed_at = now(), last_seen_at = now() where id = $1 and attempts = $2`, x.id, x.attempts)
			if err == nil && tag.RowsAffected() == 0 { // dead again: a failed replay
				replayed.WithLabelValues(s.Schema, consumer, "failed").Inc()
				s.Log.Warn("dead letter replay failed: dead-lettered again since it was applied", "service", s.Schema, "consumer", consumer, "msg_id", x.l.MessageID)
			} else {
				replayed.WithLabelValues(s.Schema, consumer, "replayed").Inc()
				s.Log.Info("dead letter replayed", "service", s.Schema, "consumer", consumer, "msg_id", x.l.MessageID)
			}
		} else {
			var pe *natsx.PoisonError
			if errors.As(applyErr, &pe) && len(pe.ByID) == 1 {
				for _, c := range pe.ByID {
					applyErr = c
				}
			}
			msg := applyErr.Error()
			if len(msg) > errorTextMax {
				msg = msg[:errorTextMax]
			}
			_, err = s.Pool.Exec(ctx, `update `+s.table()+` set error = $2, attempts = attempts + 1, last_seen_at = now() where id = $1`,
				x.id, toValidUTF8(msg))
			replayed.WithLabelValues(s.Schema, consumer, "failed").Inc()
			s.Log.Warn("dead letter replay failed", "service", s.Schema, "consumer", consumer, "msg_id", x.l.MessageID, "err", applyErr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// letterMsg is a dead letter handed back to its handler: the original
// subject, headers (Nats-Msg-Id included) and payload. Acks are no-ops.
type letterMsg struct{ l Letter }

func (m letterMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return nil, errors.New("a replayed dead letter has no stream metadata")
}
func (m letterMsg) Data() []byte { return m.l.Payload }
func (m letterMsg) Headers() nats.Header {
	h := nats.Header{}
	for k, v := range m.l.Headers {
		h[k] = v
	}
	if h.Get(jetstream.MsgIDHeader) == "" && m.l.MessageID != "" {
		h.Set(jetstream.MsgIDHeader, m.l.MessageID)
	}
	return h
}
func (m letterMsg) Subject() string                  { return m.l.Subject }
func (m letterMsg) Reply() string                    { return "" }
func (m letterMsg) Ack() error                       { return nil }
func (m letterMsg) DoubleAck(context.Context) error  { return nil }
func (m letterMsg) Nak() error                       { return nil }
func (m letterMsg) NakWithDelay(time.Duration) error { return nil }
func (m letterMsg) InProgress() error                { return nil }
func (m letterMsg) Term() error                      { return nil }
func (m letterMsg) TermWithReason(string) error      { return nil }

// toValidUTF8 makes s storable in a text column.
func toValidUTF8(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
