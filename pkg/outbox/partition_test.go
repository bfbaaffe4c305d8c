package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// relayLockHolder is the application_name of the session holding schema
// t's relay lock ("" when none does).
func relayLockHolder(t *testing.T, ctx context.Context, pool *pgxpool.Pool) string {
	t.Helper()
	var app string
	err := pool.QueryRow(ctx, `select coalesce(max(a.application_name), '') from pg_locks l join pg_stat_activity a using (pid)
		where l.locktype = 'advisory' and l.granted and l.objid = hashtext($1)::oid`, outbox.RelayLockKey("t")).Scan(&app)
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// A relay leader cut off from the database (its node partitioned: no FIN,
// no RST) hands the relay over within a bounded time. Its session and its
// advisory lock outlived it on the server for as long as TCP keepalive
// took to give up (7200 s + 9 × 75 s by default), and every other replica
// of the service published nothing meanwhile: charges, usage, postings,
// settlements held in the outbox for over two hours.
func TestPartitionedRelayLeaderHandsOver(t *testing.T) {
	t.Parallel()
	ctx, pool, js := newOutboxDB(t, natsx.StreamUsage)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cc := pool.Config().ConnConfig
	addr, hole := testkit.BlackholeProxy(t, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	cfgA := pool.Config().Copy()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	cfgA.ConnConfig.Host, cfgA.ConnConfig.Port = host, uint16(p)
	cfgA.ConnConfig.RuntimeParams["application_name"] = "relay-a"
	poolA, err := pgxpool.NewWithConfig(ctx, cfgA)
	if err != nil {
		t.Fatal(err)
	}
	// Replica A leads the relay, then its node is partitioned away.
	actx, stopA := context.WithCancel(ctx)
	doneA := make(chan error, 1)
	go func() { doneA <- (&outbox.Relay{Pool: poolA, JS: js.JS, Schema: "t", Log: log}).Run(actx) }()
	t.Cleanup(func() {
		stopA()
		select {
		case err := <-doneA:
			if err != nil {
				t.Errorf("the partitioned relay: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the partitioned relay did not stop with its context")
		}
		go poolA.Close() // its connections' peer is the partition
	})
	testkit.Eventually(t, 10*time.Second, func() bool { return relayLockHolder(t, ctx, pool) == "relay-a" }, "replica A never took the relay lock")
	hole.Store(true)
	partitioned := time.Now()
	// Replica B, healthy, runs its relay.
	runRelay(t, ctx, pool, js.JS, log)
	recv := consumeUsage(t, ctx, pool, js, log)
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Add(ctx, tx, "t", outbox.Message{ID: "m1", Subject: "usage.recorded.p1", Payload: []byte("a")})
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-recv:
		t.Logf("published %s %v after the leader's partition", m, time.Since(partitioned).Round(time.Second))
	case <-time.After(60 * time.Second):
		var n int
		var state string
		if err := pool.QueryRow(ctx, `select count(*), coalesce(string_agg(a.state, ','), '') from pg_locks l join pg_stat_activity a using (pid)
			where l.locktype = 'advisory' and l.granted and l.objid = hashtext($1)::oid`, outbox.RelayLockKey("t")).Scan(&n, &state); err != nil {
			t.Fatal(err)
		}
		t.Fatalf("m1 not published 60 s after the leader's partition: the relay lock is held by %q (%d session(s), state %s)",
			relayLockHolder(t, ctx, pool), n, state)
	}
	if h := relayLockHolder(t, ctx, pool); h == "relay-a" {
		t.Fatalf("published while the partitioned replica still holds the relay lock")
	}
}
