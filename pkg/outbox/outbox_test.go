package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
)

const ddl = `
create schema t;
create table t.outbox (seq bigserial primary key, id text not null unique, subject text not null, payload bytea not null, created_at timestamptz not null default now(), traceparent text);
create table t.inbox (message_id text primary key, consumer text not null, processed_at timestamptz not null default now());
create table t.outbox_published (seq bigint primary key, id text not null, subject text not null, payload bytea not null,
    created_at timestamptz not null, published_at timestamptz not null default now(), stream text not null, stream_seq bigint not null);
create table t.dead_letters (
    id bigserial primary key, consumer text not null, message_id text not null, subject text not null,
    headers jsonb not null default '{}', payload bytea not null, error text not null, attempts int not null,
    first_seen_at timestamptz not null, last_seen_at timestamptz not null,
    replay_requested_at timestamptz, replayed_at timestamptz, unique (consumer, message_id));`

func TestRelayPublishesCommittedOnlyAndInboxDedups(t *testing.T) {
	t.Parallel()
	ctx, pool, js := newOutboxDB(t, natsx.StreamUsage)
	// One committed, one rolled back.
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Add(ctx, tx, "t", outbox.Message{ID: "m1", Subject: "usage.recorded.p1", Payload: []byte("a")})
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Add(ctx, tx, "t", outbox.Message{ID: "m2", Subject: "usage.recorded.p1", Payload: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runRelay(t, ctx, pool, js.JS, log)

	var got []string
	recv := consumeUsage(t, ctx, pool, js, log)
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
		if err := pool.QueryRow(ctx, `select count(*) from t.outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, "outbox not drained")
	// Only the committed message reached the stream: the rolled-back m2 never.
	st, err := js.JS.Stream(ctx, natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// LastSeq counts every message the stream ever stored (acked ones may be gone).
	if info.State.LastSeq != 1 {
		t.Fatalf("stream stored %d messages, want 1 (m1 only)", info.State.LastSeq)
	}

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

// TestRelaySplitsBatchesAndDeadLettersWhatCannotFit: with streams that take
// at most 64 KiB a message (GPUBILL_STREAM_MAX_BYTES=64 KiB), a 150 KiB
// usage batch (~150 KiB) is published in parts that each fit, every event in exactly
// one part; a 100 KiB party update (not a batch) and a batch whose one event
// alone is too big are moved to t.dead_letters (consumer "outbox") instead
// of blocking the relay; the row behind them is published. Once the limit
// is raised, a replay puts a dead letter back into the outbox and it is
// published.
func TestRelaySplitsBatchesAndDeadLettersWhatCannotFit(t *testing.T) {
	t.Parallel()
	ctx, pool, js := newOutboxDB(t)
	small := natsx.Limits{MaxBytes: 64 << 10}
	if err := small.EnsureStreams(ctx, js.JS, nil, natsx.StreamUsage, natsx.StreamParty); err != nil {
		t.Fatal(err)
	}
	big := &eventsv1.UsageRecordedBatch{BatchId: "ub-big"}
	for i := 0; i < 2000; i++ {
		big.Events = append(big.Events, &eventsv1.UsageEvent{Id: fmt.Sprintf("e-%04d", i), LeaseId: "l", Workload: strings.Repeat("w", 60)})
	}
	bigPayload, err := proto.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	huge, err := proto.Marshal(&eventsv1.UsageRecordedBatch{BatchId: "ub-huge", Events: []*eventsv1.UsageEvent{{Id: "e-huge", Workload: strings.Repeat("w", 100<<10)}}})
	if err != nil {
		t.Fatal(err)
	}
	party := bytes.Repeat([]byte("p"), 100<<10)
	if len(bigPayload) < 2*(64<<10) {
		t.Fatalf("batch of %d bytes does not need splitting", len(bigPayload))
	}
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Add(ctx, tx, "t",
			outbox.Message{ID: "m-party", Subject: "party.updated.p1", Payload: party},
			outbox.Message{ID: "m-big", Subject: "usage.recorded.p1", Payload: bigPayload},
			outbox.Message{ID: "m-huge", Subject: "usage.recorded.p1", Payload: huge},
			outbox.Message{ID: "m-after", Subject: "usage.recorded.p1", Payload: []byte("after")})
	}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// USAGE (a work queue of 64 KiB) has room only as its consumer acks.
	cons, err := js.JS.CreateConsumer(ctx, natsx.StreamUsage, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var ids []string
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		after := false
		for !after || len(seen) < len(big.Events) {
			m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
			if err != nil {
				t.Errorf("next: %v", err)
				return
			}
			if err := m.Ack(); err != nil {
				t.Errorf("ack: %v", err)
			}
			ids = append(ids, natsx.MsgID(m))
			if len(m.Data()) > 64<<10 {
				t.Errorf("message %s of %d bytes", natsx.MsgID(m), len(m.Data()))
			}
			if string(m.Data()) == "after" {
				after = true
				continue
			}
			var b eventsv1.UsageRecordedBatch
			if err := proto.Unmarshal(m.Data(), &b); err != nil || b.BatchId != "ub-big" {
				t.Errorf("part %s: %v, batch %q", natsx.MsgID(m), err, b.BatchId)
				return
			}
			for _, e := range b.Events {
				seen[e.Id]++
			}
		}
	}()
	rctx, stop := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- (&outbox.Relay{Pool: pool, JS: js.JS, Schema: "t", Log: log}).Run(rctx) }()
	defer func() {
		stop()
		if err := <-relayDone; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	count := func(q string) int {
		var n int
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	<-consumed
	testkit.Eventually(t, 10*time.Second, func() bool { return count(`select count(*) from t.outbox`) == 0 }, "outbox drained")
	var dead []string
	rows, err := pool.Query(ctx, `select message_id || ' ' || consumer || ' ' || subject || ' ' || length(payload) from t.dead_letters order by message_id`)
	if err != nil {
		t.Fatal(err)
	}
	dead, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(dead, "; "); got != fmt.Sprintf("m-huge outbox usage.recorded.p1 %d; m-party outbox party.updated.p1 %d", len(huge), len(party)) {
		t.Errorf("dead letters: %s", got)
	}
	// The big batch arrived in parts that fit, every event once.
	if len(ids) < 4 || !slices.Contains(ids, "m-after") || !strings.HasPrefix(ids[0], "m-big~1/") {
		t.Errorf("published %v; want m-big's parts and m-after", ids)
	}
	for _, e := range big.Events {
		if seen[e.Id] != 1 {
			t.Errorf("event %s in %d parts, want 1", e.Id, seen[e.Id])
		}
	}
	if len(seen) != len(big.Events) {
		t.Errorf("%d events in the parts, want %d", len(seen), len(big.Events))
	}

	// The fix: streams take bigger messages. A replay republishes m-party.
	if err := (natsx.Limits{MaxBytes: 4 << 20}).EnsureStreams(ctx, js.JS, nil, natsx.StreamParty); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `update t.dead_letters set replay_requested_at = now() where message_id = 'm-party'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return count(`select count(*) from t.dead_letters where message_id = 'm-party' and replayed_at is not null`) == 1 &&
			count(`select count(*) from t.outbox`) == 0
	}, "m-party replayed and published")
	st, err := js.JS.Stream(ctx, natsx.StreamParty)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 || info.State.Bytes < uint64(len(party)) {
		t.Errorf("PARTY after the replay: %+v, %v", info.State, err)
	}
}

// TestCopyWritesRowsAsAddDoes: Copy queues each message as Add would (in
// order, payload and subject as given, no traceparent without a trace), and
// a repeated id fails the copy rather than being skipped.
func TestCopyWritesRowsAsAddDoes(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool, _ := testkit.NewPool(t)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	msgs := []outbox.Message{
		{ID: "c1", Subject: "ledger.posted.renter", Payload: []byte{0, 1, 2}},
		{ID: "c2", Subject: "ledger.posted.provider", Payload: bytes.Repeat([]byte("x"), 300<<10)},
	}
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := outbox.Add(ctx, tx, "t", outbox.Message{ID: "a1", Subject: "ledger.posted.house", Payload: []byte("a")}); err != nil {
			return err
		}
		return outbox.Copy(ctx, tx, "t", msgs...)
	}); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `select id, subject, payload, traceparent is null from t.outbox order by seq`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id, subject string
		var payload []byte
		var noTrace bool
		if err := rows.Scan(&id, &subject, &payload, &noTrace); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %d %x %v", id, subject, len(payload), payload[:min(3, len(payload))], noTrace))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"a1 ledger.posted.house 1 61 true", "c1 ledger.posted.renter 3 000102 true",
		fmt.Sprintf("c2 ledger.posted.provider %d 787878 true", 300<<10)}
	if !slices.Equal(got, want) {
		t.Fatalf("outbox rows %q, want %q", got, want)
	}
	err = pg.InTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Copy(ctx, tx, "t", msgs[0]) })
	if !pg.IsUniqueViolation(err) {
		t.Fatalf("copying c1 again: %v, want a unique violation", err)
	}
}

