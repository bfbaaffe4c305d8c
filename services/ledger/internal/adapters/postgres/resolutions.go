package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Resolve implements app.ResolutionStore in ledger.reconciliation_resolutions
// and reconciliation_resolution_items: under the currency's run lock, so a
// run takes over either all of a resolution or none of it.
func (s *Reconciliations) Resolve(ctx context.Context, runID string, lines []domain.LineRef, txIDs []string, request string,
	build func(run *domain.ReconRun) (*domain.ReconResolution, error)) (*domain.ReconResolution, bool, error) {
	var currency string
	if err := s.Pool.QueryRow(ctx, `select currency from ledger.reconciliations where reconciliation_id = $1`, runID).Scan(&currency); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, fmt.Errorf("reconciliation %s: %w", runID, apperr.ErrNotFound)
		}
		return nil, false, fmt.Errorf("reconciliation %s: %w", runID, err)
	}
	x, err := s.BeginRun(ctx, currency)
	if err != nil {
		return nil, false, err
	}
	tx := x.tx
	defer x.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: a no-op
	if prior, err := priorResolution(ctx, tx, lines, txIDs, request); prior != nil || err != nil {
		return prior, prior != nil, err
	}
	var latest string
	if err := tx.QueryRow(ctx, `select reconciliation_id from ledger.reconciliations where currency = $1 order by seq desc limit 1`,
		currency).Scan(&latest); err != nil {
		return nil, false, fmt.Errorf("latest reconciliation of %s: %w", currency, err)
	}
	if latest != runID {
		return nil, false, fmt.Errorf("%s is not the latest run of %s (%s is): %w", runID, currency, latest, apperr.ErrPrecondition)
	}
	run, err := getRun(ctx, tx, `r.reconciliation_id = $1`, runID, itemMatched)
	if err != nil {
		return nil, false, err
	}
	res, err := build(run)
	if err != nil {
		return nil, false, err
	}
	if err := insertResolution(ctx, tx, res, request); err != nil {
		return nil, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, false, fmt.Errorf("commit resolution: %w", err)
	}
	return res, false, nil
}

// priorResolution is the resolution naming one of the lines or
// transactions (nil: none), or apperr.ErrConflict when its request is not
// request (or several name them).
func priorResolution(ctx context.Context, tx pgx.Tx, lines []domain.LineRef, txIDs []string, request string) (*domain.ReconResolution, error) {
	stIDs, lineNos := make([]string, len(lines)), make([]int, len(lines))
	for i, l := range lines {
		stIDs[i], lineNos[i] = l.StatementID, l.LineNo
	}
	var prior []string
	rows, err := tx.Query(ctx, `select distinct s.resolution_id, s.request from ledger.reconciliation_resolutions s
		join ledger.reconciliation_resolution_items i using (resolution_id)
		where (i.statement_id, i.line_no) in (select * from unnest($1::text[], $2::int[])) or i.transaction_ids && $3::text[]`,
		stIDs, lineNos, txIDs)
	if err != nil {
		return nil, fmt.Errorf("resolutions of these items: %w", err)
	}
	same := false
	for rows.Next() {
		var id, req string
		if err := rows.Scan(&id, &req); err != nil {
			rows.Close()
			return nil, err
		}
		prior, same = append(prior, id), req == request
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	switch {
	case len(prior) == 1 && same:
		got, err := resolutions(ctx, tx, `s.resolution_id = $1`, prior[0])
		if err != nil {
			return nil, fmt.Errorf("resolution %s: %w", prior[0], err)
		}
		if len(got) != 1 {
			return nil, fmt.Errorf("resolution %s: %d read, want 1", prior[0], len(got))
		}
		return &got[0], nil
	case len(prior) > 0:
		return nil, fmt.Errorf("already resolved by %v with another request: %w", prior, apperr.ErrConflict)
	}
	return nil, nil
}

// insertResolution stores a resolution and its items.
func insertResolution(ctx context.Context, tx pgx.Tx, res *domain.ReconResolution, request string) error {
	if _, err := tx.Exec(ctx, `insert into ledger.reconciliation_resolutions (resolution_id, reconciliation_id, action, reason,
			resolved_by, created_at, request) values ($1, $2, $3, $4, $5, $6, $7)`,
		res.ID, res.ReconciliationID, res.Action, res.Reason, res.ResolvedBy, res.CreatedAt, request); err != nil {
		return fmt.Errorf("store resolution: %w", err)
	}
	var items [][]any
	for _, l := range res.Lines {
		items = append(items, []any{res.ID, len(items) + 1, l.StatementID, l.LineNo, l.BookedOn, l.Reference, numeric(l.Amount),
			"", "", nil, nil, []string{}})
	}
	for _, m := range res.Movements {
		items = append(items, []any{res.ID, len(items) + 1, nil, nil, nil, "", nil,
			m.Kind, m.Key, numeric(m.Amount), m.TransactionIDs[0], m.TransactionIDs})
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ledger", "reconciliation_resolution_items"},
		[]string{"resolution_id", "item_no", "statement_id", "line_no", "booked_on", "reference", "bank_amount",
			"movement_kind", "movement_key", "ledger_amount", "transaction_id", "transaction_ids"}, pgx.CopyFromRows(items)); err != nil {
		return fmt.Errorf("store resolution items: %w", err)
	}
	return nil
}

// resolutions reads the resolutions where holds (of s), oldest first,
// with their items.
func resolutions(ctx context.Context, q Querier, where string, arg any) ([]domain.ReconResolution, error) {
	rows, err := q.Query(ctx, `select s.resolution_id, s.reconciliation_id, r.currency, s.action, s.reason, s.resolved_by, s.created_at,
			i.statement_id, i.line_no, i.booked_on, i.reference, i.bank_amount, i.movement_kind, i.movement_key,
			i.ledger_amount, i.transaction_ids
		from ledger.reconciliation_resolutions s join ledger.reconciliation_resolution_items i using (resolution_id)
		join ledger.reconciliations r on r.reconciliation_id = s.reconciliation_id
		where `+where+` order by s.created_at, s.resolution_id, i.item_no`, arg)
	if err != nil {
		return nil, fmt.Errorf("reconciliation resolutions: %w", err)
	}
	defer rows.Close()
	var out []domain.ReconResolution
	for rows.Next() {
		var res domain.ReconResolution
		var stID *string
		var bank, led pgtype.Numeric
		var lineNo *int
		var booked *time.Time
		var l domain.BankLine
		var m domain.Movement
		if err := rows.Scan(&res.ID, &res.ReconciliationID, &res.Currency, &res.Action, &res.Reason, &res.ResolvedBy, &res.CreatedAt,
			&stID, &lineNo, &booked, &l.Reference, &bank, &m.Kind, &m.Key, &led, &m.TransactionIDs); err != nil {
			return nil, err
		}
		if n := len(out); n == 0 || out[n-1].ID != res.ID {
			res.CreatedAt = res.CreatedAt.UTC()
			out = append(out, res)
		}
		cur := &out[len(out)-1]
		if stID != nil {
			l.StatementID = *stID
			if lineNo != nil {
				l.LineNo = *lineNo
			}
			if booked != nil {
				l.BookedOn = booked.UTC()
			}
			if l.Amount, err = decimalOf(bank); err != nil {
				return nil, fmt.Errorf("resolution %s: %w", res.ID, err)
			}
			cur.Lines = append(cur.Lines, l)
			continue
		}
		if m.Amount, err = decimalOf(led); err != nil {
			return nil, fmt.Errorf("resolution %s: %w", res.ID, err)
		}
		cur.Movements = append(cur.Movements, m)
	}
	return out, rows.Err()
}
