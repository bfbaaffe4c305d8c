package deadletter_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestOutageNeverDeadLetters: a message whose handler fails because the
// database is unavailable (here "the database system is not yet accepting
// connections", as PostgreSQL answers while it recovers from a crash) for
// longer than the dead-letter budget is redelivered until the outage ends,
// then applied once; nothing is dead-lettered. Counting such failures
// dead-lettered a usage batch in the chaos test the moment PostgreSQL came
// back.
func TestOutageNeverDeadLetters(t *testing.T) {
	t.Parallel()
	pool, js, sink := setup(t)
	var got applied
	var tries atomic.Int32
	outage := int32(2*natsx.DeadLetterDeliveries + 1)
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		if tries.Add(1) <= outage {
			return fmt.Errorf("rate cards: failed to connect: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P03",
				Message: "the database system is not yet accepting connections"})
		}
		for _, m := range msgs {
			got.add(natsx.MsgID(m))
		}
		return nil
	}
	publish(t, js, "m-1", "ok")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)),
			natsx.ConsumerSpec{Stream: "T", Durable: "c", BatchMax: 10, MaxWait: 20 * time.Millisecond, DeadLetters: sink}, h)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()
	testkit.Eventually(t, 60*time.Second, func() bool { return got.get("m-1") == 1 }, "m-1 applied after the outage")
	if n := tries.Load(); n <= outage {
		t.Fatalf("handler tried %d times, want more than the %d failing ones", n, outage)
	}
	var dead int
	if err := pool.QueryRow(context.Background(), `select count(*) from dlt.dead_letters`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d dead letters after an outage, want none", dead)
	}
}

// Unavailable tells an outage from a failure of the message itself.
func TestUnavailable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P03"}, true},
		{fmt.Errorf("load: %w", &pgconn.PgError{Code: "08006"}), true},
		{&pgconn.PgError{Code: "40001"}, true},
		{&pgconn.PgError{Code: "25006"}, true},                     // read-only: a failover under way
		{&pgconn.PgError{Code: "53100"}, true},                     // disk full
		{&pgconn.PgError{Code: "53200"}, true},                     // out of memory
		{&pgconn.PgError{Code: "55P03"}, true},                     // lock_timeout
		{&pgconn.PgError{Code: "57014"}, false},                    // a statement timeout: may be the message's own doing
		{fmt.Errorf("apply: %w", context.DeadlineExceeded), false}, // a call past its HandleWithin, likewise
		{fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "22P02"}, false},
		{fmt.Errorf("bad payload"), false},
		{nil, false},
	} {
		if got := natsx.Unavailable(tt.err); got != tt.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
