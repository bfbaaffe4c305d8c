// Package outbox is the transactional outbox and inbox every service uses.
//
// A service writes the events it publishes into <schema>.outbox in the same
// transaction as the state change (Add); the Relay publishes them to JetStream
// with Nats-Msg-Id = the event id and moves them to <schema>.outbox_published
// once JetStream has acked, so a crash between commit and publish loses
// nothing, and a crash between publish and move duplicates nothing (JetStream
// drops the repeat inside its duplicate window; consumers also record message
// ids with their effects). outbox_published keeps a message until every
// consumer that takes it has acked it, so a database snapshot can republish
// what JetStream held (RequeuePublished).
//
// Each service's first migration creates the two tables:
//
//	create table <schema>.outbox (
//	    seq bigserial primary key,
//	    id text not null unique,
//	    subject text not null,
//	    payload bytea not null,
//	    created_at timestamptz not null default now(),
//	    traceparent text); -- added later by each schema's NNNN_outbox_traceparent
//
// Tracing: Add keeps the W3C traceparent of the span in its context with
// the rows; the relay publishes each such row in a producer span, child of
// that span, and puts its context in the message's headers, where
// natsx.Consume picks it up. Rows without one (tracing off, no caller's
// trace) are published without a span or header.
//
//	create table <schema>.inbox (
//	    message_id text primary key,
//	    consumer text not null,
//	    processed_at timestamptz not null default now());
//	create table <schema>.outbox_published (
//	    seq bigint primary key, id text not null, subject text not null,
//	    payload bytea not null, created_at timestamptz not null,
//	    published_at timestamptz not null default now(),
//	    stream text not null, stream_seq bigint not null);
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/subjects"
)

// Limits of the relay.
const (
	relayBatchMax = 1000
	// relayBatchBytes bounds the payload bytes one relay round reads (a
	// round takes at least one row, however big): rows of megabytes each
	// (a rated charges message lists every event id of a fetch) read 1000
	// at a time held gigabytes, past a pod's memory limit; killed, the next
	// replica read the same rows and died too, for as long as the backlog
	// lasted.
	relayBatchBytes   = 64 << 20
	relayPollMin      = 5 * time.Millisecond   // poll interval right after traffic
	relayIdlePoll     = 200 * time.Millisecond // longest poll interval when idle
	relayErrorBackoff = 500 * time.Millisecond
	publishAckTimeout = 30 * time.Second
	// relayGather is how long the relay lets messages gather after a round
	// that did not fill a batch: under a stream of small commits (API
	// writes, one group commit every few milliseconds) each round otherwise
	// read, published and moved one commit's few rows, three statements a
	// commit. A message waits at most this much more; a lone one, none.
	relayGather = 5 * time.Millisecond
	// relayLockIdleMax is how long the server keeps the leader's lock
	// session idle (idle_session_timeout) before it ends it, releasing the
	// relay lock: a leader cut off from the database (its node partitioned:
	// no FIN, no RST) held the lock until the server's TCP keepalive gave
	// up, 2 h 11 min by default, and no other replica published meanwhile.
	// The leader keeps its session busy every relayLockBeatEach; a beat not
	// answered within relayLockBeatTimeout ends its leading, so it stops
	// publishing before another replica can take the lock.
	relayLockIdleMax     = 30 * time.Second
	relayLockBeatEach    = 5 * time.Second
	relayLockBeatTimeout = 10 * time.Second
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

// Add writes messages to the schema's outbox inside tx, with the
// traceparent of the span in ctx (if any). Call Wake(schema) after the
// commit for the lowest latency.
func Add(ctx context.Context, tx pgx.Tx, schema string, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	q, args, err := addStatement(ctx, schema, msgs)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("outbox add: %w", err)
	}
	return nil
}

// Queue is Add as one more statement of b, a pipeline the caller sends
// inside its transaction (its error is the caller's to read in turn).
func Queue(ctx context.Context, b *pgx.Batch, schema string, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	q, args, err := addStatement(ctx, schema, msgs)
	if err != nil {
		return err
	}
	b.Queue(q, args...)
	return nil
}

