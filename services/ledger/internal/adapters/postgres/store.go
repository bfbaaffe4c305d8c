// Package postgres is the ledger's Postgres adapter: it implements app.Store
// and app.Tx — the batched journal writer, the cycle locks, the inbox and
// outbox of a write, and the read queries. Every write path goes through
// Tx.Post, which costs a fixed number of statements per batch whatever its
// size, or, for a group of new API writes, PostNew: the same statements in
// one round trip.
package postgres

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Schema is the ledger's Postgres schema.
const Schema = "ledger"

// knownAccountsMax bounds the in-process cache of accounts known to exist.
const knownAccountsMax = 1 << 20

// batchMin: a write of this many transactions or more is a batch (a fetch
// of charges): its journal rows and ledger.posted events go in by COPY (as
// postings always do), and its statements are planned generically until
// its commit. A smaller write (an API request) keeps one INSERT each: COPY
// and its savepoint cost round trips a single transaction does not win back.
//
// Generic plans: each pooled connection plans its first five executions of
// a statement for their parameters, and a custom plan folds the batch's
// arrays (balances, depletions: thousands of elements) into constants it
// copies: planning was ~5 % of the backends' CPU while the ledger_postings
// bench ran (perf). The plans do not depend on the arrays' content.
const batchMin = 64

// Querier is what both a pool and a transaction offer.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is the ledger's Postgres store.
type Store struct {
	Pool *pgxpool.Pool

	// Written receives every transaction this store commits (the chain
	// worker hashes them from there).
	Written *Written

	mu    sync.Mutex
	known map[string]struct{} // accounts known to exist (skip the insert)
}

// Tx is the store inside one Postgres transaction.
type Tx struct {
	s       *Store
	tx      pgx.Tx
	written []*domain.Transaction // what Post inserted, for Written once committed
	held    []outbox.Message      // outbox rows copied, for outbox.Hold once committed
	audited bool                  // audit records added: the relay is woken once committed
}

// NewStore returns a store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{Pool: pool, Written: NewWritten(), known: map[string]struct{}{}}
}

var (
	_ app.Store = (*Store)(nil)
	_ app.Tx    = (*Tx)(nil)
)

// WithTx runs fn in one READ COMMITTED transaction, committing if it returns nil.
// The transactions it posted go to s.Written once it has committed.
func (s *Store) WithTx(ctx context.Context, fn func(app.Tx) error) error {
	var t *Tx
	err := pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		t = &Tx{s: s, tx: tx} // a retried attempt starts afresh
		return fn(t)
	})
	if err == nil && t != nil {
		s.Written.put(t.written)
		outbox.Hold(s.Pool, Schema, t.held...)
		if t.audited {
			outbox.Wake(Schema) // as the audit recorder does after storing a record
		}
	}
	return err
}

type balKey struct{ account, currency string }

type agg struct {
	acc             domain.Account
	debits, credits decimal.Decimal
	reversalOnly    bool
}

// Post writes transactions: the journal rows, their postings (one COPY), the
// accounts on first use, the ledger.posted events of the fresh ones and one
// upsert of every touched balance, in sorted (account, currency) order so
// concurrent writers never deadlock. Transactions whose idempotency key
// already exists are skipped; the fresh ones are returned with the balance
// changes they caused. The events are written before the balance upsert, the
// statement that takes the row locks, so hot rows stay locked only for the
// upsert and the commit.
func (t *Tx) Post(ctx context.Context, txs []*domain.Transaction) ([]*domain.Transaction, []domain.BalanceChange, error) {
	if len(txs) == 0 {
		return nil, nil, nil
	}
	if len(txs) >= batchMin {
		if _, err := t.tx.Exec(ctx, `select set_config('plan_cache_mode', 'force_generic_plan', true)`); err != nil {
			return nil, nil, fmt.Errorf("plan batch generically: %w", err)
		}
	}
	fresh, err := t.insertTransactions(ctx, txs)
	if err != nil || len(fresh) == 0 {
		return nil, nil, err
	}
	aggs, postings, err := aggregate(fresh)
	if err != nil {
		return nil, nil, err
	}
	keys := sortedKeys(aggs)
	if err := t.ensureAccounts(ctx, keys, aggs); err != nil {
		return nil, nil, err
	}
	if _, err := t.tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(postings), `copy ledger.postings
		(tx_id, idx, account, currency, direction, amount, created_at) from stdin (format binary)`); err != nil {
		return nil, nil, fmt.Errorf("copy postings: %w", err)
	}
	if args := burnArgs(fresh); args != nil {
		if _, err := t.tx.Exec(ctx, burnUpsertSQL, args...); err != nil {
			return nil, nil, fmt.Errorf("wallet burn: %w", err)
		}
	}
	if err := insertBreaches(ctx, t.tx, fresh); err != nil {
		return nil, nil, err
	}
	if err := t.publishPosted(ctx, fresh); err != nil {
		return nil, nil, err
	}
	changes, err := t.upsertBalances(ctx, keys, aggs)
	if err != nil {
		return nil, nil, err
	}
	for _, x := range fresh {
		if c := writtenCopy(x); c != nil {
			t.written = append(t.written, c)
		}
	}
	return fresh, changes, nil
}

