package app

import (
	"context"
	"errors"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// PayoutsPosition is a place in a provider's payout listing: the payout
// last served, by its creation time and id. The zero value is the start.
type PayoutsPosition struct {
	CreatedAt time.Time
	ID        string
}

// PayoutAttempt is one attempt of a payout (its first, or a retry).
type PayoutAttempt struct {
	ID      string
	Attempt int
}

// Store is payout's persistence as the use cases and the ports need it
// (adapters.Store implements it on Postgres).
type Store interface {
	// Update runs fn in one database transaction: the payouts it locks stay
	// locked, and what it writes (status changes, their history, events and
	// webhook deliveries) commits together or not at all.
	Update(ctx context.Context, fn func(Tx) error) error

	GetPayout(ctx context.Context, id string) (domain.Payout, error)
	// ListPayouts lists a provider's payouts newest created first (ties by
	// id, descending), limit of them after before.
	ListPayouts(ctx context.Context, provider, cycle, status string, before PayoutsPosition, limit int) ([]domain.Payout, error)
	// PollPayout is GetPayout for providers' polls: possibly from a cache
	// whose copies are dropped on every change (adapters.PayoutCache).
	PollPayout(ctx context.Context, id string) (domain.Payout, error)
	ListVersion(ctx context.Context, provider string) (count, versions int64, err error)
	PayoutByReference(ctx context.Context, ref string) (string, error)
	// RailAmountFlag is what the rail held when the payout's attempt was
	// flagged rail_amount_mismatch, with finance's resolution
	// (apperr.ErrNotFound when never flagged).
	RailAmountFlag(ctx context.Context, id string, attempt int) (domain.RailAmountFlag, error)

	// PutMethod sets a provider's payout method; the same method again
	// changes nothing and answers the stored one (changed false). inFlight
	// names the provider's payouts already submitted, which still go to
	// the method they were submitted with (their history notes it).
	PutMethod(ctx context.Context, m domain.ProviderMethod) (stored domain.ProviderMethod, changed bool, inFlight []string, err error)
	GetMethod(ctx context.Context, provider string) (domain.ProviderMethod, error)
	MethodHistory(ctx context.Context, provider string) ([]domain.Change, error)
	// PutKYC sets a provider's KYC status (byProvider: the provider's own,
	// refused over finance's rejection) and returns, for a rejection (or
	// its change by finance), the payouts it stops (waiting) and those
	// being submitted, submitted or in transit it cannot (inFlight), as
	// PutHold does.
	PutKYC(ctx context.Context, provider, status, reference string, byProvider bool, at time.Time) (waiting, inFlight []string, err error)
	// KYCStatus reads a provider's KYC status ("" when none).
	KYCStatus(ctx context.Context, provider string) (string, error)
	// SettledOutsideClaimsDue lists at most limit of the ledger
	// transactions payouts claim (the payouts settled outside, and those
	// failed again holding the entries of their settlement that stand),
	// those never checked first, then the least recently checked.
	SettledOutsideClaimsDue(ctx context.Context, limit int) ([]SettledOutsideClaim, error)
	// MarkSettledOutsideChecked records that the claims of ids were read
	// from the ledger at at (a later SettledOutsideClaimsDue lists them
	// after the others).
	MarkSettledOutsideChecked(ctx context.Context, ids []string, at time.Time) error
	// ClaimHolders lists the claims of the ledger transactions ids
	// (matched without regard to case), read under each one's claim lock
	// (Tx.LockClaimEntries): a claim in flight is waited for and seen.
	ClaimHolders(ctx context.Context, ids []string) ([]SettledOutsideClaim, error)
	// PutHold holds (reason ≠ "") or releases a provider's payouts and
	// returns its payouts not yet past the gate (waiting) and those being
	// submitted to their rail (inFlight), which the hold does not stop.
	PutHold(ctx context.Context, provider, reason string, at time.Time) (waiting, inFlight []string, err error)

	WaitingIDs(ctx context.Context, provider string) ([]string, error)
	WaitingForAvailable(ctx context.Context, provider string) ([]string, error)
	// Unstarted lists payouts whose current attempt has no workflow yet,
	// with that attempt; SetWorkflowStarted marks started only the
	// attempts given, where still unstarted: a retry committed since the
	// read is a new attempt and keeps waiting for its own workflow.
	Unstarted(ctx context.Context) ([]PayoutAttempt, error)
	SetWorkflowStarted(ctx context.Context, started []PayoutAttempt) error
	// CancelPosted records that the ledger took the return to available
	// of a payout canceled in the bank-file queue (domain.CanceledInQueue):
	// until then a restore starts its workflow again, and
	// gpubill_payout_cancel_unposted_age_seconds counts it.
	CancelPosted(ctx context.Context, id string, attempt int, at time.Time) error

	Settings(ctx context.Context) (map[string]string, error)
	PutSettings(ctx context.Context, changes map[string]string, actor, reason string, at time.Time) ([]domain.SettingChange, error)
	SettingChanges(ctx context.Context, limit int) ([]domain.SettingChange, error)
	WaitingInCurrencies(ctx context.Context, currencies []string) ([]string, error)

	// CreateWebhook stores a subscription unless the provider has one of
	// its URL: with the same secret that one is answered (a retry), with
	// another it is a conflict; the provider's max-th is a precondition
	// failure.
	CreateWebhook(ctx context.Context, w domain.Webhook, max int) (domain.Webhook, error)
	ListWebhooks(ctx context.Context, provider string) ([]domain.Webhook, error)
	RotateWebhookSecret(ctx context.Context, provider, id, secret string, now, previousUntil time.Time) (domain.Webhook, error)
	// DeleteWebhook removes a provider's webhook (ErrNotFound if it has
	// none of id; removing it again changes nothing): its pending
	// deliveries are canceled, nothing more is queued for it.
	DeleteWebhook(ctx context.Context, provider, id string, at time.Time) error
	// RedeliverDelivery makes a failed delivery pending again, due at at
	// and retried from then; a pending one is answered as it is, any
	// other is ErrPrecondition.
	RedeliverDelivery(ctx context.Context, provider, webhook string, id int64, at time.Time) (domain.Delivery, error)
	// ListDeliveries is a page of a webhook's delivery log, newest first:
	// at most limit deliveries older than before (0: from the newest).
	ListDeliveries(ctx context.Context, provider, webhook string, before int64, limit int) ([]domain.Delivery, error)
	// ClaimDeliveries leases up to limit due deliveries, none beyond
	// share (what the caller has in flight by webhook and provider).
	ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int, share domain.DeliveryShare) ([]domain.Delivery, error)
	FinishDelivery(ctx context.Context, d domain.Delivery, status string, code int, errText string, next, at time.Time) error
	// RecordWebhookAnswer records whether a webhook's receiver answered
	// an attempt that ended at at: the sender's lag leaves out a webhook
	// whose last attempt got no answer, on every replica alike.
	RecordWebhookAnswer(ctx context.Context, webhookID string, answered bool, at time.Time) error
}

