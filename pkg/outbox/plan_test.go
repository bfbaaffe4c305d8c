package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestRelayReadsTheOutboxByIndexAsItGrows: an outbox is a queue, its heap
// full of the rows already published (dead until a vacuum), and a relay
// connection lives up to an hour (pgxpool's default lifetime), thousands of
// reads at its polls of 5–200 ms. The relay first reads the outbox while it is
// empty; after the heap has grown by 20 000 dead rows its reads and moves
// are planned again for the table as it is, most of them through the
// primary key (a statement planned once, on the empty table, and kept
// would scan the whole heap on every read: a seq scan per read in
// pg_stat_user_tables).
func TestRelayReadsTheOutboxByIndexAsItGrows(t *testing.T) {
	t.Parallel()
	ctx, pool, js := newOutboxDB(t, natsx.StreamUsage)
	// The relay on a pool of two: the leader's connection and one for its
	// reads and moves, so the connection that read the empty outbox is the
	// one that reads it grown (with the test's pool, a read could land on a
	// connection first used after the growth and plan for it either way).
	relayPool, err := pg.Open(ctx, pool.Config().ConnString(), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relayPool.Close)
	runRelay(t, ctx, relayPool, js.JS, slog.New(slog.NewTextHandler(io.Discard, nil)))
	st, err := js.JS.Stream(ctx, natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	published := 0 // stored in the stream (the test reads no outbox row: its own reads would count)
	send := func(n int, prefix string) {
		t.Helper()
		for i := range n {
			if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
				return outbox.Add(ctx, tx, "t", outbox.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Subject: "usage.recorded.p1", Payload: []byte("x")})
			}); err != nil {
				t.Fatal(err)
			}
			published++
			testkit.Eventually(t, 10*time.Second, func() bool {
				info, err := st.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return info.State.LastSeq == uint64(published)
			}, "message not relayed")
		}
	}
	send(5, "warm") // the relay's connections have read the outbox while it was empty

	// 20 000 rows of 300 bytes (~8 MB) inserted and deleted in one transaction: never visible to
	// the relay, dead in the heap once committed (nothing vacuums here).
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `insert into t.outbox (id, subject, payload)
			select 'dead-' || i, 'usage.recorded.p1', convert_to(repeat('x', 300), 'UTF8') from generate_series(1, 20000) i`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `delete from t.outbox where id like 'dead-%'`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	seqScans := func() int {
		t.Helper()
		// Each backend reports its table counts within a second or so of
		// going idle: read them once they have stopped moving (a relay
		// scanning on every idle poll never lets them: 5 s at most).
		last, same := -1, 0
		for tries := 0; same < 3 && tries < 10; tries++ {
			time.Sleep(500 * time.Millisecond)
			n := count(t, ctx, pool, `select seq_scan from pg_stat_user_tables where schemaname = 't' and relname = 'outbox'`)
			if n == last {
				same++
			} else {
				last, same = n, 0
			}
		}
		return last
	}
	before := seqScans()
	const reads = 20
	send(reads, "after")
	got := seqScans() - before
	t.Logf("%d seq scans of the outbox while %d messages were relayed", got, reads)
	// Planned at each run: 0 seen in 9 runs on this pool of two (0–12 in 14
	// earlier runs, when the relay shared the test's pool of 16). Planned
	// once on the empty table, every read scans: one per read at least
	// (81 and 82 seen, idle polls included).
	if got >= reads {
		t.Fatalf("%d seq scans of the outbox while the relay relayed %d messages one at a time: its reads scan every dead row", got, reads)
	}
}

// newOutboxDB is a database of its own holding schema t (ddl), and a
// JetStream server with the streams named (natsx.EnsureStreams).
func newOutboxDB(t *testing.T, streams ...string) (context.Context, *pgxpool.Pool, *testkit.JetStream) {
	t.Helper()
	ctx := testkit.Context(t)
	pool, _ := testkit.NewPool(t)
	js := testkit.NewJetStream(t)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	if len(streams) > 0 {
		if err := natsx.EnsureStreams(ctx, js.JS, streams...); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, pool, js
}

// runRelay runs schema t's relay until the test ends; an error it stops
// with fails the test.
func runRelay(t *testing.T, ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, log *slog.Logger) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- (&outbox.Relay{Pool: pool, JS: js, Schema: "t", Log: log}).Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
	})
}

func count(t *testing.T, ctx context.Context, pool *pgxpool.Pool, q string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
