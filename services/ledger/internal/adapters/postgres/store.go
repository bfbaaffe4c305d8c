// Package postgres is the ledger's Postgres adapter: it implements app.Store
// and app.Tx — the batched journal writer, the cycle locks, the inbox and
// outbox of a write, and the read queries. Every write path goes through
// Tx.Post, which costs a fixed number of statements per batch whatever its
// size.
package postgres

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Schema is the ledger's Postgres schema.
const Schema = "ledger"

// knownAccountsMax bounds the in-process cache of accounts known to exist.
const knownAccountsMax = 1 << 20

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
	fresh, err := t.insertTransactions(ctx, txs)
	if err != nil || len(fresh) == 0 {
		return nil, nil, err
	}
	aggs, postRows, err := aggregate(fresh)
	if err != nil {
		return nil, nil, err
	}
	keys := sortedKeys(aggs)
	if err := t.ensureAccounts(ctx, keys, aggs); err != nil {
		return nil, nil, err
	}
	if _, err := t.tx.CopyFrom(ctx, pgx.Identifier{Schema, "postings"},
		[]string{"tx_id", "idx", "account", "currency", "direction", "amount", "created_at"},
		pgx.CopyFromRows(postRows)); err != nil {
		return nil, nil, fmt.Errorf("copy postings: %w", err)
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
func (t *Tx) insertTransactions(ctx context.Context, txs []*domain.Transaction) ([]*domain.Transaction, error) {
	sorted := make([]*domain.Transaction, len(txs))
	copy(sorted, txs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].IdempotencyKey < sorted[j].IdempotencyKey })
	n := len(sorted)
	ids, keys, kinds, descs, metas := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	hashes := make([][]byte, n)
	eff, created := make([]time.Time, n), make([]time.Time, n)
	var mb []byte
	for i, x := range sorted {
		md := x.Metadata
		if md == nil {
			md = map[string]string{}
		}
		var err error
		if mb, err = domain.AppendJSONStrings(mb[:0], md); err != nil {
			return nil, err
		}
		h := x.RequestHash
		ids[i], keys[i], kinds[i], descs[i], metas[i], hashes[i] = x.ID, x.IdempotencyKey, string(x.Kind), x.Description, string(mb), h[:]
		eff[i], created[i] = x.EffectiveAt, x.CreatedAt
	}
	rows, err := t.tx.Query(ctx, `insert into ledger.transactions
			(id, idempotency_key, request_hash, kind, description, effective_at, created_at, metadata)
		select u.id::uuid, u.k, u.h, u.kind, u.d, u.e, u.c, u.m::jsonb
		from unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::text[])
			as u(id, k, h, kind, d, e, c, m)
		on conflict (idempotency_key) do nothing
		returning id::text`, ids, keys, hashes, kinds, descs, eff, created, metas)
	if err != nil {
		return nil, fmt.Errorf("insert transactions: %w", err)
	}
	freshIDs := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		freshIDs[id] = true
	}
	if err := rows.Err(); err != nil {
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

// aggregate makes the postings' COPY rows and sums the postings per
// (account, currency).
func aggregate(fresh []*domain.Transaction) (map[balKey]*agg, [][]any, error) {
	aggs := map[balKey]*agg{}
	postRows := make([][]any, 0, 2*len(fresh))
	for _, t := range fresh {
		tid, err := uuid.Parse(t.ID)
		if err != nil {
			return nil, nil, fmt.Errorf("transaction id %q: %w", t.ID, err)
		}
		pgid := pgtype.UUID{Bytes: tid, Valid: true}
		for i, p := range t.Postings {
			postRows = append(postRows, []any{pgid, int32(i), p.Account.Address, p.Currency, string(p.Direction),
				pgtype.Numeric{Int: p.Amount.Coefficient(), Exp: p.Amount.Exponent(), Valid: true}, t.CreatedAt})
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
	return aggs, postRows, nil
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
	m := len(keys)
	bAcc, bCur, bDeb, bCred, bCyc := make([]string, m), make([]string, m), make([]string, m), make([]string, m), make([]string, m)
	for i, k := range keys {
		a := aggs[k]
		bAcc[i], bCur[i], bDeb[i], bCred[i], bCyc[i] = k.account, k.currency, a.debits.String(), a.credits.String(), a.acc.Cycle
	}
	rows, err := t.tx.Query(ctx, `insert into ledger.balances as b (account, currency, debits, credits, cycle_id)
		select u.a, u.c, u.d::numeric, u.cr::numeric, nullif(u.cy, '')
		from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) with ordinality as u(a, c, d, cr, cy, n)
		order by u.n
		on conflict (account, currency) do update
			set debits = b.debits + excluded.debits, credits = b.credits + excluded.credits, updated_at = now()
		returning account, currency, debits::text, credits::text, (xmax = 0)`, bAcc, bCur, bDeb, bCred, bCyc)
	if err != nil {
		return nil, fmt.Errorf("update balances: %w", err)
	}
	changes := make([]domain.BalanceChange, 0, m)
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
	s := t.s
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
	if _, err := t.tx.Exec(ctx, `insert into ledger.accounts (address, class, kind, fund_pool)
		select * from unnest($1::text[], $2::text[], $3::text[], $4::text[])
		on conflict (address) do nothing`, addrs, classes, kinds, pools); err != nil {
		return fmt.Errorf("create accounts: %w", err)
	}
	return nil
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
