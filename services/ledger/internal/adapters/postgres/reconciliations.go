package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Reconciliations keeps reconciliation runs (app.ReconciliationStore) in
// ledger.reconciliations, reconciliation_statements and reconciliation_items.
type Reconciliations struct{ Pool *pgxpool.Pool }

// Item statuses in ledger.reconciliation_items.
const (
	itemMatched         = "matched"
	itemUnmatchedBank   = "unmatched_bank"
	itemUnmatchedLedger = "unmatched_ledger"
	itemStatementBreak  = "statement_break"
	itemCashDifference  = "cash_difference"
)

// listedItems are the statuses of the items a run's answer holds a page of
// and ListItems pages (its statement breaks and cash differences, a few a
// statement, are answered whole), by status, with their names in answers.
// Save numbers them (item_no) first, in the order answers list them.
var listedItems = []string{itemMatched, itemUnmatchedBank, itemUnmatchedLedger}

var listedItemStatus = map[string]string{itemMatched: domain.ReconItemMatched, itemUnmatchedBank: domain.ReconItemUnmatchedInBank,
	itemUnmatchedLedger: domain.ReconItemUnmatchedInLedger}

// StatementCurrencies implements app.ReconciliationStore.
func (s *Reconciliations) StatementCurrencies(ctx context.Context) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `select distinct currency from ledger.bank_statements order by 1`)
	if err != nil {
		return nil, fmt.Errorf("statement currencies: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// BeginRun opens a run of the currency (app.ReconciliationStore, through
// the composition root): one transaction holding the currency's advisory
// lock, so runs of a currency take turns and each statement is taken by one
// run.
func (s *Reconciliations) BeginRun(ctx context.Context, currency string) (*ReconRunTx, error) {
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.ledger.reconcile.' || $1))`, currency); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("reconciliation lock: %w", err)
	}
	return &ReconRunTx{tx: tx, currency: currency}, nil
}

// Save stores the run, its statements and its items.
func (x *ReconRunTx) Save(ctx context.Context, r *domain.ReconRun) error {
	tx := x.tx
	var closing any
	if r.BankClosing != nil {
		closing = r.BankClosing.String()
	}
	if err := tx.QueryRow(ctx, `insert into ledger.reconciliations (reconciliation_id, currency, trigger, requested_by, created_at,
			previous_id, journal_head_hash, journal_head_position, bank_closing_balance, ledger_bank_client, verdict,
			matched_count, unmatched_bank_count, unmatched_ledger_count, outstanding_ledger_count, statement_break_count, cash_difference_count,
			idempotency_key, requested_currency)
		values ($1, $2, $3, $4, $5, $6, $7, $8, $9::numeric, $10::numeric, $11, $12, $13, $14, $15, $16, $17, nullif($18, ''), $19) returning seq`,
		r.ID, r.Currency, r.Trigger, r.RequestedBy, r.CreatedAt, r.PreviousID, r.HeadHash, r.HeadPosition, closing,
		r.LedgerBankClient.String(), r.Verdict, r.MatchedCount, r.UnmatchedBankN, r.UnmatchedLedgerN, r.OutstandingN, r.BreakN,
		r.CashDifferenceN, r.Key, r.RequestedCurrency).Scan(&r.Seq); err != nil {
		return fmt.Errorf("store reconciliation: %w", err)
	}
	if len(r.StatementIDs) > 0 {
		if _, err := tx.Exec(ctx, `insert into ledger.reconciliation_statements (statement_id, reconciliation_id)
			select unnest($1::text[]), $2`, r.StatementIDs, r.ID); err != nil {
			return fmt.Errorf("store reconciliation statements: %w", err)
		}
	}
	// item_no numbers the items in the order answers list them (matched,
	// unmatched in bank, unmatched in ledger, then the rest): a run's
	// answer holding its first n items continues at item n+1 (ListItems).
	var rows [][]any
	add := func(status string, l *domain.BankLine, m *domain.Movement, reason string, outstanding bool) {
		row := []any{r.ID, len(rows) + 1, status, "", 0, nil, "", nil, "", "", nil, []string{}, reason, nil, outstanding, "", "", nil, nil,
			nil, nil, nil, nil, nil}
		if l != nil {
			row[3], row[4], row[5], row[6], row[7] = l.StatementID, l.LineNo, l.BookedOn, l.Reference, numeric(l.Amount)
		}
		if m != nil {
			row[8], row[9], row[10], row[11] = m.Kind, m.Key, numeric(m.Amount), m.TransactionIDs
			if !m.RecordedAt.IsZero() {
				row[13] = m.RecordedAt
			}
		}
		rows = append(rows, row)
	}
	for _, x := range r.Result.Matched {
		add(itemMatched, &x.Line, &x.Movement, "", false)
	}
	for _, x := range r.Result.UnmatchedBank {
		add(itemUnmatchedBank, &x.Line, nil, x.Reason, false)
	}
	for _, x := range r.Result.UnmatchedLedger {
		add(itemUnmatchedLedger, nil, &x.Movement, x.Reason, x.Outstanding)
	}
	for _, b := range r.Result.Breaks {
		add(itemStatementBreak, nil, nil, b.Reason, false)
		row := rows[len(rows)-1]
		row[3], row[7] = b.StatementID, numeric(b.Difference)
		row[15], row[16], row[17], row[18] = b.Account, b.PreviousID, numeric(b.PreviousClosing), numeric(b.Opening)
	}
	for _, d := range r.Result.CashDifferences {
		add(itemCashDifference, nil, nil, d.Reason, false)
		row := rows[len(rows)-1]
		row[3], row[7], row[15] = d.StatementID, numeric(d.Difference), d.Account
		row[19], row[20], row[21], row[22], row[23] = d.ClosingAt, numeric(d.Bank), numeric(d.Ledger), numeric(d.InBank), numeric(d.InLedger)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ledger", "reconciliation_items"},
		[]string{"reconciliation_id", "item_no", "status", "statement_id", "line_no", "booked_on", "reference", "bank_amount",
			"movement_kind", "movement_key", "ledger_amount", "transaction_ids", "reason", "recorded_at", "outstanding",
			"account", "previous_statement_id", "previous_closing_balance", "opening_balance",
			"closing_at", "closing_balance", "ledger_balance", "in_transit_bank", "in_transit_ledger"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("store reconciliation items: %w", err)
	}
	return nil
}

const runCols = `r.seq, r.reconciliation_id, r.currency, r.trigger, r.requested_by, r.created_at, r.previous_id,
	r.journal_head_hash, r.journal_head_position, r.bank_closing_balance::text, r.ledger_bank_client::text, r.verdict,
	r.matched_count, r.unmatched_bank_count, r.unmatched_ledger_count, r.outstanding_ledger_count, r.statement_break_count,
	r.cash_difference_count, coalesce((select array_agg(s.statement_id order by s.statement_id) from ledger.reconciliation_statements s
		where s.reconciliation_id = r.reconciliation_id), '{}')`

func scanRun(row pgx.Row) (domain.ReconRun, error) {
	var r domain.ReconRun
	var closing *string
	var ledgerBal string
	if err := row.Scan(&r.Seq, &r.ID, &r.Currency, &r.Trigger, &r.RequestedBy, &r.CreatedAt, &r.PreviousID, &r.HeadHash,
		&r.HeadPosition, &closing, &ledgerBal, &r.Verdict, &r.MatchedCount, &r.UnmatchedBankN, &r.UnmatchedLedgerN, &r.OutstandingN, &r.BreakN,
		&r.CashDifferenceN, &r.StatementIDs); err != nil {
		return r, err
	}
	r.CreatedAt = r.CreatedAt.UTC()
	var err error
	if r.LedgerBankClient, err = decimal.NewFromString(ledgerBal); err != nil {
		return r, err
	}
	if closing != nil {
		d, err := decimal.NewFromString(*closing)
		if err != nil {
			return r, err
		}
		r.BankClosing = &d
	}
	return r, nil
}

// ListRuns implements app.ReconciliationStore.
func (s *Reconciliations) ListRuns(ctx context.Context, currency string, beforeSeq int64, limit int) ([]domain.ReconRun, error) {
	rows, err := s.Pool.Query(ctx, `select `+runCols+` from ledger.reconciliations r
		where ($1 = '' or r.currency = $1) and ($2 = 0 or r.seq < $2) order by r.seq desc limit $3`, currency, beforeSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("list reconciliations: %w", err)
	}
	defer rows.Close()
	var out []domain.ReconRun
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// GetRun implements app.ReconciliationStore.
func (s *Reconciliations) GetRun(ctx context.Context, id string, b domain.ReconRead) (*domain.ReconRun, error) {
	r, err := getRun(ctx, s.Pool, `r.reconciliation_id = $1`, id, "", b)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("reconciliation %s: %w", id, apperr.ErrNotFound)
	}
	return r, err
}

// getRun reads one run and its items, but for those of status when status
// is set (what the next run takes over: not the matched ones), bounded by
// b (an answer's read: each list's first; ReconRead's 0, every one). Each
// list is read by its own bounded scan of the run's items (the index
// reconciliation_items_status_idx): a run's answer reads no more rows than
// it answers, however large the run.
func getRun(ctx context.Context, q Querier, where string, arg any, status string, b domain.ReconRead) (*domain.ReconRun, error) {
	r, err := scanRun(q.QueryRow(ctx, `select `+runCols+` from ledger.reconciliations r where `+where+` order by r.seq desc limit 1`, arg))
	if err != nil {
		return nil, err
	}
	if b.CountsOnly {
		return &r, nil
	}
	const cols = `item_no, status, statement_id, line_no, booked_on, reference, bank_amount::text,
			movement_kind, movement_key, ledger_amount::text, transaction_ids, reason, recorded_at, outstanding,
			account, previous_statement_id, previous_closing_balance, opening_balance,
			closing_at, closing_balance, ledger_balance, in_transit_bank, in_transit_ledger
		from ledger.reconciliation_items where reconciliation_id = $1 and ($2 = '' or status <> $2)`
	// limit null: every one.
	rows, err := q.Query(ctx, `select * from (
			(select `+cols+` and status = any($3) order by item_no limit nullif($4, 0))
			union all (select `+cols+` and status = $5 order by item_no limit nullif($6, 0))
			union all (select `+cols+` and status = $7 order by item_no limit nullif($8, 0))) i
		order by item_no`, r.ID, status, listedItems, b.Items, itemStatementBreak, b.Breaks, itemCashDifference, b.CashDifferences)
	if err != nil {
		return nil, fmt.Errorf("reconciliation items: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var no int
		if err := scanItem(rows, &r, &no); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := runResolutions(ctx, q, &r, b.Resolutions, b.ResolutionItems); err != nil {
		return nil, err
	}
	return &r, nil
}

// ListFindings implements app.ReconciliationStore: a run (its currency
// and id) holding up to limit of its statement breaks (domain's
// ReconItemStatementBreak) or cash differences, after the first skip of
// them in the run's order (apperr.ErrNotFound if no run). A run's items
// never change: a position by count names the same one on every read.
func (s *Reconciliations) ListFindings(ctx context.Context, id, kind string, skip, limit int) (*domain.ReconRun, error) {
	st, ok := findingStatus[kind]
	if !ok {
		return nil, fmt.Errorf("reconciliation findings of kind %q", kind)
	}
	r := domain.ReconRun{ID: id}
	err := s.Pool.QueryRow(ctx, `select currency from ledger.reconciliations where reconciliation_id = $1`, id).Scan(&r.Currency)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("reconciliation %s: %w", id, apperr.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reconciliation %s: %w", id, err)
	}
	rows, err := s.Pool.Query(ctx, `select status, statement_id, line_no, booked_on, reference, bank_amount::text,
			movement_kind, movement_key, ledger_amount::text, transaction_ids, reason, recorded_at, outstanding,
			account, previous_statement_id, previous_closing_balance, opening_balance,
			closing_at, closing_balance, ledger_balance, in_transit_bank, in_transit_ledger
		from ledger.reconciliation_items where reconciliation_id = $1 and status = $2
		order by item_no offset $3 limit $4`, id, st, skip, limit)
	if err != nil {
		return nil, fmt.Errorf("reconciliation %s %s: %w", id, kind, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scanItem(rows, &r); err != nil {
			return nil, err
		}
	}
	return &r, rows.Err()
}

// findingStatus: the stored status of each kind ListFindings reads.
var findingStatus = map[string]string{domain.ReconItemStatementBreak: itemStatementBreak, domain.ReconItemCashDifference: itemCashDifference}

// ListResolutions implements app.ReconciliationStore: up to limit of a
// run's resolutions (reopened: those voided while its previous run was the
// latest, its reopened ones) oldest first, after after (nil: from the
// first), with the run's currency (apperr.ErrNotFound if no run).
func (s *Reconciliations) ListResolutions(ctx context.Context, id string, reopened bool, after *domain.ResolutionPos, limit, itemsUpTo int) (string, []domain.ReconResolution, error) {
	var currency, prev string
	err := s.Pool.QueryRow(ctx, `select currency, previous_id from ledger.reconciliations where reconciliation_id = $1`, id).Scan(&currency, &prev)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, fmt.Errorf("reconciliation %s: %w", id, apperr.ErrNotFound)
	}
	if err != nil {
		return "", nil, fmt.Errorf("reconciliation %s: %w", id, err)
	}
	of := id
	if reopened {
		if prev == "" {
			return currency, nil, nil
		}
		of = prev
	}
	pos := domain.ResolutionPos{CreatedAt: time.Unix(0, 0).UTC()}
	if after != nil {
		pos = *after
	}
	out, err := resolutions(ctx, s.Pool, itemsUpTo, resolutionPage(reopened), of, pos.CreatedAt, pos.ID, limit)
	return currency, out, err
}

// ListResolutionItems implements app.ReconciliationStore: up to limit of
// the items of run id's resolution resID in their order, after the one
// numbered afterNo, with the run's currency (apperr.ErrNotFound if the run
// has no such resolution): a line's Status is domain's
// ReconItemUnmatchedInBank, a movement's ReconItemUnmatchedInLedger (the
// side it was on). A resolution's items never change.
func (s *Reconciliations) ListResolutionItems(ctx context.Context, id, resID string, afterNo, limit int) (string, []domain.ReconItem, error) {
	var currency string
	err := s.Pool.QueryRow(ctx, `select r.currency from ledger.reconciliation_resolutions s
		join ledger.reconciliations r on r.reconciliation_id = s.reconciliation_id
		where s.resolution_id = $1 and s.reconciliation_id = $2`, resID, id).Scan(&currency)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, fmt.Errorf("resolution %s of reconciliation %s: %w", resID, id, apperr.ErrNotFound)
	}
	if err != nil {
		return "", nil, fmt.Errorf("resolution %s: %w", resID, err)
	}
	rows, err := s.Pool.Query(ctx, `select i.item_no, i.statement_id, i.line_no, i.booked_on, i.reference, i.bank_amount,
			i.movement_kind, i.movement_key, i.ledger_amount, i.transaction_ids
		from ledger.reconciliation_resolution_items i where i.resolution_id = $1 and i.item_no > $2
		order by i.item_no limit $3`, resID, afterNo, limit)
	if err != nil {
		return "", nil, fmt.Errorf("resolution %s items: %w", resID, err)
	}
	defer rows.Close()
	var out []domain.ReconItem
	for rows.Next() {
		var it domain.ReconItem
		var stID *string
		var lineNo *int
		var booked *time.Time
		var bank, led pgtype.Numeric
		if err := rows.Scan(&it.No, &stID, &lineNo, &booked, &it.Line.Reference, &bank,
			&it.Movement.Kind, &it.Movement.Key, &led, &it.Movement.TransactionIDs); err != nil {
			return "", nil, fmt.Errorf("resolution %s items: %w", resID, err)
		}
		if stID != nil {
			// A line.
			it.Status, it.Line.StatementID = domain.ReconItemUnmatchedInBank, *stID
			if lineNo != nil {
				it.Line.LineNo = *lineNo
			}
			if booked != nil {
				it.Line.BookedOn = booked.UTC()
			}
			if it.Line.Amount, err = decimalOf(bank); err != nil {
				return "", nil, fmt.Errorf("resolution %s: %w", resID, err)
			}
			it.Movement = domain.Movement{}
		} else {
			it.Status = domain.ReconItemUnmatchedInLedger
			if it.Movement.Amount, err = decimalOf(led); err != nil {
				return "", nil, fmt.Errorf("resolution %s: %w", resID, err)
			}
		}
		out = append(out, it)
	}
	return currency, out, rows.Err()
}

// resolutionPage is resolutions' where of a page of a run's ($1)
// resolutions or (voided) those voided while it was the latest, after
// ($2, $3) in their order, at most $4 (null: every one).
func resolutionPage(voided bool) string {
	if voided {
		return `s.resolution_id in (select x.resolution_id from ledger.reconciliation_resolution_voids vx
			join ledger.reconciliation_resolutions x on x.resolution_id = vx.resolution_id
			where vx.reconciliation_id = $1 and (x.created_at, x.resolution_id) > ($2, $3)
			order by x.created_at, x.resolution_id limit $4)`
	}
	return `s.resolution_id in (select x.resolution_id from ledger.reconciliation_resolutions x
		where x.reconciliation_id = $1 and (x.created_at, x.resolution_id) > ($2, $3)
		order by x.created_at, x.resolution_id limit $4)`
}

// ListItems implements app.ReconciliationStore.
func (s *Reconciliations) ListItems(ctx context.Context, id string, afterNo, limit int) (string, []domain.ReconItem, error) {
	var currency string
	err := s.Pool.QueryRow(ctx, `select currency from ledger.reconciliations where reconciliation_id = $1`, id).Scan(&currency)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, fmt.Errorf("reconciliation %s: %w", id, apperr.ErrNotFound)
	}
	if err != nil {
		return "", nil, fmt.Errorf("reconciliation %s: %w", id, err)
	}
	rows, err := s.Pool.Query(ctx, `select item_no, status, statement_id, line_no, booked_on, reference, bank_amount::text,
			movement_kind, movement_key, ledger_amount::text, transaction_ids, reason, recorded_at, outstanding
		from ledger.reconciliation_items where reconciliation_id = $1 and status = any($2) and item_no > $3
		order by item_no limit $4`, id, listedItems, afterNo, limit)
	if err != nil {
		return "", nil, fmt.Errorf("reconciliation %s items: %w", id, err)
	}
	defer rows.Close()
	var out []domain.ReconItem
	for rows.Next() {
		var it domain.ReconItem
		var st string
		var booked, recorded *time.Time
		var bank, led *string
		if err := rows.Scan(&it.No, &st, &it.Line.StatementID, &it.Line.LineNo, &booked, &it.Line.Reference, &bank,
			&it.Movement.Kind, &it.Movement.Key, &led, &it.Movement.TransactionIDs, &it.Reason, &recorded, &it.Outstanding); err != nil {
			return "", nil, err
		}
		it.Status = listedItemStatus[st]
		if booked != nil {
			it.Line.BookedOn = booked.UTC()
		}
		if recorded != nil {
			it.Movement.RecordedAt = recorded.UTC()
		}
		if bank != nil {
			if it.Line.Amount, err = decimal.NewFromString(*bank); err != nil {
				return "", nil, fmt.Errorf("reconciliation %s item %d: %w", id, it.No, err)
			}
		}
		if led != nil {
			if it.Movement.Amount, err = decimal.NewFromString(*led); err != nil {
				return "", nil, fmt.Errorf("reconciliation %s item %d: %w", id, it.No, err)
			}
		}
		out = append(out, it)
	}
	return currency, out, rows.Err()
}

// scanItem reads one item of run r (a row of getRun's items query) into
// its Result.
func scanItem(rows pgx.Rows, r *domain.ReconRun, first ...any) error {
	var st, reason string
	var l domain.BankLine
	var m domain.Movement
	var booked, recorded *time.Time
	var bank, led *string
	var outstanding bool
	var b domain.StatementBreak
	var prevClosing, opening, cashBank, cashLedger, inBank, inLedger pgtype.Numeric
	var closingAt *time.Time
	err := rows.Scan(append(first, &st, &l.StatementID, &l.LineNo, &booked, &l.Reference, &bank, &m.Kind, &m.Key, &led, &m.TransactionIDs, &reason,
		&recorded, &outstanding, &b.Account, &b.PreviousID, &prevClosing, &opening,
		&closingAt, &cashBank, &cashLedger, &inBank, &inLedger)...)
	if err != nil {
		return err
	}
	if recorded != nil {
		m.RecordedAt = recorded.UTC()
	}
	if booked != nil {
		l.BookedOn = booked.UTC()
	}
	if bank != nil {
		if l.Amount, err = decimal.NewFromString(*bank); err != nil {
			return err
		}
	}
	if led != nil {
		if m.Amount, err = decimal.NewFromString(*led); err != nil {
			return err
		}
	}
	switch st {
	case itemMatched:
		r.Result.Matched = append(r.Result.Matched, domain.ReconMatch{Line: l, Movement: m})
	case itemUnmatchedBank:
		r.Result.UnmatchedBank = append(r.Result.UnmatchedBank, domain.UnmatchedLine{Line: l, Reason: reason})
	case itemUnmatchedLedger:
		r.Result.UnmatchedLedger = append(r.Result.UnmatchedLedger, domain.UnmatchedMovement{Movement: m, Reason: reason, Outstanding: outstanding})
	case itemStatementBreak:
		if b.PreviousClosing, err = decimalOf(prevClosing); err != nil {
			return fmt.Errorf("reconciliation %s: statement break of %s: %w", r.ID, l.StatementID, err)
		}
		if b.Opening, err = decimalOf(opening); err != nil {
			return fmt.Errorf("reconciliation %s: statement break of %s: %w", r.ID, l.StatementID, err)
		}
		b.StatementID, b.Difference, b.Reason = l.StatementID, l.Amount, reason
		r.Result.Breaks = append(r.Result.Breaks, b)
	case itemCashDifference:
		d := domain.CashDifference{StatementID: l.StatementID, Account: b.Account, Difference: l.Amount, Reason: reason}
		if closingAt != nil {
			d.ClosingAt = closingAt.UTC()
		}
		for _, x := range []struct {
			to *decimal.Decimal
			n  pgtype.Numeric
		}{{&d.Bank, cashBank}, {&d.Ledger, cashLedger}, {&d.InBank, inBank}, {&d.InLedger, inLedger}} {
			if *x.to, err = decimalOf(x.n); err != nil {
				return fmt.Errorf("reconciliation %s: cash difference at %s: %w", r.ID, l.StatementID, err)
			}
		}
		r.Result.CashDifferences = append(r.Result.CashDifferences, d)
	default:
		return fmt.Errorf("reconciliation %s: item of status %q", r.ID, st)
	}
	return nil
}

// runResolutions reads a run's resolutions, those voided while it was the
// latest (the next run carries their items again) and those voided while
// its previous run was (whose items it carried again). With limit > 0 (an
// answer's read) only the first limit of its resolutions and reopened ones,
// oldest first, and their counts; not the voided ones, which no answer
// shows. Each with its first itemsUpTo items (0: every one).
func runResolutions(ctx context.Context, q Querier, r *domain.ReconRun, limit, itemsUpTo int) error {
	var err error
	if limit > 0 {
		if err := q.QueryRow(ctx, `select (select count(*) from ledger.reconciliation_resolutions where reconciliation_id = $1),
				(select count(*) from ledger.reconciliation_resolution_voids where $2 <> '' and reconciliation_id = $2)`,
			r.ID, r.PreviousID).Scan(&r.ResolutionN, &r.ReopenedN); err != nil {
			return fmt.Errorf("reconciliation %s resolutions: %w", r.ID, err)
		}
		start := time.Unix(0, 0).UTC()
		if r.Resolutions, err = resolutions(ctx, q, itemsUpTo, resolutionPage(false), r.ID, start, "", limit); err != nil {
			return err
		}
		if r.PreviousID != "" {
			if r.Reopened, err = resolutions(ctx, q, itemsUpTo, resolutionPage(true), r.PreviousID, start, "", limit); err != nil {
				return err
			}
		}
		return nil
	}
	if r.Resolutions, err = resolutions(ctx, q, 0, `s.reconciliation_id = $1`, r.ID); err != nil {
		return err
	}
	if r.Voided, err = resolutions(ctx, q, 0, `v.reconciliation_id = $1`, r.ID); err != nil {
		return err
	}
	if r.PreviousID != "" {
		if r.Reopened, err = resolutions(ctx, q, 0, `v.reconciliation_id = $1`, r.PreviousID); err != nil {
			return err
		}
	}
	r.ResolutionN, r.ReopenedN = len(r.Resolutions), len(r.Reopened)
	return nil
}

// ReconRunTx is one run's transaction.
type ReconRunTx struct {
	tx       pgx.Tx
	currency string
}

// Commit ends the run's transaction, keeping what Save stored.
func (x *ReconRunTx) Commit(ctx context.Context) error { return x.tx.Commit(ctx) }

// Rollback abandons the run (a no-op after Commit).
func (x *ReconRunTx) Rollback(ctx context.Context) error { return x.tx.Rollback(ctx) }

// KeyHolder implements app.ReconRunTx: the key's advisory lock, held until
// the run's transaction ends (a request of another currency under the same
// key takes its own currency's lock, then this one: each sees the other's
// run or none), and the first run of any currency stored with the key.
func (r *ReconRunTx) KeyHolder(ctx context.Context, key string) (*domain.ReconKeyHolder, error) {
	if _, err := r.tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.ledger.reconcile.key.' || $1))`, key); err != nil {
		return nil, fmt.Errorf("reconciliation key lock: %w", err)
	}
	var h domain.ReconKeyHolder
	err := r.tx.QueryRow(ctx, `select reconciliation_id, currency, requested_currency, requested_by, created_at from ledger.reconciliations
		where idempotency_key = $1 order by seq limit 1`, key).Scan(&h.RunID, &h.Currency, &h.RequestedCurrency, &h.RequestedBy, &h.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reconciliation key %q: %w", key, err)
	}
	h.CreatedAt = h.CreatedAt.UTC()
	return &h, nil
}

// Keyed implements app.ReconRunTx: the currency's run stored with the
// idempotency key, with its items as bounded by b (nil: none).
func (r *ReconRunTx) Keyed(ctx context.Context, key string, b domain.ReconRead) (*domain.ReconRun, error) {
	var id string
	err := r.tx.QueryRow(ctx, `select reconciliation_id from ledger.reconciliations where currency = $1 and idempotency_key = $2`,
		r.currency, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reconciliation keyed %q: %w", key, err)
	}
	run, err := getRun(ctx, r.tx, `r.reconciliation_id = $1`, id, "", b)
	if err != nil {
		return nil, err
	}
	run.Key = key
	return run, nil
}

func (r *ReconRunTx) Previous(ctx context.Context) (*domain.ReconRun, error) {
	run, err := getRun(ctx, r.tx, `r.currency = $1`, r.currency, itemMatched, domain.ReconRead{})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return run, err
}

func (r *ReconRunTx) FreshLines(ctx context.Context) ([]string, []domain.BankLine, error) {
	rows, err := r.tx.Query(ctx, `select s.statement_id from ledger.bank_statements s
		where s.currency = $1 and not exists (select 1 from ledger.reconciliation_statements t where t.statement_id = s.statement_id)
		order by s.closing_at, s.statement_id`, r.currency)
	if err != nil {
		return nil, nil, fmt.Errorf("statements to reconcile: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return nil, nil, err
	}
	rows, err = r.tx.Query(ctx, `select statement_id, line_no, booked_on, reference, amount::text from ledger.bank_statement_lines
		where statement_id = any($1) order by array_position($1, statement_id), line_no`, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("statement lines: %w", err)
	}
	defer rows.Close()
	var lines []domain.BankLine
	for rows.Next() {
		var l domain.BankLine
		var amt string
		if err := rows.Scan(&l.StatementID, &l.LineNo, &l.BookedOn, &l.Reference, &amt); err != nil {
			return nil, nil, err
		}
		if l.Amount, err = decimal.NewFromString(amt); err != nil {
			return nil, nil, err
		}
		l.BookedOn = l.BookedOn.UTC()
		lines = append(lines, l)
	}
	return ids, lines, rows.Err()
}

// Statements implements app.ReconRunTx: every statement of the currency,
// without its lines (StatementBreaks orders them).
func (r *ReconRunTx) Statements(ctx context.Context) ([]domain.ImportedStatement, error) {
	rows, err := r.tx.Query(ctx, `select `+statementCols+` from ledger.bank_statements where currency = $1`, r.currency)
	if err != nil {
		return nil, fmt.Errorf("statements of %s: %w", r.currency, err)
	}
	return collectStatements(rows)
}

func (r *ReconRunTx) ChainHead(ctx context.Context) (string, int64, error) {
	return ChainHead(ctx, r.tx)
}

func (r *ReconRunTx) Movements(ctx context.Context, after, upto int64, lag time.Duration) ([]domain.Movement, error) {
	rows, err := r.tx.Query(ctx, `select t.id::text, t.kind, t.idempotency_key, t.metadata, t.created_at,
			sum(case when p.direction = 'debit' then p.amount else -p.amount end)::text
		from ledger.postings p
		join ledger.journal_chain c on c.tx_id = p.tx_id
		join ledger.transactions t on t.id = p.tx_id
		where p.account = $1 and p.currency = $2 and c.position > $4 and c.position <= $5
		  and p.created_at >= coalesce((select h.created_at from ledger.journal_chain hc join ledger.transactions h on h.id = hc.tx_id
			where hc.position = $4) - $3::interval, '-infinity')
		group by t.id, c.position order by c.position`, domain.BankClient, r.currency, lag, after, upto)
	if err != nil {
		return nil, fmt.Errorf("bank:client movements: %w", err)
	}
	defer rows.Close()
	var out []domain.Movement
	for rows.Next() {
		var id, kind, key, amt string
		var meta map[string]string
		var at time.Time
		if err := rows.Scan(&id, &kind, &key, &meta, &at, &amt); err != nil {
			return nil, err
		}
		a, err := decimal.NewFromString(amt)
		if err != nil {
			return nil, err
		}
		if a.IsZero() {
			continue // moved bank:client both ways in one transaction: nothing for the bank to show
		}
		mk, mkey := domain.ClassifyMovement(id, domain.TxKind(kind), key, meta)
		out = append(out, domain.Movement{Kind: mk, Key: mkey, Amount: a, TransactionIDs: []string{id}, RecordedAt: at.UTC()})
	}
	return out, rows.Err()
}

// LatestClose implements app.ReconRunTx: the latest closing instant of
// the currency's statements this run or an earlier one took. A statement
// imported while the run reads (its transaction is read committed, and an
// import takes no run's lock) is not one whose lines it matched: judged by
// its close, what it shows would have been exceptions until the next run.
func (r *ReconRunTx) LatestClose(ctx context.Context, taken []string) (time.Time, bool, error) {
	var at *time.Time
	if err := r.tx.QueryRow(ctx, `select max(s.closing_at) from ledger.bank_statements s where s.currency = $1
		and (s.statement_id = any($2) or exists (select 1 from ledger.reconciliation_statements rs where rs.statement_id = s.statement_id))`,
		r.currency, taken).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("latest statement close: %w", err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return at.UTC(), true, nil
}

func (r *ReconRunTx) Balances(ctx context.Context) (*decimal.Decimal, decimal.Decimal, error) {
	var closing *string
	var ledgerBal string
	if err := r.tx.QueryRow(ctx, `select
			(select sum(closing_balance)::text from (select distinct on (account) closing_balance from ledger.bank_statements
				where currency = $2 order by account, closing_at desc, imported_at desc, statement_id desc) x),
			coalesce((select debits - credits from ledger.balances where account = $1 and currency = $2), 0)::text`,
		domain.BankClient, r.currency).Scan(&closing, &ledgerBal); err != nil {
		return nil, decimal.Zero, fmt.Errorf("reconciliation balances: %w", err)
	}
	bal, err := decimal.NewFromString(ledgerBal)
	if err != nil {
		return nil, decimal.Zero, err
	}
	if closing == nil {
		return nil, bal, nil
	}
	c, err := decimal.NewFromString(*closing)
	if err != nil {
		return nil, decimal.Zero, err
	}
	return &c, bal, nil
}

// CashAt implements app.ReconRunTx, in one statement (one snapshot):
// bank:client at closeAt is its balance now less the postings created
// after closeAt, and less those created by then of transactions the chain
// had not taken at headPosition (after its head in (xid, id) order: the
// run took no movement of theirs); each read bounded by recent rows (the
// postings since the close, the transactions after the head, the matched
// items recorded after the close or on a statement closing after it). A
// voided resolution's items are not in transit by it: the run after the
// void carries them again, open. A movement resolved bank_held is not in
// transit once recorded (the bank held its money all along, on no line),
// and before it is the bank's: in transit as a line would be.
//
// The statement is planned for its values, the head's (xid, id) among them
// (read first: a link of the chain never changes). Planned generically (a
// pool's connection keeps a generic plan after a statement's fifth run),
// its reads were bounded by nothing: the transactions after the head were
// joined from every bank:client posting up to the close, and the matched
// items from every statement closing by then (1 million bank:client
// postings: 10 313 heap pages, 7.4 s, inside the currency's run lock, which
// finance's resolutions wait for).
func (r *ReconRunTx) CashAt(ctx context.Context, closeAt time.Time, taken []string, headPosition int64) (domain.CashFigures, error) {
	headXid, headID := uint64(0), zeroUUID
	if err := r.tx.QueryRow(ctx, `select xid, tx_id::text from ledger.journal_chain where position = $1`, headPosition).Scan(&headXid, &headID); err != nil &&
		!errors.Is(err, pgx.ErrNoRows) {
		return domain.CashFigures{}, fmt.Errorf("proof of cash: chain head %d: %w", headPosition, err)
	}
	var bank, ledgerBal, matchedBank, matchedLedger, resolvedBank, resolvedLedger, heldBank string
	b := &pgx.Batch{}
	b.Queue(`set local plan_cache_mode = force_custom_plan`)
	b.Queue(`select
			(select coalesce(sum(closing_balance), 0) from (select distinct on (account) closing_balance from ledger.bank_statements s
				where s.currency = $2 and s.closing_at <= $3 and (s.statement_id = any($4)
					or exists (select 1 from ledger.reconciliation_statements rs where rs.statement_id = s.statement_id))
				order by account, closing_at desc, imported_at desc, statement_id desc) x)::text,
			(coalesce((select debits - credits from ledger.balances where account = $1 and currency = $2), 0)
				- coalesce((select sum(case when direction = 'debit' then amount else -amount end) from ledger.postings
					where account = $1 and currency = $2 and created_at > $3), 0)
				- coalesce((select sum(case when p.direction = 'debit' then p.amount else -p.amount end) from ledger.postings p
					where p.tx_id in (select t.id from ledger.transactions t where (t.xid, t.id) > ($5::xid8, $6::uuid))
						and p.account = $1 and p.currency = $2 and p.created_at <= $3), 0))::text,
			coalesce((select sum(i.bank_amount) from ledger.reconciliation_items i join ledger.bank_statements s on s.statement_id = i.statement_id
				where i.status = 'matched' and i.recorded_at > $3 and s.currency = $2 and s.closing_at <= $3), 0)::text,
			coalesce((select sum(i.ledger_amount) from ledger.bank_statements s join ledger.reconciliation_items i on i.statement_id = s.statement_id
				where i.status = 'matched' and s.currency = $2 and s.closing_at > $3 and coalesce(i.recorded_at, '-infinity') <= $3), 0)::text,
			coalesce((select sum(ri.bank_amount) from ledger.reconciliation_resolution_items ri join ledger.bank_statements s on s.statement_id = ri.statement_id
				where s.currency = $2 and s.closing_at <= $3
					and not exists (select 1 from ledger.reconciliation_resolution_voids v where v.resolution_id = ri.resolution_id)), 0)::text,
			coalesce((select sum(case when p.direction = 'debit' then p.amount else -p.amount end)
				from ledger.reconciliation_resolution_items ri
				join ledger.reconciliation_resolutions rr on rr.resolution_id = ri.resolution_id
				join ledger.reconciliations rn on rn.reconciliation_id = rr.reconciliation_id
				cross join lateral unnest(ri.transaction_ids) x(id)
				join ledger.postings p on p.tx_id = x.id::uuid
				where ri.transaction_id is not null and rr.action <> $7 and rn.currency = $2 and p.account = $1 and p.currency = $2 and p.created_at <= $3
					and not exists (select 1 from ledger.reconciliation_resolution_voids v where v.resolution_id = ri.resolution_id)), 0)::text,
			coalesce((select sum(case when p.direction = 'debit' then p.amount else -p.amount end)
				from ledger.reconciliation_resolutions rr
				join ledger.reconciliations rn on rn.reconciliation_id = rr.reconciliation_id
				join ledger.reconciliation_resolution_items ri on ri.resolution_id = rr.resolution_id
				cross join lateral unnest(ri.transaction_ids) x(id)
				join ledger.postings p on p.tx_id = x.id::uuid
				where rr.action = $7 and rn.currency = $2 and p.account = $1 and p.currency = $2 and p.created_at > $3
					and not exists (select 1 from ledger.reconciliation_resolution_voids v where v.resolution_id = ri.resolution_id)), 0)::text`,
		domain.BankClient, r.currency, closeAt, taken, headXid, headID, domain.ResolveBankHeld).QueryRow(func(row pgx.Row) error {
		return row.Scan(&bank, &ledgerBal, &matchedBank, &matchedLedger, &resolvedBank, &resolvedLedger, &heldBank)
	})
	b.Queue(`set local plan_cache_mode = default`)
	if err := r.tx.SendBatch(ctx, b).Close(); err != nil {
		return domain.CashFigures{}, fmt.Errorf("proof of cash figures: %w", err)
	}
	var f domain.CashFigures
	var mb, ml, rb, rl, hb decimal.Decimal
	for _, x := range []struct {
		to *decimal.Decimal
		s  string
	}{{&f.Bank, bank}, {&f.Ledger, ledgerBal}, {&mb, matchedBank}, {&ml, matchedLedger}, {&rb, resolvedBank}, {&rl, resolvedLedger}, {&hb, heldBank}} {
		d, err := decimal.NewFromString(x.s)
		if err != nil {
			return domain.CashFigures{}, fmt.Errorf("proof of cash figures: %w", err)
		}
		*x.to = d
	}
	f.InBank, f.InLedger = mb.Add(rb).Add(hb), ml.Add(rl)
	return f, nil
}