// Tx is the store inside one transaction (Store.Update).
type Tx interface {
	// Lock reads a payout for update (apperr.ErrNotFound when none).
	Lock(ctx context.Context, id string) (domain.Payout, error)
	// Gate re-reads a waiting payout's gate (KYC, method, hold, minimum)
	// and returns what it says, with the provider's method type.
	Gate(ctx context.Context, p domain.Payout, min domain.Minimums) (status, reason, method string, err error)
	// Move changes p's status (checked against domain's transitions),
	// keeping the change in its history, with its event.
	Move(ctx context.Context, p *domain.Payout, to, note string, at time.Time) error
	// SetReason records why a waiting payout still waits.
	SetReason(ctx context.Context, p *domain.Payout, reason string, at time.Time) error
	// SetFailure records p's failure code and message on a payout whose
	// status does not change (rail_amount_mismatch), note in its history.
	SetFailure(ctx context.Context, p *domain.Payout, note string, at time.Time) error
	// SetArrival records p's expected arrival date on a payout whose
	// status does not change (its rail answered a new date), note in its
	// history; updated_at stays its last status change.
	SetArrival(ctx context.Context, p *domain.Payout, note string, at time.Time) error
	// LockBankQueue takes the bank-file rail's batch lock (shared) until
	// the transaction ends: no batch is cut meanwhile, so a transfer read
	// queued stays queued. Taken before any payout's lock, as a hold takes
	// them (Store.PutHold).
	LockBankQueue(ctx context.Context) error
	// HoldQueued records on a submitted payout whose bank transfer is
	// queued that its provider's hold keeps it out of the bank file (its
	// reason and history say held, no arrival date), unless it says so
	// already; nothing when its provider is not held or its transfer is
	// no longer queued. The caller holds LockBankQueue and p's lock.
	HoldQueued(ctx context.Context, p *domain.Payout, at time.Time) error
	// WithdrawQueued takes the bank transfer of p, submitted, out of the
	// bank-file queue (never cut) and reports whether it was queued; it is
	// refused (apperr.ErrPrecondition) while a restore hold is open. The
	// caller holds LockBankQueue.
	WithdrawQueued(ctx context.Context, p domain.Payout, at time.Time) (bool, error)
	// LockRailAmountFlag is Store.RailAmountFlag, locked for update.
	LockRailAmountFlag(ctx context.Context, id string, attempt int) (domain.RailAmountFlag, error)
	// FlagRailAmount keeps what the rail holds under a flagged attempt's
	// reference (the latest answer; a resolved flag stays as resolved).
	FlagRailAmount(ctx context.Context, f domain.RailAmountFlag) error
	// ResolveRailAmountFlag records finance's resolution of an open flag.
	ResolveRailAmountFlag(ctx context.Context, f domain.RailAmountFlag) error
	// SetSubmitting marks a payout that passed the gate for submission to
	// rail (the one it is handed to).
	SetSubmitting(ctx context.Context, id, method, rail string) error
	// MethodChangedSince reports whether the provider's method changed
	// after the payout's current attempt took it: after the attempt was
	// submitted (the rail's answer in, when a change is first allowed), or,
	// for an attempt never submitted, after t.
	MethodChangedSince(ctx context.Context, provider, payoutID string, t time.Time) (bool, error)
	// LockClaimEntries takes the claim lock of each ledger transaction of
	// ids (without regard to case) until the transaction ends: a claim
	// takes it before its last ledger read of the entries, and
	// Store.ClaimHolders reads under it, so a reversal's consumer either
	// sees the claim or runs before that read (which then sees the
	// reversal).
	LockClaimEntries(ctx context.Context, ids []string) error
	// ClaimSettledOutside records that ledger transaction txID paid payout
	// id by hand (apperr.ErrConflict naming the payout when another claims
	// it already).
	ClaimSettledOutside(ctx context.Context, id, txID, reason, by string, at time.Time) error
	// ReleaseSettledOutside moves the claims of payout id on the ledger
	// transactions reversed names out of the claims, kept with the
	// transaction reversing each (reversed by transaction id), and answers
	// the transactions released, sorted; its claims on the others stay.
	ReleaseSettledOutside(ctx context.Context, id string, reversed map[string]string, at time.Time) ([]string, error)
	// SettledOutsideBy are the ledger transactions payout id claims,
	// sorted (none for a payout never settled outside): a payout settled
	// outside, or one failed again whose other entries stand.
	SettledOutsideBy(ctx context.Context, id string) ([]string, error)
	// ResetWorkflow makes the starter start the payout's workflow again.
	ResetWorkflow(ctx context.Context, id string) error
	// CreateFromSettled creates the payout of a settled provider, cycle
	// and currency once; earlier payouts still waiting join it (their ids
	// are returned).
	CreateFromSettled(ctx context.Context, p domain.Payout, min domain.Minimums) (joined []string, err error)
	// Claim records inbound message ids of consumer in the inbox and
	// returns those not seen before.
	Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error)
}