// addStatement is Add's statement and its arguments.
func addStatement(ctx context.Context, schema string, msgs []Message) (string, []any, error) {
	ids := make([]string, len(msgs))
	subjects := make([]string, len(msgs))
	payloads := make([][]byte, len(msgs))
	for i, m := range msgs {
		if err := m.Check(); err != nil {
			return "", nil, err
		}
		ids[i], subjects[i], payloads[i] = m.ID, m.Subject, m.Payload
	}
	q := "insert into " + pgx.Identifier{schema, "outbox"}.Sanitize() + ` (id, subject, payload, traceparent)
		select u.*, $4::text from unnest($1::text[], $2::text[], $3::bytea[]) as u
		on conflict (id) do nothing`
	return q, []any{ids, subjects, payloads, traceparent(ctx)}, nil
}

// Copy writes messages to the schema's outbox inside tx by COPY, like Add
// but for messages whose ids are new by construction (derived from ids the
// same transaction creates): nothing skips a repeated id, which fails the
// transaction. COPY streams the payloads instead of binding them as one
// bytea array: for the ledger's fetched batches (MB of ledger.posted),
// encoding that array was ~5 % of the ledger_postings bench's Go profile
// and receiving it a few % of the backends' (perf).
func Copy(ctx context.Context, tx pgx.Tx, schema string, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	tp := traceparent(ctx)
	rows := make([][]any, len(msgs))
	for i, m := range msgs {
		if err := m.Check(); err != nil {
			return err
		}
		rows[i] = []any{m.ID, m.Subject, m.Payload, tp}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{schema, "outbox"}, []string{"id", "subject", "payload", "traceparent"},
		pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("outbox copy: %w", err)
	}
	return nil
}