// An audit batch too big to publish is split along its records, each part
// an AuditRecordedBatch that fits, the records in their order; a lone
// record is published whole.
func TestAuditBatchSplitsAlongItsRecords(t *testing.T) {
	batch := &eventsv1.AuditRecordedBatch{}
	for i := range 50 {
		batch.Records = append(batch.Records, &eventsv1.AuditRecorded{EventId: fmt.Sprintf("ev-%02d", i), Service: "ledger",
			ResourceIds: []string{"transaction_id=" + strings.Repeat("x", 900)}})
	}
	payload, err := proto.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 10_000
	parts := outbox.SplitToFit("audit-ev-00+50", "audit.recorded.ledger", payload, limit)
	if len(parts) < 5 {
		t.Fatalf("%d parts of a %d-byte batch under %d bytes", len(parts), len(payload), limit)
	}
	var got []string
	for i, m := range parts {
		if len(m.Data) > limit || m.Header.Get(jetstream.MsgIDHeader) != fmt.Sprintf("audit-ev-00+50~%d/%d", i+1, len(parts)) {
			t.Fatalf("part %d: %d bytes, id %q", i+1, len(m.Data), m.Header.Get(jetstream.MsgIDHeader))
		}
		part := &eventsv1.AuditRecordedBatch{}
		if err := proto.Unmarshal(m.Data, part); err != nil {
			t.Fatal(err)
		}
		for _, r := range part.Records {
			got = append(got, r.EventId)
		}
	}
	var want []string
	for _, r := range batch.Records {
		want = append(want, r.EventId)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parts hold %v, want %v", got, want)
	}
	one, err := proto.Marshal(batch.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	if parts := outbox.SplitToFit("audit-ev-00", "audit.recorded.ledger", one, 100); len(parts) != 1 || string(parts[0].Data) != string(one) {
		t.Fatalf("a lone record: %d parts", len(parts))
	}
}

// A batch row is split into the same parts, under the same message ids,
// whatever limits above NATS's default max_payload the server and stream
// have: a row partly acknowledged is published again under the ids it had
// after max_payload grew (or the relay reconnected to a server configured
// otherwise). Split at the limit of the moment, its acknowledged items came
// again under new ids, which consumers deduplicating by id applied twice.
func TestBatchSplitDoesNotDependOnTheLimit(t *testing.T) {
	batch := &eventsv1.AuditRecordedBatch{}
	for i := range 3500 {
		batch.Records = append(batch.Records, &eventsv1.AuditRecorded{EventId: fmt.Sprintf("ev-%04d", i), Service: "ledger",
			ResourceIds: []string{"transaction_id=" + strings.Repeat("x", 900)}})
	}
	payload, err := proto.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(limit int) []string {
		var out []string
		for _, m := range outbox.SplitToFit("audit-big", "audit.recorded.ledger", payload, limit) {
			out = append(out, fmt.Sprintf("%s:%d", m.Header.Get(jetstream.MsgIDHeader), len(m.Data)))
		}
		return out
	}
	at2, at8 := ids(2<<20), ids(8<<20)
	if len(at2) < 3 || !slices.Equal(at2, at8) {
		t.Fatalf("a %d-byte batch split under 2 MiB as %v, under 8 MiB as %v; want the same parts", len(payload), at2, at8)
	}
	if small := ids(100_000); len(small) <= len(at2) {
		t.Fatalf("under a limit of 100 000 bytes: %d parts, want more than %d", len(small), len(at2))
	}
}

// The relay publishes the payloads its process holds for committed rows
// (outbox.Hold) instead of reading them back, and reads the others' from
// the table: here the held ones differ from their rows, so what reached
// the stream shows which was published. Every row is published once, in
// order, and moved to outbox_published; nothing stays held. Nothing is
// held while no relay of this process leads the outbox, and what is held
// for a row already gone is forgotten when the relay finds its outbox empty.
func TestRelayPublishesHeldPayloads(t *testing.T) {
	t.Parallel()
	ctx, pool, js := newOutboxDB(t, natsx.StreamUsage)
	outbox.Hold(pool, "t", outbox.Message{ID: "h0", Payload: []byte("x")})
	if outbox.Holding(pool, "t") {
		t.Fatal("a payload held with no relay leading the outbox")
	}
	// Lead as this process's relay does, so that the rows are written and
	// held (after their commit, as a writer holds) before the relay runs
	// and can read them.
	defer outbox.Lead(pool, "t")()
	var rows []outbox.Message
	for i := 1; i <= 3; i++ {
		rows = append(rows, outbox.Message{ID: fmt.Sprintf("h%d", i), Subject: "usage.recorded.p1", Payload: fmt.Appendf(nil, "row-%d", i)})
	}
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Copy(ctx, tx, "t", rows...) }); err != nil {
		t.Fatal(err)
	}
	outbox.Hold(pool, "t", outbox.Message{ID: "h1", Payload: []byte("held-1")}, outbox.Message{ID: "h3", Payload: []byte("held-3")})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runRelay(t, ctx, pool, js.JS, log)
	recv := consumeUsage(t, ctx, pool, js, log)
	var got []string
	testkit.Eventually(t, 10*time.Second, func() bool {
		select {
		case s := <-recv:
			got = append(got, s)
		default:
		}
		return len(got) >= 3
	})
	if want := []string{"h1:held-1", "h2:row-2", "h3:held-3"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		return count(t, ctx, pool, `select count(*) from t.outbox_published`) == 3
	}, "not moved to outbox_published")
	if n := count(t, ctx, pool, `select count(*) from t.outbox`); n != 0 {
		t.Fatalf("%d rows left in the outbox", n)
	}
	if outbox.Holding(pool, "t") {
		t.Fatal("payloads still held after they were published")
	}
	// A payload held after its row was published (here: a row never
	// written) is forgotten once the relay finds its outbox empty.
	// (Whether it is held at first is not asserted: the relay may already
	// have found its outbox empty again.)
	outbox.Hold(pool, "t", outbox.Message{ID: "gone", Payload: []byte("x")})
	testkit.Eventually(t, 5*time.Second, func() bool { return !outbox.Holding(pool, "t") }, "a payload without its row still held")
}