// Ledger is what payout needs of the ledger service.
type Ledger interface {
	// Available is what provider:{id}:available holds in currency (zero
	// before the account's first posting).
	Available(ctx context.Context, provider, currency string) (decimal.Decimal, error)
	// Transfer posts one movement, idempotent on its key. An error the
	// ledger answers as invalid input (an overdraft of a provider account)
	// wraps ErrLedgerRefused; one no retry can fix wraps ErrPermanent.
	Transfer(ctx context.Context, t domain.LedgerTransfer) error
}

// ErrPermanent marks a failure no retry can fix: the activities report it
// as a non-retryable application error (ErrTypeInvalid).
var ErrPermanent = errors.New("permanent failure")

// ErrLedgerRefused is the ledger refusing a posting as invalid: at
// submission, an overdraft of provider available.
var ErrLedgerRefused = errors.New("ledger refused the posting")

// marked keeps err's message and adds a sentinel for errors.Is.
type marked struct {
	err, mark error
}

func (m marked) Error() string   { return m.err.Error() }
func (m marked) Unwrap() []error { return []error{m.err, m.mark} }

// notFoundPermanent is err, permanent when it is the payout not found: any
// other failure to read it (the database restarting, a failover) is tried
// again. Every such error given up left a payout submitting with its
// workflow ended, which no operation moves: perhaps paid at the rail, its
// ledger never told.
func notFoundPermanent(err error) error {
	if errors.Is(err, apperr.ErrNotFound) {
		return Permanent(err)
	}
	return err
}

// Permanent marks err as a failure no retry can fix (nil stays nil).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return marked{err, ErrPermanent}
}

// Refused marks err as the ledger's refusal of a posting (ErrLedgerRefused).
func Refused(err error) error {
	if err == nil {
		return nil
	}
	return marked{err, ErrLedgerRefused}
}
