// Package ceiling measures the physical limits the headline benchmark
// figures are ratios to (issue 16): each figure's benchmark measures its
// ceiling in the same process run, on the same machine, in a few seconds,
// and reports both lines (testkit.ReportAgainst). A ceiling verifies what it
// wrote before it returns a figure, like every benchmark.
package ceiling

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/testkit"
)

// CopyRowsPerTx is what one fetched batch of the ledger's consumer writes
// (500 messages of 10 charges, two postings each).
const CopyRowsPerTx = 10_000

// Copy is ceiling_copy: rows/s of COPY into a scratch table shaped and
// indexed like ledger.postings (the pool's database must be migrated),
// CopyRowsPerTx rows per committed transaction.
func Copy(t testing.TB, ctx context.Context, pool *pgxpool.Pool, rows int) testkit.Figure {
	t.Helper()
	if _, err := pool.Exec(ctx, `create table ledger.ceiling_copy (like ledger.postings including all)`); err != nil {
		t.Fatal(err)
	}
	created := time.Now().UTC()
	var wantSum decimal.Decimal // of each side
	for i := 0; i < rows; i += 2 {
		wantSum = wantSum.Add(decimal.New(int64(1+i%997), -2))
	}
	// The rows are made before the clock starts, as every figure's load
	// is: made inside the timed loop (ids, account names, amounts) they
	// were ~17 % of its time (221-230k rows/s against 182-198k, three
	// interleaved pairs, DEVELOPERS.md).
	var batches [][][]any
	for off := 0; off < rows; off += CopyRowsPerTx {
		batch := make([][]any, 0, CopyRowsPerTx)
		for i := off; i < min(rows, off+CopyRowsPerTx); i += 2 {
			id := pgtype.UUID{Bytes: uuid.Must(uuid.NewV7()), Valid: true}
			amt := pgtype.Numeric{Int: decimal.New(int64(1+i%997), -2).Coefficient(), Exp: -2, Valid: true}
			batch = append(batch,
				[]any{id, int32(0), fmt.Sprintf("renter:r-%d:wallet", i%1000), "USD", "debit", amt, created},
				[]any{id, int32(1), fmt.Sprintf("provider:p-%d:pending:cyc-20261112", i%200), "USD", "credit", amt, created})
		}
		batches = append(batches, batch)
	}
	machine := testkit.StartMachine()
	start := time.Now()
	for _, batch := range batches {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ledger", "ceiling_copy"},
			[]string{"tx_id", "idx", "account", "currency", "direction", "amount", "created_at"}, pgx.CopyFromRows(batch)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	used := machine.Note(rows, "row")
	var n int
	var debits, credits decimal.Decimal
	if err := pool.QueryRow(ctx, `select count(*), coalesce(sum(amount) filter (where direction = 'debit'), 0),
			coalesce(sum(amount) filter (where direction = 'credit'), 0) from ledger.ceiling_copy`).Scan(&n, &debits, &credits); err != nil {
		t.Fatal(err)
	}
	if n != rows || !debits.Equal(wantSum) || !credits.Equal(wantSum) {
		t.Fatalf("copied %d rows, debits %s, credits %s; want %d rows and %s on each side", n, debits, credits, rows, wantSum)
	}
	if _, err := pool.Exec(ctx, `drop table ledger.ceiling_copy`); err != nil {
		t.Fatal(err)
	}
	return testkit.Figure{Bench: "ceiling_copy", Value: float64(int(float64(rows) / elapsed.Seconds())), Unit: "rows/s", N: rows, Load: testkit.LoadAvg(),
		Note: fmt.Sprintf("COPY of posting rows (made before the clock) into a table shaped and indexed like ledger.postings, %d rows per committed transaction; %s", CopyRowsPerTx, used)}
}

// Autocommit is ceiling_autocommit: rows/s of one-row INSERTs, each its own
// committed transaction (fsync on, as configured), from conns connections
// into a scratch table shaped and indexed like ledger.transactions (the
// pool's database must be migrated): the physical limit for "one durable
// answer per request".
func Autocommit(t testing.TB, ctx context.Context, pool *pgxpool.Pool, conns, perConn int) testkit.Figure {
	t.Helper()
	cfg := pool.Config().Copy()
	cfg.MinConns, cfg.MaxConns = int32(conns), int32(conns)
	own, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if _, err := own.Exec(ctx, `create table ledger.ceiling_autocommit (like ledger.transactions including all)`); err != nil {
		t.Fatal(err)
	}
	// Open every connection before timing.
	var warm sync.WaitGroup
	for c := 0; c < conns; c++ {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if _, err := own.Exec(ctx, `select 1`); err != nil {
				t.Error(err)
			}
		}()
	}
	warm.Wait()
	now := time.Now().UTC()
	rows := autocommitRows(conns, perConn)
	var wg sync.WaitGroup
	machine := testkit.StartMachine()
	start := time.Now()
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range rows[c] {
				if _, err := own.Exec(ctx, `insert into ledger.ceiling_autocommit (id, idempotency_key, request_hash, kind, description, effective_at, created_at, metadata)
					values ($1, $2, $3, 'manual', 'ceiling', $4, $4, $5)`, r.id, r.key, r.hash, now, r.metadata); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	used := machine.Note(conns*perConn, "row")
	if t.Failed() {
		t.FailNow()
	}
	n := conns * perConn
	CountAndDrop(t, ctx, own, "ledger.ceiling_autocommit", "idempotency_key", n)
	return testkit.Figure{Bench: "ceiling_autocommit", Value: float64(int(float64(n) / elapsed.Seconds())), Unit: "rows/s", N: n, Load: testkit.LoadAvg(),
		Note: fmt.Sprintf("one-row INSERTs (made before the clock), each its own committed transaction, from %d connections into a table shaped and indexed like ledger.transactions; %s", conns, used)}
}

// CountAndDrop fails t unless table (a ceiling's scratch table, schema
// qualified) holds want distinct values of column, what the ceiling
// counted, and then drops it.
func CountAndDrop(t testing.TB, ctx context.Context, pool *pgxpool.Pool, table, column string, want int) {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, fmt.Sprintf(`select count(distinct %s) from %s`, column, table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("%s: %d rows written, want %d", table, n, want)
	}
	if _, err := pool.Exec(ctx, `drop table `+table); err != nil {
		t.Fatal(err)
	}
}

// autocommitRow is one row of ceiling_autocommit's INSERTs.
type autocommitRow struct {
	id       uuid.UUID
	key      string
	hash     []byte
	metadata map[string]string
}

// autocommitRows are each connection's rows, made before the clock starts
// as every figure's load is.
func autocommitRows(conns, perConn int) [][]autocommitRow {
	rows := make([][]autocommitRow, conns)
	for c := range rows {
		rows[c] = make([]autocommitRow, perConn)
		for i := range rows[c] {
			key := fmt.Sprintf("ceiling-%d-%d", c, i)
			h := sha256.Sum256([]byte(key))
			rows[c][i] = autocommitRow{id: uuid.Must(uuid.NewV7()), key: key, hash: h[:], metadata: map[string]string{"ticket": fmt.Sprintf("FIN-%d", i)}}
		}
	}
	return rows
}

// fetchMax is the most messages one pull of the JetStream ceiling asks for,
// and fetchWait how long a pull waits for them.
const (
	fetchMax  = 256
	fetchWait = time.Second
)

// publishAll publishes msgs messages asynchronously with Nats-Msg-Id and
// waits for every ack.
func publishAll(t testing.TB, js jetstream.JetStream, subject func(i int) string, payload func(i int) []byte, msgs int) {
	t.Helper()
	futures := make([]jetstream.PubAckFuture, 0, msgs)
	for i := 0; i < msgs; i++ {
		m := nats.NewMsg(subject(i))
		m.Data = payload(i)
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("ceiling-%d", i))
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(time.Minute):
			t.Fatal("ceiling_jetstream: publish ack timeout")
		}
	}
}

