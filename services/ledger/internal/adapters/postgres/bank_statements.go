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
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Statements keeps imported bank statements (app.StatementStore) in
// ledger.bank_statements and ledger.bank_statement_lines.
type Statements struct{ Pool *pgxpool.Pool }

const statementCols = `statement_id, account, currency, format, statement_date, closing_at,
	opening_balance::text, closing_balance::text, line_count, content_sha256, imported_at, imported_by`

func scanStatement(row pgx.Row) (domain.ImportedStatement, error) {
	var s domain.ImportedStatement
	var open, closing string
	if err := row.Scan(&s.ID, &s.Account, &s.Currency, &s.Format, &s.Date, &s.ClosingAt, &open, &closing,
		&s.LineCount, &s.ContentSHA256, &s.ImportedAt, &s.ImportedBy); err != nil {
		return s, err
	}
	var err error
	if s.Opening, err = decimal.NewFromString(open); err != nil {
		return s, err
	}
	if s.Closing, err = decimal.NewFromString(closing); err != nil {
		return s, err
	}
	s.Date, s.ClosingAt, s.ImportedAt = s.Date.UTC(), s.ClosingAt.UTC(), s.ImportedAt.UTC()
	return s, nil
}

func numeric(d decimal.Decimal) pgtype.Numeric {
	return pgtype.Numeric{Int: d.Coefficient(), Exp: d.Exponent(), Valid: true}
}

// decimalOf is a numeric read in binary (no round trip through text); NULL,
// NaN and the infinities are refused.
func decimalOf(n pgtype.Numeric) (decimal.Decimal, error) {
	if !n.Valid || n.NaN || n.InfinityModifier != pgtype.Finite || n.Int == nil {
		return decimal.Decimal{}, fmt.Errorf("numeric %+v is not a finite number", n)
	}
	return decimal.NewFromBigInt(n.Int, n.Exp), nil
}

// InsertStatement implements app.StatementStore: the statement row and its
// lines (one COPY) in one transaction; a taken id inserts nothing and
// returns the stored row.
func (s *Statements) InsertStatement(ctx context.Context, st domain.ImportedStatement, lines []domain.StatementLine) (domain.ImportedStatement, bool, error) {
	var out domain.ImportedStatement
	inserted := false
	err := pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		// The same file of the account under another id: a conflict naming
		// it. Two imports of it at once take turns on the lock, and the
		// lookup after it (its own statement: a snapshot taken after the
		// wait) sees the other's row.
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.ledger.statement'), hashtext($1 || encode($2, 'hex')))`,
			st.Account, st.ContentSHA256); err != nil {
			return fmt.Errorf("lock statement file: %w", err)
		}
		var twin string
		err := tx.QueryRow(ctx, `select coalesce((select statement_id from ledger.bank_statements
				where account = $1 and content_sha256 = $2 and statement_id <> $3 order by imported_at limit 1), '')`,
			st.Account, st.ContentSHA256, st.ID).Scan(&twin)
		if err != nil {
			return fmt.Errorf("look for the same statement file: %w", err)
		}
		if twin != "" {
			return fmt.Errorf("this file of account %s was imported as statement %s: %w", st.Account, twin, apperr.ErrConflict)
		}
		out, err = scanStatement(tx.QueryRow(ctx, `insert into ledger.bank_statements
				(statement_id, account, currency, format, statement_date, closing_at, opening_balance, closing_balance,
				 line_count, content_sha256, imported_at, imported_by)
			values ($1, $2, $3, $4, $5, $6, $7::numeric, $8::numeric, $9, $10, $11, $12)
			on conflict (statement_id) do nothing
			returning `+statementCols,
			st.ID, st.Account, st.Currency, st.Format, st.Date, st.ClosingAt, st.Opening.String(), st.Closing.String(),
			st.LineCount, st.ContentSHA256, st.ImportedAt, st.ImportedBy))
		if errors.Is(err, pgx.ErrNoRows) {
			out, err = scanStatement(tx.QueryRow(ctx, `select `+statementCols+` from ledger.bank_statements where statement_id = $1`, st.ID))
			return err
		}
		if err != nil {
			return fmt.Errorf("insert statement: %w", err)
		}
		inserted = true
		rows := make([][]any, len(lines))
		for i, l := range lines {
			rows[i] = []any{st.ID, int32(l.No), l.BookedOn, l.Reference, numeric(l.Amount), numeric(l.Balance)}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{Schema, "bank_statement_lines"},
			[]string{"statement_id", "line_no", "booked_on", "reference", "amount", "balance"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("copy statement lines: %w", err)
		}
		return nil
	})
	return out, inserted, err
}

// ListStatements implements app.StatementStore.
func (s *Statements) ListStatements(ctx context.Context, currency, account string, afterClosingAt time.Time, afterID string, limit int) ([]domain.ImportedStatement, error) {
	after := afterClosingAt
	if after.IsZero() {
		after = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	rows, err := s.Pool.Query(ctx, `select `+statementCols+` from ledger.bank_statements
		where ($1 = '' or currency = $1) and ($2 = '' or account = $2) and (closing_at, statement_id) < ($3, $4)
		order by closing_at desc, statement_id desc limit $5`, currency, account, after, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list statements: %w", err)
	}
	return collectStatements(rows)
}

// LatestStatements implements app.StatementStore: of statements closing at
// the same instant, the one imported last (a reconciliation run's Balances
// takes the same).
func (s *Statements) LatestStatements(ctx context.Context, currency string, asOf time.Time) ([]domain.ImportedStatement, error) {
	rows, err := s.Pool.Query(ctx, `select distinct on (account) `+statementCols+` from ledger.bank_statements
		where currency = $1 and closing_at <= $2
		order by account, closing_at desc, imported_at desc, statement_id desc`, currency, asOf)
	if err != nil {
		return nil, fmt.Errorf("latest statements: %w", err)
	}
	return collectStatements(rows)
}

func collectStatements(rows pgx.Rows) ([]domain.ImportedStatement, error) {
	defer rows.Close()
	var out []domain.ImportedStatement
	for rows.Next() {
		st, err := scanStatement(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, rows.Err()
}
