package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

const ddl = `
create schema t;
create table t.outbox (seq bigserial primary key, id text not null unique, subject text not null, payload bytea not null, created_at timestamptz not null default now());
create table t.inbox (message_id text primary key, consumer text not null, processed_at timestamptz not null default now());
create table t.dead_letters (
    id bigserial primary key, consumer text not null, message_id text not null, subject text not null,
    headers jsonb not null default '{}', payload bytea not null, error text not null, attempts int not null,
    first_seen_at timestamptz not null, last_seen_at timestamptz not null,
    replay_requested_at timestamptz, replayed_at timestamptz, unique (consumer, message_id));`

func TestRelayPublishesCommittedOnlyAndInboxDedups(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool, _ := testkit.NewPool(t)
	js := testkit.NewJetStream(t)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	if err := natsx.EnsureStreams(ctx, js.JS, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	// One committed, one rolled back.
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Add(ctx, tx, "t", outbox.Message{ID: "m1", Subject: "usage.recorded.p1", Payload: []byte("a")})
	}); err != nil {
		t.Fatal(err)
	}
	tx, _ := pool.Begin(ctx)
	_ = outbox.Add(ctx, tx, "t", outbox.Message{ID: "m2", Subject: "usage.recorded.p1", Payload: []byte("b")})
	_ = tx.Rollback(ctx)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &outbox.Relay{Pool: pool, JS: js.JS, Schema: "t", Log: log}
	go r.Run(ctx)

	var got []string
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recv := make(chan string, 10)
	go natsx.Consume(cctx, js.JS, log, natsx.ConsumerSpec{Stream: natsx.StreamUsage, Durable: "c", DeadLetters: deadletter.New(pool, "t", log)}, func(ctx context.Context, msgs []jetstream.Msg) error {
		for _, m := range msgs {
			recv <- natsx.MsgID(m) + ":" + string(m.Data())
		}
		return nil
	})
	testkit.Eventually(t, 10*time.Second, func() bool {
		select {
		case s := <-recv:
			got = append(got, s)
		default:
		}
		return len(got) >= 1
	})
	if got[0] != "m1:a" {
		t.Fatalf("got %v", got)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		var n int
		_ = pool.QueryRow(ctx, `select count(*) from t.outbox`).Scan(&n)
		return n == 0
	}, "outbox not drained")

	// Inbox: the second claim of the same id is not fresh.
	for i, want := range []bool{true, false} {
		err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			fresh, err := outbox.Claim(ctx, tx, "t", "c", []string{"m1"})
			if fresh["m1"] != want {
				t.Errorf("claim %d: fresh=%v want %v", i, fresh["m1"], want)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
