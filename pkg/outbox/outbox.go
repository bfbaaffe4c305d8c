// Package outbox is the transactional outbox and inbox every service uses.
//
// A service writes the events it publishes into <schema>.outbox in the same
// transaction as the state change (Add); the Relay publishes them to JetStream
// with Nats-Msg-Id = the event id and deletes them once JetStream has acked,
// so a crash between commit and publish loses nothing, and a crash between
// publish and delete duplicates nothing (JetStream drops the repeat inside its
// duplicate window; consumers also record message ids with their effects).
//
// Each service's first migration creates the two tables:
//
//	create table <schema>.outbox (
//	    seq bigserial primary key,
//	    id text not null unique,
//	    subject text not null,
//	    payload bytea not null,
//	    created_at timestamptz not null default now());
//	create table <schema>.inbox (
//	    message_id text primary key,
//	    consumer text not null,
//	    processed_at timestamptz not null default now());
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Limits of the relay.
const (
	relayBatchMax     = 1000
	relayPollMin      = 5 * time.Millisecond   // poll interval right after traffic
	relayIdlePoll     = 200 * time.Millisecond // longest poll interval when idle
	relayErrorBackoff = 500 * time.Millisecond
	publishAckTimeout = 30 * time.Second
)

// Message is one event to publish.
type Message struct {
	ID      string // Nats-Msg-Id; unique forever
	Subject string
	Payload []byte
}

// Check refuses a message without id or subject.
func (m Message) Check() error {
	if m.ID == "" || m.Subject == "" {
		return errors.New("outbox: message without id or subject")
	}
	return nil
}

// InsertInto is the head of an insert into the schema's outbox, columns
// (id, subject, payload): Add's, and a writer's that queues a message in
// the same statement as its own change (a SELECT of the three values, and
// "on conflict (id) do nothing", follow).
func InsertInto(schema string) string {
	return "insert into " + pgx.Identifier{schema, "outbox"}.Sanitize() + " (id, subject, payload)"
}

// Add writes messages to the schema's outbox inside tx. Call Wake(schema)
// after the commit for the lowest latency.
func Add(ctx context.Context, tx pgx.Tx, schema string, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	ids := make([]string, len(msgs))
	subjects := make([]string, len(msgs))
	payloads := make([][]byte, len(msgs))
	for i, m := range msgs {
		if err := m.Check(); err != nil {
			return err
		}
		ids[i], subjects[i], payloads[i] = m.ID, m.Subject, m.Payload
	}
	q := InsertInto(schema) + `
		select * from unnest($1::text[], $2::text[], $3::bytea[])
		on conflict (id) do nothing`
	if _, err := tx.Exec(ctx, q, ids, subjects, payloads); err != nil {
		return fmt.Errorf("outbox add: %w", err)
	}
	return nil
}

// wakers lets a writer in this process nudge its schema's relay right after
// commit. (pg_notify would do it across processes, but Postgres lets only one
// notifying transaction commit at a time, which would serialise every writer.)
var wakers sync.Map // schema → chan struct{}

func waker(schema string) chan struct{} {
	ch, _ := wakers.LoadOrStore(schema, make(chan struct{}, 1))
	return ch.(chan struct{})
}

// Wake tells the schema's relay that committed messages are waiting. It never
// blocks; without it the relay still finds them by polling.
func Wake(schema string) {
	select {
	case waker(schema) <- struct{}{}:
	default:
	}
}

// Claim records message ids as processed by consumer inside tx and returns
// the ids not seen before; the caller applies only those. Because the ids are
// stored with the effect, a redelivered message changes nothing.
func Claim(ctx context.Context, tx pgx.Tx, schema, consumer string, ids []string) (map[string]bool, error) {
	q := fmt.Sprintf(`insert into %s (message_id, consumer)
		select id, $2 from unnest($1::text[]) as id
		on conflict (message_id) do nothing returning message_id`, pgx.Identifier{schema, "inbox"}.Sanitize())
	rows, err := tx.Query(ctx, q, ids, consumer)
	if err != nil {
		return nil, fmt.Errorf("inbox claim: %w", err)
	}
	fresh := make(map[string]bool, len(ids))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		fresh[id] = true
	}
	return fresh, rows.Err()
}

// Relay publishes a schema's outbox to JetStream.
type Relay struct {
	Pool   *pgxpool.Pool
	JS     jetstream.JetStream
	Schema string
	Log    *slog.Logger
}

// Run relays until ctx ends. Only one relay per schema publishes at a time
// (a session advisory lock), so order within the outbox is kept.
func (r *Relay) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := r.runLeader(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error("outbox relay", "schema", r.Schema, "err", err)
			sleep(ctx, relayErrorBackoff)
		}
	}
	return nil
}

func (r *Relay) runLeader(ctx context.Context) error {
	conn, err := r.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var leader bool
	if err := conn.QueryRow(ctx, `select pg_try_advisory_lock(hashtext($1))`, "gpubill.outbox."+r.Schema).Scan(&leader); err != nil {
		return err
	}
	if !leader {
		sleep(ctx, relayIdlePoll)
		return nil
	}
	defer conn.Exec(context.WithoutCancel(ctx), `select pg_advisory_unlock(hashtext($1))`, "gpubill.outbox."+r.Schema) //nolint:errcheck
	wake := waker(r.Schema)
	idle := relayPollMin
	for ctx.Err() == nil {
		n, err := r.relayOnce(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			idle = relayPollMin
			continue // under load: relay again at once
		}
		t := time.NewTimer(idle)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
			idle = min(idle*2, relayIdlePoll)
		}
		t.Stop()
	}
	return nil
}

// relayOnce publishes up to relayBatchMax messages and deletes the acked ones.
func (r *Relay) relayOnce(ctx context.Context) (int, error) {
	tbl := pgx.Identifier{r.Schema, "outbox"}.Sanitize()
	rows, err := r.Pool.Query(ctx, fmt.Sprintf(`select seq, id, subject, payload from %s order by seq limit %d`, tbl, relayBatchMax))
	if err != nil {
		return 0, err
	}
	type row struct {
		seq     int64
		id      string
		subject string
		payload []byte
	}
	var batch []row
	for rows.Next() {
		var x row
		if err := rows.Scan(&x.seq, &x.id, &x.subject, &x.payload); err != nil {
			return 0, err
		}
		batch = append(batch, x)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(batch) == 0 {
		return 0, nil
	}
	futures := make([]jetstream.PubAckFuture, len(batch))
	for i, x := range batch {
		m := nats.NewMsg(x.subject)
		m.Data = x.payload
		m.Header.Set(jetstream.MsgIDHeader, x.id)
		f, err := r.JS.PublishMsgAsync(m)
		if err != nil {
			return 0, fmt.Errorf("publish %s: %w", x.id, err)
		}
		futures[i] = f
	}
	timeout := time.NewTimer(publishAckTimeout)
	defer timeout.Stop()
	done := make([]int64, 0, len(batch))
	var firstErr error
wait:
	for i, f := range futures {
		select {
		case <-f.Ok():
			done = append(done, batch[i].seq)
		case err := <-f.Err():
			if firstErr == nil {
				firstErr = fmt.Errorf("publish %s to %s: %w", batch[i].id, batch[i].subject, err)
			}
		case <-timeout.C:
			firstErr = errors.New("publish acks timed out")
			break wait
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if len(done) > 0 {
		if _, err := r.Pool.Exec(ctx, fmt.Sprintf(`delete from %s where seq = any($1)`, tbl), done); err != nil {
			return 0, err
		}
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return len(batch), nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
