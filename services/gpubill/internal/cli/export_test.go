package cli

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpubill/gpubill/services/gpubill/internal/stack"
)

// PrintDevBanner writes the banner gpubill dev prints once st is up.
func PrintDevBanner(w io.Writer, st *stack.Stack, dataDir, base, finance string) error {
	out := &output{w: w}
	d := &devCmd{}
	d.DataDir = dataDir
	d.printUp(&env{ctx: context.Background(), stdout: out}, st, base, finance)
	return out.err
}

// BeforeVerifyStatements runs before(sql) before each statement ledger verify
// sends, until the returned func restores verify's reads as they were.
func BeforeVerifyStatements(before func(sql string)) (restore func()) {
	prev := verifyReads
	verifyReads = func(q querier) querier { return seam{q: q, before: before} }
	return func() { verifyReads = prev }
}

type seam struct {
	q      querier
	before func(sql string)
}

func (s seam) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	s.before(sql)
	return s.q.Exec(ctx, sql, args...)
}

func (s seam) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	s.before(sql)
	return s.q.Query(ctx, sql, args...)
}

func (s seam) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	s.before(sql)
	return s.q.QueryRow(ctx, sql, args...)
}