// insertTransactions inserts the journal rows, sorted by idempotency key (two
// batches with overlapping keys wait on each other in one order only), and
// returns the fresh transactions in the caller's order.
//
// Most batches repeat no idempotency key (the inbox drops a redelivered
// message), so a batch's rows (batchMin) are first copied in, in a
// savepoint: COPY writes a page of rows per heap WAL record, and no insert
// checks the key before each row (ON CONFLICT's probe and
// speculative-insertion lock).
// The unique key still refuses any repeat; the first one sends the batch
// back to the savepoint and it is inserted again skipping the keys that
// exist.
func (t *Tx) insertTransactions(ctx context.Context, txs []*domain.Transaction) ([]*domain.Transaction, error) {
	sorted := make([]*domain.Transaction, len(txs))
	copy(sorted, txs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].IdempotencyKey < sorted[j].IdempotencyKey })
	if len(sorted) < batchMin {
		rows, err := journalRows(sorted)
		if err != nil {
			return nil, err
		}
		return t.insertNewTransactions(ctx, txs, rows)
	}
	stream, err := journalCopy(sorted)
	if err != nil {
		return nil, err
	}
	copied, err := pg.CopyUnlessRepeated(ctx, t.tx, stream, journalCopySQL)
	if err != nil {
		return nil, fmt.Errorf("copy transactions: %w", err)
	}
	if !copied {
		rows, err := journalRows(sorted)
		if err != nil {
			return nil, err
		}
		return t.insertNewTransactions(ctx, txs, rows)
	}
	return txs, nil
}

// journalColumns are the columns of journalRows (xid is the writer's own:
// its default).
var journalColumns = []string{"id", "idempotency_key", "request_hash", "kind", "description", "effective_at", "created_at", "metadata"}

// journalCopySQL copies journalCopy's stream into the journal.
const journalCopySQL = `copy ledger.transactions (id, idempotency_key, request_hash, kind, description, effective_at, created_at, metadata)
	from stdin (format binary)`

// journalRowBytesEst sizes a journal row for the first allocation: 8 fields
// of 4-byte lengths, the id, key, hash, times and ~300 bytes of metadata.
const journalRowBytesEst = 2 + 8*4 + 16 + 40 + 32 + 16 + 16 + 300

// journalCopy is the transactions' journal rows (journalColumns) as one
// binary COPY stream (pg.CopyWriter: pgx.CopyFrom boxed every value of
// every row).
func journalCopy(txs []*domain.Transaction) ([]byte, error) {
	w := pg.NewCopyWriter(len(txs) * journalRowBytesEst)
	var mb []byte // one row's metadata JSON at a time
	for _, x := range txs {
		var id [16]byte
		var err error
		if id, mb, err = journalIDAndMetadata(x, mb[:0]); err != nil {
			return nil, err
		}
		w.Row(8)
		w.UUID(id)
		w.Text(x.IdempotencyKey)
		w.Bytea(x.RequestHash[:])
		w.Text(string(x.Kind))
		w.Text(x.Description)
		w.Timestamptz(x.EffectiveAt)
		w.Timestamptz(x.CreatedAt)
		w.JSONB(mb)
	}
	return w.Done(), nil
}

// journalIDAndMetadata is x's id as a uuid and its metadata as JSON
// appended to mb (an object, {} when it has none).
func journalIDAndMetadata(x *domain.Transaction, mb []byte) ([16]byte, []byte, error) {
	id, err := uuid.Parse(x.ID)
	if err != nil {
		return id, mb, fmt.Errorf("transaction id %q: %w", x.ID, err)
	}
	md := x.Metadata
	if md == nil {
		md = map[string]string{}
	}
	mb, err = domain.AppendJSONStrings(mb, md)
	return id, mb, err
}

// journalRows are the transactions' journal rows in journalColumns order.
func journalRows(txs []*domain.Transaction) ([][]any, error) {
	rows := make([][]any, len(txs))
	var mb []byte // every row's metadata JSON, one buffer
	for i, x := range txs {
		from := len(mb)
		var id [16]byte
		var err error
		if id, mb, err = journalIDAndMetadata(x, mb); err != nil {
			return nil, err
		}
		h := x.RequestHash
		rows[i] = []any{pgtype.UUID{Bytes: id, Valid: true}, x.IdempotencyKey, h[:], string(x.Kind), x.Description,
			x.EffectiveAt, x.CreatedAt, mb[from:len(mb):len(mb)]}
	}
	return rows, nil
}