// JetStream is ceiling_jetstream (msgs/s) and ceiling_jetstream_events
// (events/s): msgs messages, payload(i) of perMsg events each (made before
// it is called), published asynchronously with Nats-Msg-Id onto the stream
// that subject(i) falls in, then pulled and decoded, a pull at a time; the
// pull's messages are acked once they are all decoded and flush (when not
// nil) has returned. Nothing else runs.
func JetStream(t testing.TB, ctx context.Context, js jetstream.JetStream, stream string, subject func(i int) string,
	payload func(i int) []byte, perMsg, msgs int, decode func([]byte) error, flush func() error) (msgsFig, events testkit.Figure) {
	t.Helper()
	machine := testkit.StartMachine()
	began := time.Now()
	publishAll(t, js, subject, payload, msgs)
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "ceiling", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	pulled := make([]jetstream.Msg, 0, fetchMax)
	for got < msgs {
		// Never more than are left: a pull asking for more than the
		// stream holds waits out FetchMaxWait for them. Asking for 256 at
		// a time, the last pull of the pipeline's 2 000 messages idled the
		// whole second, ~80 % of the run: the ceiling read 130-160k
		// events/s instead of 330k-1.2M (DEVELOPERS.md).
		batch, err := cons.Fetch(min(fetchMax, msgs-got), jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			t.Fatal(err)
		}
		pulled = pulled[:0]
		for m := range batch.Messages() {
			if err := decode(m.Data()); err != nil {
				t.Fatal(err)
			}
			pulled = append(pulled, m)
			got++
		}
		if err := batch.Error(); err != nil { // the messages are all in the stream: a pull never times out
			t.Fatalf("ceiling_jetstream: a pull ended after %d of %d messages: %v", got, msgs, err)
		}
		if flush != nil {
			if err := flush(); err != nil {
				t.Fatalf("ceiling_jetstream: flush after %d of %d messages: %v", got, msgs, err)
			}
		}
		for _, m := range pulled {
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}
	el := time.Since(began).Seconds()
	used := machine.Note(msgs*perMsg, "event")
	if err := js.DeleteConsumer(ctx, stream, "ceiling"); err != nil {
		t.Fatal(err)
	}
	note := fmt.Sprintf("async publish with Nats-Msg-Id + pull/decode/ack of %d-byte messages (%d events each); %s", len(payload(0)), perMsg, used)
	load := testkit.LoadAvg()
	return testkit.Figure{Bench: "ceiling_jetstream", Value: float64(msgs) / el, Unit: "msgs/s", N: msgs, Note: note, Load: load},
		testkit.Figure{Bench: "ceiling_jetstream_events", Value: float64(msgs*perMsg) / el, Unit: "events/s", N: msgs * perMsg, Note: note, Load: load}
}
