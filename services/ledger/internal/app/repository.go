package app

import (
	"context"
	"errors"
	"time"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Store is what the ledger's use cases need from storage (implemented by
// adapters/postgres). Every write runs in WithTx; reads outside one are
// here. A missing row is apperr.ErrNotFound.
type Store interface {
	WithTx(ctx context.Context, fn func(Tx) error) error
	// PostNew writes transactions as Tx.Post does, in a transaction of its
	// own, when it can take every one as new and no balance it leaves
	// needs judging (domain.NeedsJudging: an overdraft, a wallet's
	// depletion). ErrUsePost, with nothing written, when it cannot (an
	// idempotency key exists, a balance needs judging, a transaction
	// records a segregation breach): post them in WithTx.
	// audited are the writes' audit records handed to them: each one for
	// this store's outbox is stored in the same transaction and marked
	// stored once it has committed.
	PostNew(ctx context.Context, txs []*domain.Transaction, audited []Audited) ([]domain.BalanceChange, error)
	// Remember notes, once a write has committed, the accounts it created,
	// so later writes skip creating them.
	Remember(changes []domain.BalanceChange)

	// LoadTransactions reads transactions with their postings, links and
	// chain hash, in the order of ids (missing ones are left out).
	LoadTransactions(ctx context.Context, ids []string) ([]*domain.Transaction, error)
	// TxByKey is the id and request hash stored under an idempotency key.
	TxByKey(ctx context.Context, key string) (string, []byte, error)
	AccountExists(ctx context.Context, address string) (bool, error)
	// RenterClosedAt is when the renter was closed (ledger.renters, from
	// party.updated); the zero time when it is open or not known.
	RenterClosedAt(ctx context.Context, renterID string) (time.Time, error)
	// AccountTotals are accounts' totals per currency, now (asOf nil) or as of an instant.
	AccountTotals(ctx context.Context, accounts []string, asOf *time.Time) (map[string][]domain.Totals, error)
	// ListAccountAddresses pages through addresses starting with prefix, after `after`.
	ListAccountAddresses(ctx context.Context, prefix, after string, limit int) ([]string, error)
	// ListTxIDs pages through every transaction in id (time) order, with
	// the late ones from `from` that sort at or before after (domain.TxLate).
	ListTxIDs(ctx context.Context, after string, from domain.TxLate, limit int) (domain.TxPage, error)
	// TxIDsByKeys is the ids of the transactions posted under keys, in id order.
	TxIDsByKeys(ctx context.Context, keys []string) ([]string, error)
	// ListTxIDsByAccount pages through the transactions posting to account,
	// with the late ones from `from` that sort at or before after (domain.TxLate).
	ListTxIDsByAccount(ctx context.Context, account string, after *domain.TxCursor, from domain.TxLate, limit int) (domain.TxPage, error)
	// ListCycleBalances pages through a cycle's non-zero provider pending
	// balances, and at 0 the pending accounts only charges billed at 0.00
	// went to, in (account, currency) order.
	ListCycleBalances(ctx context.Context, cycle, afterAccount, afterCurrency string, limit int) ([]domain.CycleBalance, error)
	// StatementLines are a pending account's statement lines in a
	// currency, the transactions excluded left out (domain.ProviderLine).
	StatementLines(ctx context.Context, account, currency string, exclude []string) ([]domain.ProviderLine, error)

	// StoreAuditEvents appends audit events; a repeated event id changes nothing.
	StoreAuditEvents(ctx context.Context, evs []domain.AuditEvent) error
	// ListAuditEvents answers newest first, at most f.Limit.
	ListAuditEvents(ctx context.Context, f AuditFilter) ([]domain.StoredAuditEvent, error)
}

// Audited is a write's audit record, handed to the write by the audit
// interceptor (audit.Claim), as the outbox message to store with the write
// (made by the caller before the write queues for its group commit).
type Audited struct {
	Claim   *audit.Claim
	Message outbox.Message
}

// audited is the record of claim with the resource ids of what the write
// creates that its answer carries; none when claim is nil or its message
// cannot be made (the interceptor then stores the record itself).
func audited(claim *audit.Claim, created ...string) Audited {
	if claim == nil {
		return Audited{}
	}
	m, err := claim.Message(created...)
	if err != nil {
		return Audited{}
	}
	return Audited{Claim: claim, Message: m}
}

// ErrUsePost is PostNew's answer for transactions it cannot take as new.
var ErrUsePost = errors.New("post these transactions with Tx.Post")

// Tx is Store inside one database transaction.
type Tx interface {
	// Claim records inbound message ids of consumer in the inbox and returns
	// those not seen before.
	Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error)
	// LockCyclesShared holds every cycle's lock shared until commit (posting
	// to it); LockCycle holds one exclusively (closing it).
	LockCyclesShared(ctx context.Context, cycles []string) error
	LockCycle(ctx context.Context, cycle string) error
	ClosedCycles(ctx context.Context) (map[string]bool, error)
	// CloseCycle records the close (a repeat keeps the first) and returns its time.
	CloseCycle(ctx context.Context, cycle string, at time.Time) (time.Time, error)

	// Post writes transactions: journal rows, postings, accounts on first
	// use, ledger.posted events for the fresh ones, and one update of every
	// touched balance (last, so hot balance rows stay locked only until the
	// commit). Transactions whose idempotency key exists are skipped; the
	// fresh ones are returned, in the caller's order, with the balance
	// changes they made.
	Post(ctx context.Context, txs []*domain.Transaction) ([]*domain.Transaction, []domain.BalanceChange, error)
	TxByKey(ctx context.Context, key string) (string, []byte, error)
	// RequestHashes returns the request hash of each transaction of keys
	// that exists, by key.
	RequestHashes(ctx context.Context, keys []string) (map[string][]byte, error)
	// LinkReversal links a reversal to its original; false if the original
	// already has one.
	LinkReversal(ctx context.Context, originalID, reversalID string, at time.Time) (bool, error)
	// PublishReversed publishes ledger.reversed.{the reversed transaction}
	// of rev, a reversal: one message per reversal, with it.
	PublishReversed(ctx context.Context, rev *domain.Transaction) error
	// PublishDepletions publishes billing.wallet.depleted.{renter}.
	PublishDepletions(ctx context.Context, ds []domain.WalletDepletion) error
	// AddAuditRecords stores, with the write, the audit records the writes
	// took (audited) that belong in this store's outbox, as PostNew does,
	// and returns their claims, to be marked stored once the transaction
	// has committed.
	AddAuditRecords(ctx context.Context, audited []Audited) ([]*audit.Claim, error)
	// DepositRefunds is the deposit of external_ref ref with its reversal
	// and the unreversed rail_refunds naming it, as committed when read
	// (apperr.ErrNotFound: no deposit has ref).
	DepositRefunds(ctx context.Context, ref string) (domain.DepositRefunds, error)
	// RecordUnbilled keeps charges billed at 0.00 (a charge id recorded
	// before is left as it is).
	RecordUnbilled(ctx context.Context, cs []domain.UnbilledCharge) error
}

// AuditFilter selects audit events.
type AuditFilter struct {
	Actor    string
	Method   string // full method, or its last part
	Resource string // one resource id entry, exactly ("transaction_id=…")
	From, To *time.Time
	Limit    int
	Before   int64 // seq below this; 0 = from the newest
}
