package postgres

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/outbox"
)

// Claim records inbound message ids in the inbox and returns the fresh ones.
func (t *Tx) Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error) {
	return outbox.Claim(ctx, t.tx, Schema, consumer, ids)
}

func cycleLockKey(cycle string) string { return "gpubill.ledger.cycle." + cycle }

// LockCyclesShared takes the cycles' advisory locks shared, in key order, in
// one statement; a close takes one exclusively (LockCycle).
func (t *Tx) LockCyclesShared(ctx context.Context, cycles []string) error {
	if len(cycles) == 0 {
		return nil
	}
	sort.Strings(cycles)
	keys := make([]string, len(cycles))
	for i, c := range cycles {
		keys[i] = cycleLockKey(c)
	}
	_, err := t.tx.Exec(ctx, `select count(pg_advisory_xact_lock_shared(hashtext(k)))
		from (select k from unnest($1::text[]) as k order by k) s`, keys)
	if err != nil {
		return fmt.Errorf("lock cycles: %w", err)
	}
	return nil
}

// LockCycle takes a cycle's advisory lock exclusively.
func (t *Tx) LockCycle(ctx context.Context, cycle string) error {
	if _, err := t.tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext($1))`, cycleLockKey(cycle)); err != nil {
		return fmt.Errorf("lock cycle %s: %w", cycle, err)
	}
	return nil
}

// ClosedCycles are the ids of the closed cycles.
func (t *Tx) ClosedCycles(ctx context.Context) (map[string]bool, error) {
	rows, err := t.tx.Query(ctx, `select cycle_id from ledger.closed_cycles`)
	if err != nil {
		return nil, fmt.Errorf("closed cycles: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// CloseCycle records a cycle's close at `at` unless it is closed already,
// and returns the time it closed.
func (t *Tx) CloseCycle(ctx context.Context, cycle string, at time.Time) (time.Time, error) {
	if _, err := t.tx.Exec(ctx, `insert into ledger.closed_cycles (cycle_id, closed_at) values ($1, $2)
		on conflict (cycle_id) do nothing`, cycle, at); err != nil {
		return time.Time{}, fmt.Errorf("close cycle %s: %w", cycle, err)
	}
	var closedAt time.Time
	err := t.tx.QueryRow(ctx, `select closed_at from ledger.closed_cycles where cycle_id = $1`, cycle).Scan(&closedAt)
	return closedAt, err
}

// LinkReversal links a reversal to its original; false if the original has
// a reversal already.
func (t *Tx) LinkReversal(ctx context.Context, originalID, reversalID string, at time.Time) (bool, error) {
	tag, err := t.tx.Exec(ctx, `insert into ledger.reversals (original_id, reversal_id, created_at)
		values ($1::uuid, $2::uuid, $3) on conflict (original_id) do nothing`, originalID, reversalID, at)
	if err != nil {
		return false, fmt.Errorf("link reversal: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// TxByKey returns the id and request hash stored under an idempotency key.
func (t *Tx) TxByKey(ctx context.Context, key string) (string, []byte, error) {
	return TxByKey(ctx, t.tx, key)
}

// RequestHashes returns the request hash of each transaction of keys that
// exists, by key.
func (t *Tx) RequestHashes(ctx context.Context, keys []string) (map[string][]byte, error) {
	rows, err := t.tx.Query(ctx, `select idempotency_key, request_hash from ledger.transactions where idempotency_key = any($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("request hashes: %w", err)
	}
	out := make(map[string][]byte, len(keys))
	var k string
	var h []byte
	if _, err := pgx.ForEachRow(rows, []any{&k, &h}, func() error {
		out[k] = slices.Clone(h)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("request hashes: %w", err)
	}
	return out, nil
}