// journalInsertSQL inserts journalArrays' rows.
const journalInsertSQL = `insert into ledger.transactions
		(id, idempotency_key, request_hash, kind, description, effective_at, created_at, metadata)
	select u.id, u.k, u.h, u.kind, u.d, u.e, u.c, u.m
	from unnest($1::uuid[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::jsonb[])
		as u(id, k, h, kind, d, e, c, m)`

// journalArrays are journalRows as one array per column (journalInsertSQL's
// arguments).
func journalArrays(rows [][]any) []any {
	cols := make([]any, len(journalColumns))
	for c := range cols {
		col := make([]any, len(rows))
		for i, r := range rows {
			col[i] = r[c]
		}
		cols[c] = col
	}
	return cols
}

// insertNewTransactions inserts the rows (journalRows, sorted by key) whose
// idempotency key does not exist yet and returns those transactions in the
// caller's order.
func (t *Tx) insertNewTransactions(ctx context.Context, txs []*domain.Transaction, rows [][]any) ([]*domain.Transaction, error) {
	res, err := t.tx.Query(ctx, journalInsertSQL+`
		on conflict (idempotency_key) do nothing
		returning id::text`, journalArrays(rows)...)
	if err != nil {
		return nil, fmt.Errorf("insert transactions: %w", err)
	}
	freshIDs := map[string]bool{}
	for res.Next() {
		var id string
		if err := res.Scan(&id); err != nil {
			return nil, err
		}
		freshIDs[id] = true
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("insert transactions: %w", err)
	}
	fresh := make([]*domain.Transaction, 0, len(freshIDs))
	for _, x := range txs { // caller's order
		if freshIDs[x.ID] {
			fresh = append(fresh, x)
		}
	}
	return fresh, nil
}

// postingRowBytesEst sizes a posting row for the first allocation: 7
// fields of 4-byte lengths, the id, index, ~40 bytes of account, currency
// and direction, an amount and a time.
const postingRowBytesEst = 2 + 7*4 + 16 + 4 + 40 + 16 + 8

// aggregate makes the postings' binary COPY stream (pg.CopyWriter; each
// amount keeps its scale, as pgx wrote it) and sums the postings per
// (account, currency).
func aggregate(fresh []*domain.Transaction) (map[balKey]*agg, []byte, error) {
	w := pg.NewCopyWriter(2 * len(fresh) * postingRowBytesEst)
	aggs, err := sumPostings(fresh, func(tid [16]byte, t *domain.Transaction, i int) {
		p := t.Postings[i]
		w.Row(7)
		w.UUID(tid)
		w.Int4(int32(i))
		w.Text(p.Account.Address)
		w.Text(p.Currency)
		w.Text(string(p.Direction))
		w.Numeric(p.Amount)
		w.Timestamptz(t.CreatedAt)
	})
	if err != nil {
		return nil, nil, err
	}
	return aggs, w.Done(), nil
}

// sumPostings sums the postings per (account, currency), handing each
// posting (its transaction's id as a uuid, the transaction, its index) to
// row.
func sumPostings(fresh []*domain.Transaction, row func(tid [16]byte, t *domain.Transaction, i int)) (map[balKey]*agg, error) {
	aggs := map[balKey]*agg{}
	for _, t := range fresh {
		tid, err := uuid.Parse(t.ID)
		if err != nil {
			return nil, fmt.Errorf("transaction id %q: %w", t.ID, err)
		}
		for i, p := range t.Postings {
			row(tid, t, i)
			k := balKey{p.Account.Address, p.Currency}
			a := aggs[k]
			if a == nil {
				a = &agg{acc: p.Account, reversalOnly: true}
				aggs[k] = a
			}
			if p.Direction == domain.Debit {
				a.debits = a.debits.Add(p.Amount)
			} else {
				a.credits = a.credits.Add(p.Amount)
			}
			a.reversalOnly = a.reversalOnly && t.Kind == domain.TxReversal
		}
	}
	return aggs, nil
}

// sortedKeys are the balances touched, in (account, currency) order: the
// order every writer locks them in.
func sortedKeys(aggs map[balKey]*agg) []balKey {
	keys := make([]balKey, 0, len(aggs))
	for k := range aggs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].account != keys[j].account {
			return keys[i].account < keys[j].account
		}
		return keys[i].currency < keys[j].currency
	})
	return keys
}

