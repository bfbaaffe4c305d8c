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
	run, err := getRun(ctx, tx, `r.reconciliation_id = $1`, runID, itemMatched, domain.ReconRead{})
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

// VoidResolution implements app.ResolutionStore: under the run lock of the
// resolution's currency, so a run takes the void and its items over either
// before it or after it, never half.
func (s *Reconciliations) VoidResolution(ctx context.Context, runID, resolutionID string,
	build func(res *domain.ReconResolution, latestRunID string) (*domain.ReconVoid, error)) (*domain.ReconResolution, error) {
	var currency string
	err := s.Pool.QueryRow(ctx, `select r.currency from ledger.reconciliation_resolutions s
		join ledger.reconciliations r on r.reconciliation_id = s.reconciliation_id
		where s.resolution_id = $1 and s.reconciliation_id = $2`, resolutionID, runID).Scan(&currency)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("resolution %s of reconciliation %s: %w", resolutionID, runID, apperr.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("resolution %s: %w", resolutionID, err)
	}
	x, err := s.BeginRun(ctx, currency)
	if err != nil {
		return nil, err
	}
	tx := x.tx
	defer x.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: a no-op
	res, err := readResolution(ctx, tx, resolutionID)
	if err != nil {
		return nil, err
	}
	var latest string
	if err := tx.QueryRow(ctx, `select reconciliation_id from ledger.reconciliations where currency = $1 order by seq desc limit 1`,
		currency).Scan(&latest); err != nil {
		return nil, fmt.Errorf("latest reconciliation of %s: %w", currency, err)
	}
	v, err := build(res, latest)
	if err != nil || v == nil { // nil: voided already, the same way
		return res, err
	}
	if _, err := tx.Exec(ctx, `insert into ledger.reconciliation_resolution_voids (resolution_id, reconciliation_id, reason, voided_by, voided_at)
		values ($1, $2, $3, $4, $5)`, res.ID, v.ReconciliationID, v.Reason, v.VoidedBy, v.VoidedAt); err != nil {
		return nil, fmt.Errorf("store void of %s: %w", res.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit void of %s: %w", res.ID, err)
	}
	res.Void = v
	return res, nil
}

// priorResolution is the resolution naming one of the lines or
// transactions (nil: none), or apperr.ErrConflict when its request is not
// request (or several name them).
func priorResolution(ctx context.Context, tx pgx.Tx, lines []domain.LineRef, txIDs []string, request string) (*domain.ReconResolution, error) {
	stIDs, lineNos := make([]string, len(lines)), make([]int, len(lines))
	for i, l := range lines {
		stIDs[i], lineNos[i] = l.StatementID, l.LineNo
	}
	// Several may name them once some are voided: the one of the same
	// request answers it (voided or not: a replay resolves nothing again);
	// one not voided of another request is a conflict.
	var live []string
	same := ""
	rows, err := tx.Query(ctx, `select distinct s.resolution_id, s.request, v.resolution_id is not null
		from ledger.reconciliation_resolutions s join ledger.reconciliation_resolution_items i using (resolution_id)
		left join ledger.reconciliation_resolution_voids v on v.resolution_id = s.resolution_id
		where (i.statement_id, i.line_no) in (select * from unnest($1::text[], $2::int[])) or i.transaction_ids && $3::text[]`,
		stIDs, lineNos, txIDs)
	if err != nil {
		return nil, fmt.Errorf("resolutions of these items: %w", err)
	}
	for rows.Next() {
		var id, req string
		var voided bool
		if err := rows.Scan(&id, &req, &voided); err != nil {
			rows.Close()
			return nil, err
		}
		switch {
		case req == request:
			same = id
		case !voided:
			live = append(live, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	switch {
	case len(live) > 0:
		return nil, fmt.Errorf("already resolved by %v with another request: %w", live, apperr.ErrConflict)
	case same != "":
		return readResolution(ctx, tx, same)
	}
	return nil, nil
}

// readResolution reads one resolution with its items and void.
func readResolution(ctx context.Context, q Querier, id string) (*domain.ReconResolution, error) {
	got, err := resolutions(ctx, q, 0, `s.resolution_id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("resolution %s: %w", id, err)
	}
	if len(got) != 1 {
		return nil, fmt.Errorf("resolution %s: %d read, want 1", id, len(got))
	}
	return &got[0], nil
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
// with their items (itemsUpTo > 0: only each one's first itemsUpTo, in
// their order) and how many items each has.
func resolutions(ctx context.Context, q Querier, itemsUpTo int, where string, args ...any) ([]domain.ReconResolution, error) {
	// Every item read: count them as read; the first alone: count them all.
	count, firstItems := `count(*) over (partition by s.resolution_id)`, ``
	if itemsUpTo > 0 {
		count = `(select count(*) from ledger.reconciliation_resolution_items c where c.resolution_id = s.resolution_id)`
		firstItems = fmt.Sprintf(` and i.item_no <= %d`, itemsUpTo)
	}
	rows, err := q.Query(ctx, `select s.resolution_id, s.reconciliation_id, r.currency, s.action, s.reason, s.resolved_by, s.created_at,
			i.statement_id, i.line_no, i.booked_on, i.reference, i.bank_amount, i.movement_kind, i.movement_key,
			i.ledger_amount, i.transaction_ids, v.reconciliation_id, v.reason, v.voided_by, v.voided_at,
			(select min(t.created_at) from ledger.transactions t where t.id = any(i.transaction_ids::uuid[])), `+count+`
		from ledger.reconciliation_resolutions s join ledger.reconciliation_resolution_items i using (resolution_id)
		join ledger.reconciliations r on r.reconciliation_id = s.reconciliation_id
		left join ledger.reconciliation_resolution_voids v on v.resolution_id = s.resolution_id
		where (`+where+`)`+firstItems+` order by s.created_at, s.resolution_id, i.item_no`, args...)
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
		var voidRun, voidReason, voidedBy *string
		var voidedAt, recorded *time.Time
		if err := rows.Scan(&res.ID, &res.ReconciliationID, &res.Currency, &res.Action, &res.Reason, &res.ResolvedBy, &res.CreatedAt,
			&stID, &lineNo, &booked, &l.Reference, &bank, &m.Kind, &m.Key, &led, &m.TransactionIDs,
			&voidRun, &voidReason, &voidedBy, &voidedAt, &recorded, &res.ItemN); err != nil {
			return nil, err
		}
		if n := len(out); n == 0 || out[n-1].ID != res.ID {
			res.CreatedAt = res.CreatedAt.UTC()
			if voidRun != nil && voidReason != nil && voidedBy != nil && voidedAt != nil {
				res.Void = &domain.ReconVoid{ReconciliationID: *voidRun, Reason: *voidReason, VoidedBy: *voidedBy, VoidedAt: voidedAt.UTC()}
			}
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
		// When the ledger recorded it (a group: its earliest part), as the
		// run did: without it, a void's next run carried the movement as
		// recorded before every close, in transit at a close it followed.
		if recorded != nil {
			m.RecordedAt = recorded.UTC()
		}
		cur.Movements = append(cur.Movements, m)
	}
	return out, rows.Err()
}
