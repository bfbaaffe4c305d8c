package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

var (
	_ app.Store = (*Store)(nil)
	_ app.Tx    = txStore{}
)

// Update implements app.Store: fn runs in one Postgres transaction.
func (s *Store) Update(ctx context.Context, fn func(app.Tx) error) error {
	return s.Tx(ctx, func(tx pgx.Tx) error { return fn(s.In(tx)) })
}

// In is the store inside tx.
func (s *Store) In(tx pgx.Tx) app.Tx { return txStore{s: s, tx: tx} }

// Claim records the message ids in payout's inbox and returns the fresh ones.
func (t txStore) Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error) {
	return outbox.Claim(ctx, t.tx, Schema, consumer, ids)
}

// txStore implements app.Tx on one pgx transaction.
type txStore struct {
	s  *Store
	tx pgx.Tx
}

func (t txStore) Lock(ctx context.Context, id string) (domain.Payout, error) {
	return t.s.Lock(ctx, t.tx, id)
}

// Gate gates with min and the minimums set through the API over it.
func (t txStore) Gate(ctx context.Context, p domain.Payout, min domain.Minimums) (string, string, string, error) {
	min, err := minimums(ctx, t.tx, min)
	if err != nil {
		return "", "", "", err
	}
	return t.s.Gate(ctx, t.tx, p, min)
}

func (t txStore) Move(ctx context.Context, p *domain.Payout, to, note string, at time.Time) error {
	return t.s.Move(ctx, t.tx, p, to, note, at)
}

func (t txStore) SetReason(ctx context.Context, p *domain.Payout, reason string, at time.Time) error {
	return t.s.SetReason(ctx, t.tx, p, reason, at)
}

func (t txStore) SetFailure(ctx context.Context, p *domain.Payout, note string, at time.Time) error {
	return t.s.SetFailure(ctx, t.tx, p, note, at)
}

func (t txStore) SetArrival(ctx context.Context, p *domain.Payout, note string, at time.Time) error {
	return t.s.SetArrival(ctx, t.tx, p, note, at)
}

func (t txStore) LockBankQueue(ctx context.Context) error {
	return t.s.LockBankQueue(ctx, t.tx)
}

func (t txStore) HoldQueued(ctx context.Context, p *domain.Payout, at time.Time) error {
	return t.s.HoldQueued(ctx, t.tx, p, at)
}

func (t txStore) WithdrawQueued(ctx context.Context, p domain.Payout, at time.Time) (bool, error) {
	return t.s.WithdrawQueued(ctx, t.tx, p, at)
}

func (t txStore) SetSubmitting(ctx context.Context, id, method, rail string) error {
	return t.s.SetSubmitting(ctx, t.tx, id, method, rail)
}

func (t txStore) MethodChangedSince(ctx context.Context, provider, payoutID string, at time.Time) (bool, error) {
	return t.s.MethodChangedSince(ctx, t.tx, provider, payoutID, at)
}

func (t txStore) ResetWorkflow(ctx context.Context, id string) error {
	return t.s.ResetWorkflow(ctx, t.tx, id)
}

// CreateFromSettled gates with min and the minimums set through the API over it.
func (t txStore) CreateFromSettled(ctx context.Context, p domain.Payout, min domain.Minimums) ([]string, error) {
	min, err := minimums(ctx, t.tx, min)
	if err != nil {
		return nil, err
	}
	return t.s.CreateFromSettled(ctx, t.tx, p, min)
}