// upsertBalances moves every touched balance in one statement, in key order,
// and returns each one's change.
func (t *Tx) upsertBalances(ctx context.Context, keys []balKey, aggs map[balKey]*agg) ([]domain.BalanceChange, error) {
	rows, err := t.tx.Query(ctx, balancesUpsertSQL, balanceArgs(keys, aggs)...)
	if err != nil {
		return nil, fmt.Errorf("update balances: %w", err)
	}
	return balanceChanges(rows, aggs)
}

// balancesUpsertSQL moves balanceArgs' balances, in their order, and
// returns each one's totals after (balanceChanges reads them).
const balancesUpsertSQL = `insert into ledger.balances as b (account, currency, debits, credits, cycle_id)
	select u.a, u.c, u.d::numeric, u.cr::numeric, nullif(u.cy, '')
	from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) with ordinality as u(a, c, d, cr, cy, n)
	order by u.n
	on conflict (account, currency) do update
		set debits = b.debits + excluded.debits, credits = b.credits + excluded.credits, updated_at = now()
	returning account, currency, debits::text, credits::text, (xmax = 0)`

// balanceArgs are balancesUpsertSQL's arguments: the sums of aggs, in the
// order of keys.
func balanceArgs(keys []balKey, aggs map[balKey]*agg) []any {
	m := len(keys)
	bAcc, bCur, bDeb, bCred, bCyc := make([]string, m), make([]string, m), make([]string, m), make([]string, m), make([]string, m)
	for i, k := range keys {
		a := aggs[k]
		bAcc[i], bCur[i], bDeb[i], bCred[i], bCyc[i] = k.account, k.currency, a.debits.String(), a.credits.String(), a.acc.Cycle
	}
	return []any{bAcc, bCur, bDeb, bCred, bCyc}
}

// balanceChanges reads balancesUpsertSQL's answer as the change each sum
// of aggs made.
func balanceChanges(rows pgx.Rows, aggs map[balKey]*agg) ([]domain.BalanceChange, error) {
	defer rows.Close()
	changes := make([]domain.BalanceChange, 0, len(aggs))
	for rows.Next() {
		var k balKey
		var deb, cred string
		var inserted bool
		if err := rows.Scan(&k.account, &k.currency, &deb, &cred, &inserted); err != nil {
			return nil, err
		}
		a := aggs[k]
		d, err := decimal.NewFromString(deb)
		if err != nil {
			return nil, fmt.Errorf("balance %s %s debits %q: %w", k.account, k.currency, deb, err)
		}
		c, err := decimal.NewFromString(cred)
		if err != nil {
			return nil, fmt.Errorf("balance %s %s credits %q: %w", k.account, k.currency, cred, err)
		}
		changes = append(changes, domain.BalanceChange{
			Account: a.acc, Currency: k.currency,
			Delta: a.acc.NormalBalance(a.debits, a.credits), After: a.acc.NormalBalance(d, c),
			Created: inserted, Reversal: a.reversalOnly,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("update balances: %w", err)
	}
	return changes, nil
}

// ensureAccounts creates accounts on first use (sorted, so concurrent
// creators never deadlock), skipping those known to exist.
func (t *Tx) ensureAccounts(ctx context.Context, keys []balKey, aggs map[balKey]*agg) error {
	args := t.s.unknownAccounts(keys, aggs)
	if args == nil {
		return nil
	}
	if _, err := t.tx.Exec(ctx, accountsInsertSQL, args...); err != nil {
		return fmt.Errorf("create accounts: %w", err)
	}
	return nil
}

// accountsInsertSQL creates unknownAccounts' accounts, skipping any that exists.
const accountsInsertSQL = `insert into ledger.accounts (address, class, kind, fund_pool)
	select * from unnest($1::text[], $2::text[], $3::text[], $4::text[])
	on conflict (address) do nothing`

// unknownAccounts are accountsInsertSQL's arguments for the accounts of
// keys not known to exist, in key order; nil when every one is known.
func (s *Store) unknownAccounts(keys []balKey, aggs map[balKey]*agg) []any {
	var addrs, classes, kinds, pools []string
	s.mu.Lock()
	last := ""
	for _, k := range keys {
		if k.account == last {
			continue
		}
		last = k.account
		if _, ok := s.known[k.account]; ok {
			continue
		}
		a := aggs[k].acc
		addrs = append(addrs, a.Address)
		classes = append(classes, string(a.Class))
		kinds = append(kinds, string(a.Kind))
		pools = append(pools, string(a.Pool))
	}
	s.mu.Unlock()
	if len(addrs) == 0 {
		return nil
	}
	return []any{addrs, classes, kinds, pools}
}

// Remember marks accounts as existing once the transaction that created them
// has committed.
func (s *Store) Remember(changes []domain.BalanceChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.known) > knownAccountsMax {
		s.known = map[string]struct{}{}
	}
	for _, c := range changes {
		s.known[c.Account.Address] = struct{}{}
	}
}