// traceparent is the outbox's traceparent column for the span in ctx: null
// without a trace.
func traceparent(ctx context.Context) any {
	if s := obs.Traceparent(ctx); s != "" {
		return s
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

// Relay publishes a schema's outbox to JetStream. A batch message over the
// server's max_payload is split into parts that fit (BatchFields); a row
// that still cannot be published (too big, a bad subject) is moved to the
// schema's dead_letters table (consumer "outbox"), counted, and the relay
// goes on; a replay puts it back into the outbox.
type Relay struct {
	Pool   *pgxpool.Pool
	JS     jetstream.JetStream
	Schema string
	Log    *slog.Logger
	// BatchBytes bounds the payload bytes a round reads; 0: relayBatchBytes.
	BatchBytes int64

	// unbounded: the server has no idle_session_timeout (PostgreSQL < 14):
	// the relay lock is taken alone (tryLock).
	unbounded bool

	limits map[string]streamLimit // by the subject's first token
	full   map[string]time.Time   // streams that refused for want of room, by first token: until when they are passed over
}

// fullPause is how long the relay passes over the rows of a stream that
// refused a publish for want of room (a work queue at its byte cap whose
// consumer is behind). Read in order, a thousand such rows at the outbox's
// head held back every row behind them, bound for other streams: a party
// update (a tier, a credit limit) waited as long as the usage backlog. A
// stream's own rows keep their order: they are all passed over together.
const fullPause = time.Second

// streamFull: the stream refused the message for want of room
// (DiscardNew at its byte or message cap).
func streamFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeStreamStoreFailed && strings.Contains(apiErr.Description, "maximum")
}

// jsErrCodeStreamStoreFailed is the server's JSStreamStoreFailedF (its
// description names the limit: "maximum bytes exceeded").
const jsErrCodeStreamStoreFailed jetstream.ErrorCode = 10077

// firstToken is a subject's first token: its stream's (one per stream).
func firstToken(subject string) string {
	tok, _, _ := strings.Cut(subject, ".")
	return tok
}

// passedOver lists the first tokens of the streams the relay passes over now.
func (r *Relay) passedOver() []string {
	out := []string{}
	now := time.Now()
	for tok, until := range r.full {
		if now.Before(until) {
			out = append(out, tok)
		} else {
			delete(r.full, tok)
		}
	}
	return out
}

type streamLimit struct {
	bytes int
	at    time.Time
}

// streamLimitTTL is how long a stream's max message size is remembered.
const streamLimitTTL = time.Minute

// BatchFields names, by subject prefix, the event batches (events.proto)
// whose items are a repeated field: one too big to publish is split along
// it, each part carrying the batch's other fields and its own message id
// (<id>~<part>/<parts>, the same on every retry while the limits stay at or
// above partBytesMax).
var BatchFields = map[string]protowire.Number{
	subjects.UsageRecorded.Prefix(): 2,  // UsageRecordedBatch.events
	subjects.ChargesRated.Prefix():  2,  // ChargesRatedBatch.charges
	subjects.LedgerPosted.Prefix():  2,  // LedgerPostedBatch.transactions
	subjects.AuditRecorded.Prefix(): 11, // AuditRecordedBatch.records (a lone AuditRecorded has none: kept whole)
}

// headerBytesMax is room kept under max_payload for subject and headers.
const headerBytesMax = 1024

func (r *Relay) sink() *deadletter.Sink { return deadletter.New(r.Pool, r.Schema, r.Log) }

// Run relays until ctx ends. Only one relay per schema publishes at a time
// (a session advisory lock). Each round publishes the rows it reads in seq
// order, but seq is taken at insert, not at commit: a row whose transaction
// commits after a later seq's was read goes out after that one. No consumer
// relies on commit order: the parties' read models keep the newest version
// (pkg/readmodel), every other message is applied by its own ids, once.
func (r *Relay) Run(ctx context.Context) error {
	go func() {
		if err := r.sink().ReplayLetters(ctx, deadletter.ConsumerOutbox, r.requeue); err != nil && ctx.Err() == nil {
			r.Log.Error("outbox dead-letter replay stopped", "schema", r.Schema, "err", err)
		}
	}()
	for ctx.Err() == nil {
		if err := r.runLeader(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error("outbox relay", "schema", r.Schema, "err", err)
			sleep(ctx, relayErrorBackoff)
		}
	}
	return nil
}

// RelayLockKey is the advisory lock (pg_advisory_lock(hashtext(key))) the
// schema's leading relay holds for as long as it leads: every service runs
// one on its schema, so the lock held says a service runs on the database
// (gpubill after-recovery refuses then).
func RelayLockKey(schema string) string { return "gpubill.outbox." + schema }

func (r *Relay) runLeader(ctx context.Context) error {
	conn, err := r.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	leader, err := r.tryLock(ctx, conn)
	if err != nil {
		// The statement may have taken the lock before it failed: its
		// session ends, and the lock with it.
		closeSession(ctx, conn.Hijack())
		return err
	}
	if !leader {
		sleep(ctx, relayIdlePoll)
		return nil
	}
	// The lock's session is the leader's alone, out of the pool, and ends
	// with its leading, which releases the lock. Unlocked by a statement
	// with no deadline, a leader whose connection was cut hung there for
	// good.
	lock := conn.Hijack()
	ctx, lost := context.WithCancelCause(ctx)
	beaten := make(chan struct{})
	go func() {
		defer close(beaten)
		beat(ctx, lost, lock)
	}()
	defer func() {
		lost(nil)
		<-beaten
		closeSession(ctx, lock)
	}()
	defer lead(outboxOf{r.Pool, r.Schema})()
	wake := waker(r.Schema)
	idle := relayPollMin
	var pruned time.Time
	for ctx.Err() == nil {
		if time.Since(pruned) >= publishedPruneEach {
			pruned = time.Now()
			if err := r.prunePublished(ctx); err != nil && ctx.Err() == nil {
				r.Log.Error("outbox: pruning published messages failed (they are kept; the table grows until it succeeds)", "schema", r.Schema, "err", err)
			}
		}
		n, err := r.relayOnce(ctx)
		if cause := context.Cause(ctx); err != nil && ctx.Err() != nil && !errors.Is(cause, context.Canceled) {
			return cause // the lock's session lost mid-round
		}
		if err != nil {
			return err
		}
		if n > 0 {
			idle = relayPollMin
			if n < relayBatchMax {
				sleep(ctx, relayGather) // under load: relay again once more have gathered
			}
			continue
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
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err // the lock's session lost: leads again once it can
	}
	return nil
}

// tryLock takes the relay lock if it is free and, in the same statement,
// has the server end the lock's session once it has been idle
// relayLockIdleMax (idle_session_timeout): the lock then outlives a leader
// cut off from the database by that long, not by the server's TCP
// keepalive (which a peer that still acknowledges, a proxy or a hung
// process, never trips). Set by a second statement, a leader cut off
// between the two held the lock for good. A session that does not take the
// lock goes back to the pool unchanged.
func (r *Relay) tryLock(ctx context.Context, conn *pgxpool.Conn) (bool, error) {
	var leader bool
	if r.unbounded {
		err := conn.QueryRow(ctx, `select pg_try_advisory_lock(hashtext($1))`, RelayLockKey(r.Schema)).Scan(&leader)
		return leader, err
	}
	err := conn.QueryRow(ctx, `select case when pg_try_advisory_lock(hashtext($1))
		then set_config('idle_session_timeout', $2, false) is not null else false end`,
		RelayLockKey(r.Schema), fmt.Sprint(relayLockIdleMax.Milliseconds())).Scan(&leader)
	if pg.HasCode(err, "42704") { // undefined_object: no idle_session_timeout
		r.unbounded = true
		r.Log.Error("outbox relay: the server has no idle_session_timeout (PostgreSQL < 14): a leader cut off from it holds the relay lock "+
			"until the server's TCP keepalive gives up", "schema", r.Schema)
	}
	return leader, err
}

// closeSession ends a session of the relay's, its locks with it; a
// connection cut is given up after relayLockBeatTimeout.
func closeSession(ctx context.Context, c *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayLockBeatTimeout)
	defer cancel()
	// Closed either way: the server ends the session on the Terminate, or
	// once idle_session_timeout passes.
	c.Close(cctx)
}

// beat keeps the lock's session busy every relayLockBeatEach, so the server
// does not end it; a beat that fails or is not answered in time ends the
// leading (lost): a leader cut off stops publishing before the server ends
// its session and another replica takes the lock.
func beat(ctx context.Context, lost context.CancelCauseFunc, lock *pgx.Conn) {
	t := time.NewTicker(relayLockBeatEach)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, relayLockBeatTimeout)
		_, err := lock.Exec(bctx, `select 1`)
		cancel()
		if err != nil && ctx.Err() == nil {
			lost(fmt.Errorf("outbox relay lock session lost, leading stops: %w", err))
			return
		}
	}
}