// ClaimSettledOutside implements app.Tx: a transaction already claimed
// (by another payout: the caller holds this one's lock and found it not
// settled) is a conflict naming that payout. The claim is unique on
// lower(transaction_id) (payout/0037): the ledger reads an id in any case,
// and a claim typed in another case named the same entry.
func (t txStore) ClaimSettledOutside(ctx context.Context, id, txID, reason, by string, at time.Time) error {
	tag, err := t.tx.Exec(ctx, `insert into payout.settled_outside (payout_id, transaction_id, reason, settled_by, settled_at)
		values ($1, $2, $3, $4, $5) on conflict do nothing`, id, txID, reason, by, at)
	if err != nil {
		return fmt.Errorf("payout %s settled outside by %s: %w", id, txID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var other string
	// Unique on lower(transaction_id) (payout/0037; payout/0033 keys a
	// claim on both): only another payout's claim of it, in any case,
	// refuses this one. Read by lower case (as the index compares): read
	// as typed, a claim in another case refused the insert and was not
	// found, a 500.
	if err := t.tx.QueryRow(ctx, `select payout_id from payout.settled_outside where lower(transaction_id) = lower($1)
		order by case_duplicate_of nulls first limit 1`, txID).Scan(&other); err != nil {
		return fmt.Errorf("payout %s settled outside by %s: the claim refused, its holder not read: %w", id, txID, err)
	}
	if other == id {
		return nil // its own already: an entry that stood when the payout failed again
	}
	return fmt.Errorf("ledger transaction %s already settles payout %s: %w", txID, other, apperr.ErrConflict)
}

// ReleaseSettledOutside implements app.Tx: the claims of payout id on the
// transactions reversed names move to payout.settled_outside_released,
// each with the transaction reversing it; its other claims stay.
func (t txStore) ReleaseSettledOutside(ctx context.Context, id string, reversed map[string]string, at time.Time) ([]string, error) {
	rev, err := json.Marshal(reversed)
	if err != nil {
		return nil, err
	}
	rows, err := t.tx.Query(ctx, `with gone as (delete from payout.settled_outside
			where payout_id = $1 and transaction_id in (select jsonb_object_keys($2::jsonb)) returning *)
		insert into payout.settled_outside_released (payout_id, transaction_id, reason, settled_by, settled_at, reversed_by, released_at)
		select payout_id, transaction_id, reason, settled_by, settled_at, coalesce($2::jsonb ->> transaction_id, ''), $3 from gone
		returning transaction_id`, id, rev, at)
	if err != nil {
		return nil, fmt.Errorf("payout %s: release its settlement outside: %w", id, err)
	}
	released, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("payout %s: release its settlement outside: %w", id, err)
	}
	sort.Strings(released)
	return released, nil
}

// SettledOutsideBy implements app.Tx.
func (t txStore) SettledOutsideBy(ctx context.Context, id string) ([]string, error) {
	rows, err := t.tx.Query(ctx, `select transaction_id from payout.settled_outside where payout_id = $1 order by transaction_id`, id)
	if err != nil {
		return nil, fmt.Errorf("payout %s settled outside: %w", id, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("payout %s settled outside: %w", id, err)
	}
	return ids, nil
}

// SettledOutsideClaimsDue implements app.Store: never checked first
// (checked_at null), then the least recently checked, on
// settled_outside_due (payout/0036), so a pass reads limit rows however
// many claims there are.
func (s *Store) SettledOutsideClaimsDue(ctx context.Context, limit int) ([]app.SettledOutsideClaim, error) {
	rows, err := s.Pool.Query(ctx, `select payout_id, transaction_id from payout.settled_outside
		order by checked_at nulls first, transaction_id limit $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("settled-outside claims: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[app.SettledOutsideClaim])
	if err != nil {
		return nil, fmt.Errorf("settled-outside claims: %w", err)
	}
	return out, nil
}

// MarkSettledOutsideChecked implements app.Store.
func (s *Store) MarkSettledOutsideChecked(ctx context.Context, ids []string, at time.Time) error {
	if _, err := s.Pool.Exec(ctx, `update payout.settled_outside set checked_at = $2 where transaction_id = any($1)`, ids, at); err != nil {
		return fmt.Errorf("settled-outside claims checked: %w", err)
	}
	return nil
}

// claimLockClass is the first key of a claim lock
// (pg_advisory_xact_lock(int, int)): hashtext of this, then of the
// transaction id in lower case.
const claimLockClass = "gpubill.payout.settled_outside_claim"

// lockClaimEntries takes the claim lock of each of ids, in order (sorted,
// lower case): two claims naming the same entries never wait on each other
// in a circle.
func lockClaimEntries(ctx context.Context, q pgx.Tx, ids []string) error {
	keys := make([]string, 0, len(ids))
	for _, id := range ids {
		keys = append(keys, strings.ToLower(id))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if _, err := q.Exec(ctx, `select pg_advisory_xact_lock(hashtext($1), hashtext(k)) from unnest($2::text[]) as k`,
		claimLockClass, keys); err != nil {
		return fmt.Errorf("lock the claims of ledger transactions %s: %w", strings.Join(keys, ", "), err)
	}
	return nil
}

// LockClaimEntries implements app.Tx.
func (t txStore) LockClaimEntries(ctx context.Context, ids []string) error {
	return lockClaimEntries(ctx, t.tx, ids)
}

// ClaimHolders implements app.Store: the claims are read after the claim
// locks are taken (a statement of its own: under read committed it sees a
// claim that committed while it waited), on settled_outside_lower
// (payout/0036). The locks are let go at once: the caller moves the
// payouts in transactions of its own, which lock the payout first.
func (s *Store) ClaimHolders(ctx context.Context, ids []string) ([]app.SettledOutsideClaim, error) {
	var out []app.SettledOutsideClaim
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := lockClaimEntries(ctx, tx, ids); err != nil {
			return err
		}
		lower := make([]string, 0, len(ids))
		for _, id := range ids {
			lower = append(lower, strings.ToLower(id))
		}
		rows, err := tx.Query(ctx, `select payout_id, transaction_id from payout.settled_outside
			where lower(transaction_id) = any($1) order by payout_id, transaction_id`, lower)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[app.SettledOutsideClaim])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claims of ledger transactions %s: %w", strings.Join(ids, ", "), err)
	}
	return out, nil
}