// consumeUsage consumes USAGE as durable "c" until the test ends, sending
// each message as "<id>:<payload>"; an error it stops with fails the test.
func consumeUsage(t *testing.T, ctx context.Context, pool *pgxpool.Pool, js *testkit.JetStream, log *slog.Logger) <-chan string {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx)
	recv := make(chan string, 10)
	consumed := make(chan error, 1)
	go func() {
		consumed <- natsx.Consume(cctx, js.JS, log, natsx.ConsumerSpec{Stream: natsx.StreamUsage, Durable: "c", DeadLetters: deadletter.New(pool, "t", log)}, func(ctx context.Context, msgs []jetstream.Msg) error {
			for _, m := range msgs {
				select {
				case recv <- natsx.MsgID(m) + ":" + string(m.Data()):
				case <-ctx.Done():
					return nil // the test is over
				}
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-consumed; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	return recv
}

// TestInTxHoldsWhatACommittedWriteCopied: outbox.InTx holds the messages a
// write appended once it commits, and nothing for a write that fails.
func TestInTxHoldsWhatACommittedWriteCopied(t *testing.T) {
	t.Parallel()
	ctx, pool, _ := newOutboxDB(t, natsx.StreamUsage)
	defer outbox.Lead(pool, "t")()
	msg := outbox.Message{ID: "w1", Subject: "usage.recorded.p1", Payload: []byte("p")}
	failed := errors.New("the write fails after copying")
	err := outbox.InTx(ctx, pool, "t", func(tx pgx.Tx, held *[]outbox.Message) error {
		if err := outbox.Copy(ctx, tx, "t", msg); err != nil {
			return err
		}
		*held = append(*held, msg)
		return failed
	})
	if !errors.Is(err, failed) || outbox.Holding(pool, "t") {
		t.Fatalf("a failed write: err %v, holding %v; want its error and nothing held", err, outbox.Holding(pool, "t"))
	}
	if err := outbox.InTx(ctx, pool, "t", func(tx pgx.Tx, held *[]outbox.Message) error {
		*held = append(*held, msg)
		return outbox.Copy(ctx, tx, "t", msg)
	}); err != nil || !outbox.Holding(pool, "t") {
		t.Fatalf("a committed write: err %v, holding %v; want its payload held", err, outbox.Holding(pool, "t"))
	}
}

// A relay round reads at most its byte budget of payloads (and at least one
// row): 1000 rows of megabytes each were read at once, past a pod's memory
// limit, by every replica in turn.
func TestRelayRoundReadsABoundedBytes(t *testing.T) {
	t.Parallel()
	ctx, pool, _ := newOutboxDB(t)
	big := bytes.Repeat([]byte("c"), 1<<20)
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		var ms []outbox.Message
		for i := range 40 {
			ms = append(ms, outbox.Message{ID: fmt.Sprintf("m-%02d", i), Subject: "charges.rated.x", Payload: big})
		}
		return outbox.Add(ctx, tx, "t", ms...)
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		budget int64
		want   int
	}{{8 << 20, 8}, {(8 << 20) + 1, 9}, {1, 1}} {
		ids, err := (&outbox.Relay{Pool: pool, Schema: "t", BatchBytes: tc.budget}).ReadBatch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != tc.want || ids[0] != "m-00" {
			t.Errorf("a round of budget %d read %d rows of 1 MiB (first %v), want %d", tc.budget, len(ids), ids[:min(1, len(ids))], tc.want)
		}
	}
}

// A full work queue holds back only its own messages: behind a thousand
// usage.recorded rows that USAGE (full, its consumer down) refuses, a
// party update waited for good, every round reading the same oldest rows
// (a tier change missed its cycle's snapshot, a renter's credit limit
// never reached the ledger). The usage rows go, in order, once there is room.
func TestFullStreamHoldsBackOnlyItsOwnMessages(t *testing.T) {
	t.Parallel()
	ctx, pool, js := newOutboxDB(t)
	if err := (natsx.Limits{MaxBytes: 64 << 10}).EnsureStreams(ctx, js.JS, nil, natsx.StreamUsage, natsx.StreamParty); err != nil {
		t.Fatal(err)
	}
	cons, err := js.JS.CreateConsumer(ctx, natsx.StreamUsage, jetstream.ConsumerConfig{Durable: "usage", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	fill := bytes.Repeat([]byte("u"), 1000)
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		var ms []outbox.Message
		for i := range 1100 { // 1.1 MB: USAGE takes the first 60 or so
			ms = append(ms, outbox.Message{ID: fmt.Sprintf("u-%04d", i), Subject: "usage.recorded.p1", Payload: fill})
		}
		ms = append(ms, outbox.Message{ID: "party-1", Subject: "party.updated.provider.p-1", Payload: []byte("tier partner")})
		return outbox.Add(ctx, tx, "t", ms...)
	}); err != nil {
		t.Fatal(err)
	}
	runRelay(t, ctx, pool, js.JS, slog.New(slog.NewTextHandler(io.Discard, nil)))
	party, err := js.JS.Stream(ctx, natsx.StreamParty)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		info, err := party.Info(ctx)
		return err == nil && info.State.Msgs == 1
	}, "the party update never left the outbox behind the refused usage rows")
	// Room again: the usage rows follow, each once.
	seen := map[string]bool{}
	testkit.Eventually(t, 60*time.Second, func() bool {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			if id := natsx.MsgID(m); seen[id] {
				t.Fatalf("usage message %s published twice", id)
			}
			seen[natsx.MsgID(m)] = true
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		return len(seen) == 1100
	}, "usage rows not all published")
}
