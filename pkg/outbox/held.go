package outbox

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/pg"
)

// heldBytesMax bounds the payloads held in this process (what a relay of
// another process publishes is never taken here): past it, the store
// starts afresh and the relays read the rest from their outboxes.
const heldBytesMax = 64 << 20

// held keeps the payloads of outbox rows this process committed, by
// database (its pool), schema and message id, so the schema's relay on that
// pool publishes them without reading them back from the table: the
// ledger's fetched batches write megabytes of ledger.posted, and reading
// them back (detoasting, decompressing, sending them) was 4 % of the
// database backends' CPU in the ledger_postings bench.
//
// Only while this process's relay of the outbox leads (holds its advisory
// lock) are payloads held: a replica whose relay waits would hold what it
// never publishes.
var held = struct {
	mu      sync.Mutex
	m       map[heldKey][]byte
	n       map[outboxOf]int // payloads held per outbox
	leading map[outboxOf]int // relays of this process leading each outbox
	bytes   int
}{m: map[heldKey][]byte{}, n: map[outboxOf]int{}, leading: map[outboxOf]int{}}

type outboxOf struct {
	pool   *pgxpool.Pool
	schema string
}

type heldKey struct {
	outboxOf
	id string
}

// Hold gives the relay of schema on pool, in this process, the payloads of
// msgs, which a transaction on pool inserted into the outbox by Copy (new
// ids: each row holds exactly that payload) and committed. Call it after
// the commit, never before: the relay publishes a held payload as the
// row's. The payloads must not change afterwards.
func Hold(pool *pgxpool.Pool, schema string, msgs ...Message) {
	if len(msgs) == 0 {
		return
	}
	o := outboxOf{pool, schema}
	held.mu.Lock()
	defer held.mu.Unlock()
	if held.leading[o] == 0 {
		return
	}
	for _, m := range msgs {
		if held.bytes+len(m.Payload) > heldBytesMax {
			clear(held.m)
			clear(held.n)
			held.bytes = 0
		}
		k := heldKey{o, m.ID}
		if old, ok := held.m[k]; ok {
			held.bytes -= len(old)
			held.n[o]--
		}
		held.m[k] = m.Payload
		held.bytes += len(m.Payload)
		held.n[o]++
	}
}

// holding reports whether payloads are held for o (its relay reads the
// outbox in one statement when none are).
func holding(o outboxOf) bool {
	held.mu.Lock()
	defer held.mu.Unlock()
	return held.n[o] > 0
}

// takeHeld removes and returns the payload held for id in o.
func takeHeld(o outboxOf, id string) ([]byte, bool) {
	held.mu.Lock()
	defer held.mu.Unlock()
	k := heldKey{o, id}
	p, ok := held.m[k]
	if ok {
		delete(held.m, k)
		held.bytes -= len(p)
		if held.n[o]--; held.n[o] == 0 {
			delete(held.n, o)
		}
	}
	return p, ok
}

// lead marks this process's relay of o as leading until the returned func
// is called; then what is held for o is dropped.
func lead(o outboxOf) (release func()) {
	held.mu.Lock()
	held.leading[o]++
	held.mu.Unlock()
	return func() {
		held.mu.Lock()
		defer held.mu.Unlock()
		if held.leading[o]--; held.leading[o] > 0 {
			return
		}
		delete(held.leading, o)
		forgetLocked(o)
	}
}

// forgetHeld drops what is held for o. A payload held after the relay had
// already read its row from the table (the write's commit and its Hold are
// two steps) is never taken: the relay forgets what it holds whenever it
// finds its outbox empty, when everything held has been published.
// Dropping is always safe: the relay reads what it does not hold.
func forgetHeld(o outboxOf) {
	held.mu.Lock()
	defer held.mu.Unlock()
	forgetLocked(o)
}

func forgetLocked(o outboxOf) {
	if held.n[o] == 0 {
		return
	}
	for k, p := range held.m {
		if k.outboxOf == o {
			delete(held.m, k)
			held.bytes -= len(p)
		}
	}
	delete(held.n, o)
}

// InTx runs fn in one transaction on pool (pg.InTx) and, once that has
// committed, holds for the schema's relay the messages fn copied into the
// outbox and appended to *held (Hold). A write that fails holds nothing.
func InTx(ctx context.Context, pool *pgxpool.Pool, schema string, fn func(tx pgx.Tx, held *[]Message) error) error {
	var held []Message
	if err := pg.InTx(ctx, pool, func(tx pgx.Tx) error { return fn(tx, &held) }); err != nil {
		return err
	}
	Hold(pool, schema, held...)
	return nil
}
