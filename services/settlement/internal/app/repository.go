package app

import (
	"context"
	"errors"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Store is settlement's own tables as the cycle's steps use them
// (adapters.Store implements it on Postgres). BeginClose and Finalize queue
// their events (settlement.cycle.closed, settlement.settled) in settlement's
// outbox in the same transaction as the write.
type Store interface {
	ProviderStateReader
	EnsureCycle(ctx context.Context, cy cycles.Cycle) (status string, err error)
	// BeginClose moves an open cycle to closing (once) and reports whether
	// this call closed it.
	BeginClose(ctx context.Context, cycle, reason string, now time.Time) (bool, error)
	CycleStatus(ctx context.Context, cycle string) (status string, snapshotDone bool, err error)
	SnapshotBalances(ctx context.Context, cycle string, rows []domain.Balance, rates map[string]decimal.Decimal) error
	MarkSnapshotDone(ctx context.Context, cycle string) error
	NextProviders(ctx context.Context, cycle, after string, limit int) ([]string, error)
	// CompleteCycle marks a closing cycle settled once every settlement of
	// it is, and reports whether it is settled.
	CompleteCycle(ctx context.Context, cycle string, now time.Time) (bool, error)
	// UnsettledCycles lists the cycles recorded and not settled, with
	// their status.
	UnsettledCycles(ctx context.Context) ([]CycleInfo, error)
	// Prepare also answers when the cycle was closed (zero while it is
	// open): the tax service picks the rule in force then.
	Prepare(ctx context.Context, cycle, provider string) (held bool, tier string, rate decimal.NullDecimal, closedAt time.Time, items []domain.PreparedItem, err error)
	Finalize(ctx context.Context, st domain.Settled, now time.Time) error
	// UnsweptCommission lists up to limit settled statements with a
	// commission and no sweep, oldest first (by settled_at, cycle,
	// provider, currency), after the statement after when it is set and up
	// to and with the statement through when it is set (the store compares
	// positions, in its own order).
	UnsweptCommission(ctx context.Context, after, through *domain.Unswept, limit int) ([]domain.Unswept, error)
	// RecordSweep names the sweep transaction on a statement that had none.
	RecordSweep(ctx context.Context, u domain.Unswept, sweepID string) error
	// TakeSweepPosition makes the caller's run the one that moves the
	// hourly commission sweep's position, shared by every replica and kept
	// across restarts (a run that took it before no longer moves it), and
	// answers the run's number and the position: the last statement a run
	// tried, nil to start from the oldest.
	TakeSweepPosition(ctx context.Context) (run int64, at *domain.Unswept, err error)
	// MoveSweepPosition records at (nil: from the oldest) as the position
	// if run still holds it, and answers whether it did (false: a later
	// run took it).
	MoveSweepPosition(ctx context.Context, run int64, at *domain.Unswept) (bool, error)
}

// Queries is what settlement's API reads and sets outside the cycle's steps
// (adapters/postgres.Store implements it).
type Queries interface {
	GetCycle(ctx context.Context, id string) (domain.Cycle, error)
	// ListCycles lists cycles with status (any when ""), newest first,
	// before the cycle id before when set.
	ListCycles(ctx context.Context, status, before string, limit int) ([]domain.Cycle, error)
	SetHold(ctx context.Context, h domain.Hold) error
	// CompleteCycle is Store's (a release may settle a cycle's last provider).
	CompleteCycle(ctx context.Context, cycle string, now time.Time) (bool, error)
	// ListStatements lists a provider's statements (of cycle when set),
	// after the position after when set.
	ListStatements(ctx context.Context, provider, cycle string, after *domain.StatementPos, limit int) ([]domain.Statement, error)
}

// Ledger is what settlement asks of the ledger service (a gRPC client in
// adapters implements it). A refusal retrying cannot fix is Rejected; a
// transaction whose key holds another body is also Conflict.
type Ledger interface {
	CloseCycle(ctx context.Context, cycle string) error
	// CycleBalances is one page of the closed cycle's pending balances per
	// provider and currency, and the token of the next page ("" at the end).
	CycleBalances(ctx context.Context, cycle string, pageSize int, token string) ([]domain.Balance, string, error)
	// CreateTransaction posts tx (idempotent on its key) and returns its id.
	CreateTransaction(ctx context.Context, tx LedgerTx) (string, error)
	// StatementLines are a statement's lines from the postings to a
	// provider's pending account in currency, the settlement's own
	// transactions (exclude) left out: one per lease, renter and GPU model
	// (summed, charges only), one per other credit, one per debit
	// (negative); they add up to the gross the settlement split.
	StatementLines(ctx context.Context, account, currency string, exclude []string) ([]domain.Line, error)
	IssueInvoices(ctx context.Context, period string) (IssueResult, error)
	// RunReconciliation reconciles every currency with a statement and
	// answers each run's counts (no items); a run holding key answers again
	// as it was.
	RunReconciliation(ctx context.Context, key string) ([]ReconciliationSummary, error)
}

// LedgerTx is one ledger transaction settlement posts.
type LedgerTx struct {
	Key         string
	Description string
	Metadata    map[string]string
	Currency    money.Currency
	Legs        []domain.Leg
}

// Tax is what settlement asks of the tax service (a gRPC client in adapters
// implements it).
type Tax interface {
	// ComputeWithholding splits in.Gross and records the withholding
	// (idempotent on in.IdempotencyKey); the split is not checked yet.
	ComputeWithholding(ctx context.Context, in TaxInput) (TaxResult, error)
	RemitTax(ctx context.Context, period string) (RemittanceReport, error)
}

// Rejected marks err as a failure retrying cannot fix (bad input, a
// conflict, a refusal): the activity that meets it fails for good. The
// message stays err's.
func Rejected(err error) error { return rejected{err: err} }

// RejectedAs is Rejected naming the refusal's code (the ledger's gRPC code,
// such as PermissionDenied; RefusalCode answers it).
func RejectedAs(code string, err error) error { return rejected{err: err, code: code} }

// IsRejected tells whether err, or an error it wraps, is Rejected.
func IsRejected(err error) bool {
	var r rejected
	return errors.As(err, &r)
}

// RefusalCode is the code a Rejected err was marked with (RejectedAs,
// Unfunded, Conflict), "Unclassified" when none.
func RefusalCode(err error) string {
	var r rejected
	if errors.As(err, &r) && r.code != "" {
		return r.code
	}
	return "Unclassified"
}

type rejected struct {
	err  error
	code string
}

func (r rejected) Error() string { return r.err.Error() }
func (r rejected) Unwrap() error { return r.err }

// Conflict marks err as the ledger's refusal of a transaction whose key
// holds another body (itself Rejected).
func Conflict(err error) error { return rejected{err: conflict{err}, code: "Conflict"} }

// IsConflict tells whether err, or an error it wraps, is a Conflict.
func IsConflict(err error) bool {
	var c conflict
	return errors.As(err, &c)
}

type conflict struct{ err error }

func (c conflict) Error() string { return c.err.Error() }
func (c conflict) Unwrap() error { return c.err }

// Unfunded marks err as the ledger's refusal of a transaction that would
// take bank:client below zero (itself Rejected): the one refusal of a
// commission sweep that client money coming in fixes, so the only one the
// sweep defers to its next run. Every other refusal (bad input, a lost
// role, an unknown account or currency) is the sweep's own outcome.
func Unfunded(err error) error { return rejected{err: unfunded{err}, code: "Unfunded"} }

// IsUnfunded tells whether err, or an error it wraps, is Unfunded.
func IsUnfunded(err error) bool {
	var u unfunded
	return errors.As(err, &u)
}

type unfunded struct{ err error }

func (u unfunded) Error() string { return u.err.Error() }
func (u unfunded) Unwrap() error { return u.err }
