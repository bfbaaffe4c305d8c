package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestPublishedKeptUntilEveryConsumerAcked: a published message stays in
// outbox_published until each durable consumer whose filter takes it has
// acked it (a consumer of other subjects does not hold it), and
// RequeuePublished puts what is left back into the outbox under its
// original seq.
func TestPublishedKeptUntilEveryConsumerAcked(t *testing.T) {
	t.Parallel()
	ctx, pool, js := newOutboxDB(t)
	st, err := js.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	consumer := func(name, filter string) jetstream.Consumer {
		c, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: name, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca := consumer("a", "t.a.*")
	consumer("b", "t.b.*")
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Add(ctx, tx, "t", outbox.Message{ID: "a1", Subject: "t.a.1", Payload: []byte("x")},
			outbox.Message{ID: "b1", Subject: "t.b.1", Payload: []byte("y")}, outbox.Message{ID: "a2", Subject: "t.a.2", Payload: []byte("z")})
	}); err != nil {
		t.Fatal(err)
	}
	count := func(sql string) int {
		var n int
		if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	r := &outbox.Relay{Pool: pool, JS: js.JS, Schema: "t", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	testkit.Eventually(t, 10*time.Second, func() bool { return count(`select count(*) from t.outbox`) == 0 }, "outbox relayed")
	stop()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v", err)
	}
	if n := count(`select count(*) from t.outbox_published where stream = 'T' and stream_seq between 1 and 3`); n != 3 {
		t.Fatalf("%d published messages kept with their stream sequence; want 3", n)
	}
	if err := r.PrunePublished(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(`select count(*) from t.outbox_published`); n != 3 {
		t.Fatalf("nothing acked yet, %d kept after pruning; want 3", n)
	}

	// Consumer a applies both of its messages; b has not applied its one.
	batch, err := ca.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	if acked != 2 {
		t.Fatalf("consumer a fetched %d messages; want 2", acked)
	}
	if err := r.PrunePublished(ctx); err != nil {
		t.Fatal(err)
	}
	var left string
	var seq int64
	if err := pool.QueryRow(ctx, `select string_agg(id, ',' order by seq), min(seq) from t.outbox_published`).Scan(&left, &seq); err != nil {
		t.Fatal(err)
	}
	if left != "b1" {
		t.Fatalf("kept after a acked its two: %q; want only b1 (its consumer b has not acked it)", left)
	}

	n, err := outbox.RequeuePublished(ctx, pool, "t")
	if err != nil || n != 1 {
		t.Fatalf("requeue: %d, %v; want 1", n, err)
	}
	var id string
	var back int64
	if err := pool.QueryRow(ctx, `select id, seq from t.outbox`).Scan(&id, &back); err != nil {
		t.Fatal(err)
	}
	if id != "b1" || back != seq || count(`select count(*) from t.outbox_published`) != 0 {
		t.Fatalf("requeued %s at seq %d (was %d); want b1 at its original seq, nothing left kept", id, back, seq)
	}
}
