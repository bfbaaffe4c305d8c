package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

const railAmountFlagCols = `payout_id, attempt, rail, rail_amount, rail_currency, flagged_at, resolved_by, resolution_reason, resolved_at`

// RailAmountFlag implements app.Store: what the rail held when the payout
// attempt was flagged rail_amount_mismatch, and its resolution
// (apperr.ErrNotFound when never flagged).
func (s *Store) RailAmountFlag(ctx context.Context, id string, attempt int) (domain.RailAmountFlag, error) {
	return railAmountFlag(ctx, s.Pool, id, attempt, "")
}

// LockRailAmountFlag implements app.Tx.
func (t txStore) LockRailAmountFlag(ctx context.Context, id string, attempt int) (domain.RailAmountFlag, error) {
	return railAmountFlag(ctx, t.tx, id, attempt, " for update")
}

// FlagRailAmount keeps what the rail holds under a flagged attempt's
// reference; a flag resolved already is left as finance resolved it.
func (t txStore) FlagRailAmount(ctx context.Context, f domain.RailAmountFlag) error {
	_, err := t.tx.Exec(ctx, `insert into payout.rail_amount_flags (payout_id, attempt, rail, rail_amount, rail_currency, flagged_at)
		values ($1, $2, $3, $4, $5, $6)
		on conflict (payout_id, attempt) do update set rail = excluded.rail, rail_amount = excluded.rail_amount,
			rail_currency = excluded.rail_currency, flagged_at = excluded.flagged_at
		where payout.rail_amount_flags.resolved_at is null`,
		f.PayoutID, f.Attempt, f.Rail, f.RailAmount, f.RailCurrency, f.FlaggedAt)
	if err != nil {
		return fmt.Errorf("flag payout %s attempt %d rail_amount_mismatch: %w", f.PayoutID, f.Attempt, err)
	}
	return nil
}

// ResolveRailAmountFlag records finance's resolution of an open flag.
func (t txStore) ResolveRailAmountFlag(ctx context.Context, f domain.RailAmountFlag) error {
	tag, err := t.tx.Exec(ctx, `update payout.rail_amount_flags set resolved_by = $3, resolution_reason = $4, resolved_at = $5
		where payout_id = $1 and attempt = $2 and resolved_at is null`, f.PayoutID, f.Attempt, f.ResolvedBy, f.Reason, f.ResolvedAt)
	if err != nil {
		return fmt.Errorf("resolve payout %s attempt %d rail_amount_mismatch: %w", f.PayoutID, f.Attempt, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("payout %s attempt %d: rail_amount_mismatch resolved meanwhile: %w", f.PayoutID, f.Attempt, apperr.ErrConflict)
	}
	return nil
}

func railAmountFlag(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id string, attempt int, lock string) (domain.RailAmountFlag, error) {
	var f domain.RailAmountFlag
	err := q.QueryRow(ctx, `select `+railAmountFlagCols+` from payout.rail_amount_flags where payout_id = $1 and attempt = $2`+lock,
		id, attempt).Scan(&f.PayoutID, &f.Attempt, &f.Rail, &f.RailAmount, &f.RailCurrency, &f.FlaggedAt, &f.ResolvedBy, &f.Reason, &f.ResolvedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, fmt.Errorf("payout %s attempt %d never flagged %s: %w", id, attempt, domain.FailRailAmountMismatch, apperr.ErrNotFound)
	}
	if err != nil {
		return f, fmt.Errorf("read payout %s attempt %d's rail_amount_mismatch: %w", id, attempt, err)
	}
	return f, nil
}