// queuePlan runs a statement on the outbox with a plan made for the table
// as it is now (pgx sends it unnamed, so Postgres plans it at each run; its
// result description is cached). The outbox is a queue: its heap fills
// with published rows, dead until a vacuum, while a relay's pooled
// connections live for days. A statement prepared once per connection (pgx's
// default) keeps the plan Postgres made at its first run; the relay first
// reads the outbox when it is empty, where a scan of the heap is the
// cheapest plan, and would then scan every dead row on every read. Planned
// at each run, they follow the heap's size: once it has grown, mostly
// through the primary key (TestRelayReadsTheOutboxByIndexAsItGrows).
const queuePlan = pgx.QueryExecModeCacheDescribe

// relayOnce publishes up to relayBatchMax messages and moves the acked ones
// to outbox_published (see PublishedKeepMax).
func (r *Relay) relayOnce(ctx context.Context) (int, error) {
	tbl := pgx.Identifier{r.Schema, "outbox"}.Sanitize()
	batch, err := r.readBatch(ctx, tbl)
	if err != nil || len(batch) == 0 {
		return 0, err
	}
	p := newPublishing(batch)
	defer p.endSpans()
	if err := r.publish(ctx, p); err != nil {
		return 0, err
	}
	firstErr, err := p.awaitAcks(ctx)
	if err != nil {
		return 0, err
	}
	for _, tok := range p.full {
		if r.full == nil {
			r.full = map[string]time.Time{}
		}
		r.full[tok] = time.Now().Add(fullPause)
	}
	if err := r.settle(ctx, tbl, p); err != nil {
		return 0, err
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return len(batch), nil
}

// outboxRow is one row of an outbox table, oldest first.
type outboxRow struct {
	seq         int64
	id          string
	subject     string
	payload     []byte
	traceparent string
}

// readBatch reads the oldest relayBatchMax rows of the outbox table tbl.
// When this process holds payloads for the schema (Hold), it reads the rows
// without them and then only the payloads it does not hold.
func (r *Relay) readBatch(ctx context.Context, tbl string) ([]outboxRow, error) {
	o := outboxOf{r.Pool, r.Schema}
	budget := r.BatchBytes
	if budget <= 0 {
		budget = relayBatchBytes
	}
	// The oldest rows, up to relayBatchBytes of payload (octet_length reads
	// a stored value's size without its bytes).
	// Passed over: the rows of a stream that refused for want of room.
	window := fmt.Sprintf(`select seq, id, subject, payload, coalesce(traceparent, '') as traceparent,
			sum(octet_length(payload)) over (order by seq) - octet_length(payload) as before
		from (select seq, id, subject, payload, traceparent from %s
			where split_part(subject, '.', 1) <> all($1::text[]) order by seq limit %d) x`, tbl, relayBatchMax)
	skip := r.passedOver()
	if !holding(o) {
		return r.readRows(ctx, fmt.Sprintf(`select seq, id, subject, payload, traceparent from (%s) y
			where before < %d order by seq`, window, budget), skip)
	}
	batch, err := r.readRows(ctx, fmt.Sprintf(`select seq, id, subject, null::bytea, traceparent from (%s) y
		where before < %d order by seq`, window, budget), skip)
	if err != nil {
		return nil, err
	}
	if len(batch) == 0 {
		forgetHeld(o) // held after their rows were published (forgetHeld)
		return nil, nil
	}
	var missing []int64
	at := map[int64]int{}
	for i := range batch {
		x := &batch[i]
		if p, ok := takeHeld(o, x.id); ok {
			x.payload = p
		} else {
			missing, at[x.seq] = append(missing, x.seq), i
		}
	}
	if len(missing) == 0 {
		return batch, nil
	}
	rows, err := r.Pool.Query(ctx, fmt.Sprintf(`select seq, payload from %s where seq = any($1)`, tbl), queuePlan, missing)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var p []byte
		if err := rows.Scan(&seq, &p); err != nil {
			return nil, err
		}
		batch[at[seq]].payload = p
		delete(at, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(at) > 0 {
		// Rows gone between the two reads: only another relay moves them,
		// and only one relays a schema at a time. Read afresh next time.
		return nil, fmt.Errorf("outbox %s: %d rows gone while they were read", tbl, len(at))
	}
	return batch, nil
}

// readRows reads outbox rows by query q (seq, id, subject, payload,
// traceparent).
func (r *Relay) readRows(ctx context.Context, q string, args ...any) ([]outboxRow, error) {
	rows, err := r.Pool.Query(ctx, q, append([]any{queuePlan}, args...)...)
	if err != nil {
		return nil, err
	}
	var batch []outboxRow
	for rows.Next() {
		var x outboxRow
		if err := rows.Scan(&x.seq, &x.id, &x.subject, &x.payload, &x.traceparent); err != nil {
			return nil, err
		}
		batch = append(batch, x)
	}
	return batch, rows.Err()
}

// publishing is one batch in flight: the async publishes of its rows' parts
// and what came back for each row.
type publishing struct {
	batch   []outboxRow
	parts   []publishedPart
	left    []int              // parts of each row not yet acked
	acked   []jetstream.PubAck // each row's last part's ack (stream, sequence)
	dead    []int              // rows that can never be published, in order
	deadErr map[int]error      // why, per dead row
	spans   map[int]trace.Span // of the rows written in a trace
	full    []string           // first tokens of the streams that refused for want of room
}

type publishedPart struct {
	row int
	f   jetstream.PubAckFuture
}

func newPublishing(batch []outboxRow) *publishing {
	return &publishing{
		batch:   batch,
		left:    make([]int, len(batch)),
		acked:   make([]jetstream.PubAck, len(batch)),
		deadErr: map[int]error{},
		spans:   map[int]trace.Span{},
	}
}

// endSpans ends each row's publish span with its outcome.
func (p *publishing) endSpans() {
	for i, sp := range p.spans {
		if err := p.deadErr[i]; err != nil {
			sp.SetStatus(otelcodes.Error, err.Error())
		} else if p.left[i] > 0 {
			sp.SetStatus(otelcodes.Error, "not acknowledged; published again later")
		}
		sp.End()
	}
}

// publish sends every row of the batch, split into parts that fit the
// server's and the stream's limits, without waiting for acks. A row refused
// for good is marked dead; any other publish error ends the batch.
func (r *Relay) publish(ctx context.Context, p *publishing) error {
	serverMax := r.payloadMax()
	for i, x := range p.batch {
		msgs := splitToFit(x.id, x.subject, x.payload, min(serverMax, r.streamMax(ctx, x.subject)))
		if x.traceparent != "" {
			p.spans[i] = publishSpan(ctx, x.traceparent, x.id, x.subject, msgs)
		}
		for _, m := range msgs {
			f, err := r.JS.PublishMsgAsync(m)
			if permanent(err) {
				p.dead, p.deadErr[i] = append(p.dead, i), err
				break
			}
			if err != nil {
				return fmt.Errorf("publish %s: %w", x.id, err)
			}
			p.parts = append(p.parts, publishedPart{i, f})
			p.left[i]++
		}
	}
	return nil
}

// awaitAcks waits up to publishAckTimeout for every part's ack. firstErr is
// the first transient failure (the batch still settles what was acked); err
// is ctx's end.
func (p *publishing) awaitAcks(ctx context.Context) (firstErr, err error) {
	timeout := time.NewTimer(publishAckTimeout)
	defer timeout.Stop()
	for _, part := range p.parts {
		select {
		case ack := <-part.f.Ok():
			p.left[part.row]--
			if ack != nil && ack.Sequence >= p.acked[part.row].Sequence {
				p.acked[part.row] = *ack
			}
		case err := <-part.f.Err():
			if streamFull(err) {
				p.full = append(p.full, firstToken(p.batch[part.row].subject))
			}
			if permanent(err) && p.deadErr[part.row] == nil {
				p.dead, p.deadErr[part.row] = append(p.dead, part.row), err
			} else if firstErr == nil {
				firstErr = fmt.Errorf("publish %s to %s: %w", p.batch[part.row].id, p.batch[part.row].subject, err)
			}
		case <-timeout.C:
			return errors.New("publish acks timed out"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return firstErr, nil
}

// settle moves every fully acked row to outbox_published and dead-letters
// the rows that can never be published.
func (r *Relay) settle(ctx context.Context, tbl string, p *publishing) error {
	done := make([]int64, 0, len(p.batch))
	var streams []string
	var streamSeqs []int64
	for i, x := range p.batch {
		if p.left[i] == 0 && p.deadErr[i] == nil {
			done = append(done, x.seq)
			streams, streamSeqs = append(streams, p.acked[i].Stream), append(streamSeqs, int64(p.acked[i].Sequence))
		}
	}
	if len(done) > 0 {
		if _, err := r.Pool.Exec(ctx, movePublished(r.Schema), queuePlan, done, streams, streamSeqs); err != nil {
			return err
		}
	}
	if len(p.dead) > 0 {
		r.limits = nil // a stream's limit may have changed
	}
	for _, i := range p.dead {
		x := p.batch[i]
		if err := r.deadLetter(ctx, tbl, x.seq, deadletter.Letter{Consumer: deadletter.ConsumerOutbox, MessageID: x.id, Subject: x.subject, Payload: x.payload}, p.deadErr[i]); err != nil {
			return err
		}
	}
	return nil
}

// deadLetter moves an outbox row to the dead-letter table in one transaction.
func (r *Relay) deadLetter(ctx context.Context, tbl string, seq int64, l deadletter.Letter, cause error) error {
	err := pg.InTx(ctx, r.Pool, func(tx pgx.Tx) error {
		if err := r.sink().PutLetter(ctx, tx, l, 1, cause); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`delete from %s where seq = $1`, tbl), seq)
		return err
	})
	if err != nil {
		return fmt.Errorf("dead-letter outbox row %s: %w", l.MessageID, err)
	}
	r.Log.Error("outbox message dead-lettered: it cannot be published", "schema", r.Schema, "id", l.MessageID, "subject", l.Subject,
		"bytes", len(l.Payload), "err", cause)
	return nil
}

// requeue puts a replayed dead letter back into the outbox (after a fix,
// such as a larger max_payload).
func (r *Relay) requeue(ctx context.Context, l deadletter.Letter) error {
	_, err := r.Pool.Exec(ctx, InsertInto(r.Schema)+` values ($1, $2, $3) on conflict (id) do nothing`, l.MessageID, l.Subject, l.Payload)
	if err == nil {
		Wake(r.Schema)
	}
	return err
}

// payloadMax is the largest payload the connected server takes.
func (r *Relay) payloadMax() int {
	n := r.JS.Conn().MaxPayload()
	if n <= headerBytesMax {
		return int(n)
	}
	return int(n) - headerBytesMax
}

// streamMax is the largest message the stream of subject takes (its
// MaxMsgSize), remembered for streamLimitTTL; unknown (no stream yet, NATS
// down) is no limit here: the publish then fails and is retried.
func (r *Relay) streamMax(ctx context.Context, subject string) int {
	key := firstToken(subject)
	if l, ok := r.limits[key]; ok && time.Since(l.at) < streamLimitTTL {
		return l.bytes
	}
	name, err := r.JS.StreamNameBySubject(ctx, subject)
	if err != nil {
		return math.MaxInt
	}
	st, err := r.JS.Stream(ctx, name)
	if err != nil {
		return math.MaxInt
	}
	n := int(st.CachedInfo().Config.MaxMsgSize)
	if n <= 0 {
		n = math.MaxInt
	} else if n > headerBytesMax {
		n -= headerBytesMax
	}
	if r.limits == nil {
		r.limits = map[string]streamLimit{}
	}
	r.limits[key] = streamLimit{bytes: n, at: time.Now()}
	return n
}

// permanent reports a publish error that no retry can fix.
func permanent(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// partBytesMax is the size a batch row is split at (NATS's default
// max_payload, less headerBytesMax) wherever the server and the stream take
// at least that: the parts, and so their message ids, are then a function
// of the row alone. Split at the limits of the moment, a row some of whose
// parts were acknowledged was published again under other ids after a
// limit changed (a larger max_payload, a reconnect to a server configured
// otherwise), and its consumers, which deduplicate by message id, applied
// its items twice: pricing rated the same usage again.
const partBytesMax = 1<<20 - headerBytesMax

// splitToFit returns the messages that publish one outbox row: the row
// itself, or, for a batch (BatchFields) over partBytesMax or limit, parts
// that each fit (at partBytesMax when limit is at least that and every
// item fits in it, else at limit). Anything else (not a batch, an item
// alone over the limit) is published whole, and the server's refusal
// dead-letters it.
func splitToFit(id, subject string, payload []byte, limit int) []*nats.Msg {
	if _, batch := batchField(subject); batch && limit > partBytesMax {
		if parts, ok := split(id, subject, payload, partBytesMax); ok {
			return parts
		}
	}
	parts, _ := split(id, subject, payload, limit)
	return parts
}

// split is splitToFit at limit: ok is false when it answers the row whole
// because it is not a batch that can be split there (an item alone is over
// limit, or the payload is not a protobuf batch).
func split(id, subject string, payload []byte, limit int) (parts []*nats.Msg, ok bool) {
	msg := func(id string, data []byte) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, id)
		return m
	}
	whole := []*nats.Msg{msg(id, payload)}
	field, batch := batchField(subject)
	if !batch {
		return whole, false
	}
	if len(payload) <= limit {
		return whole, true
	}
	var head []byte
	var items [][]byte
	for b := payload; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return whole, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return whole, false
		}
		if num == field {
			items = append(items, b[:n+m])
		} else {
			head = append(head, b[:n+m]...)
		}
		b = b[n+m:]
	}
	var bodies [][]byte
	cur := slices.Clone(head)
	for _, it := range items {
		if len(head)+len(it) > limit {
			return whole, false
		}
		if len(cur)+len(it) > limit {
			bodies = append(bodies, cur)
			cur = slices.Clone(head)
		}
		cur = append(cur, it...)
	}
	bodies = append(bodies, cur)
	out := make([]*nats.Msg, len(bodies))
	for i, b := range bodies {
		out[i] = msg(fmt.Sprintf("%s~%d/%d", id, i+1, len(bodies)), b)
	}
	return out, true
}

func batchField(subject string) (protowire.Number, bool) {
	for prefix, f := range BatchFields {
		if strings.HasPrefix(subject, prefix) {
			return f, true
		}
	}
	return 0, false
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// publishSpan starts the producer span of one outbox row, child of the span
// that wrote it (its traceparent), and puts the span's context in the
// headers of every message (part) that publishes the row. It is ended once
// JetStream has acknowledged the row, or failed to.
func publishSpan(ctx context.Context, traceparent, id, subject string, msgs []*nats.Msg) trace.Span {
	ctx, sp := obs.Tracer().Start(obs.WithTraceparent(ctx, traceparent), natsx.SpanName(subject, "publish"),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(natsx.SpanAttrs(subject, id, len(msgs))...))
	for _, m := range msgs {
		natsx.InjectTrace(ctx, m.Header)
	}
	return sp
}
