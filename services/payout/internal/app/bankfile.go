package app

import (
	"context"
	"time"

	"github.com/shopspring/decimal"
)

// BankFiles is the bank-file rail as finance drives it: the payment
// batches it sent (pain.001) and the bank's files it imports (pain.002,
// camt.054).
type BankFiles interface {
	ListBatches(ctx context.Context, before string, limit int) ([]PayoutBatch, error)
	GetBatch(ctx context.Context, id string) (PayoutBatch, error)
	// BatchFile is the pain.001 exactly as built (and delivered).
	BatchFile(ctx context.Context, id string) ([]byte, error)
	// Import applies a bank file once: a second import of the same bytes
	// answers the first import's report (Duplicate set), changing nothing
	// but its entries that named no transfer then and name one now, which
	// are applied now (their note says so). A malformed file is an error
	// naming the element.
	Import(ctx context.Context, source, name string, file []byte) (BankFileImport, error)
	// RestoreHold is the latest restore hold (zero HeldSince: none ever).
	RestoreHold(ctx context.Context) (BankFileHold, error)
	// ReleaseRestoreHold releases the open hold, by whom: batches are cut
	// and delivered again. Released already, it answers that release;
	// never held, or while a queued transfer is named by a bank report's
	// entry not applied to it (the bank has it), apperr.ErrPrecondition.
	ReleaseRestoreHold(ctx context.Context, by string) (BankFileHold, error)
	// ResolveTransfer is finance's answer to a transfer held for review
	// (BankTransferReview): paid at the amount the bank paid, or put back
	// on the queue. It answers the review res names (ReviewID), else the
	// transfer's latest. The same resolution again, reason and all,
	// answers the first; another after it (or another reason),
	// apperr.ErrConflict naming the first, and so is one without a
	// ReviewID repeating the resolution of the review before an open one
	// (a resend of the call that resolved it, whose answer was lost: it
	// never saw the newer review); a transfer never held for review,
	// apperr.ErrPrecondition; an unknown EndToEndId or ReviewID,
	// apperr.ErrNotFound.
	ResolveTransfer(ctx context.Context, res BankTransferResolution) (BankTransferReview, error)
}

// Resolutions of a bank transfer held for review.
const (
	// BankResolvePaid: the bank paid it (its statement or camt.054 says
	// so), at the amount given: the transfer is booked, and its payout
	// paid if that is the transfer's amount (at another, the rail reports
	// it and the payout is held as rail_amount_mismatch).
	BankResolvePaid = "paid"
	// BankResolveRequeue: the bank does not have it, or refused it: it goes
	// into the next batch (after the restore hold's release).
	BankResolveRequeue = "requeue"
	// BankResolvedByBank: a later report of the bank booked, rejected or
	// returned it (no finance action).
	BankResolvedByBank = "bank"
)

// Why a bank transfer left the queue for finance's review.
const (
	ReviewAmountMismatch     = "amount_mismatch"     // the bank has it at another amount
	ReviewDuplicateRejection = "duplicate_rejection" // the bank refused a copy of it: it has the original
	ReviewLostBatch          = "lost_batch"          // it may be in a batch lost with a restore, which the bank has
)

// BankTransferResolution is finance's resolution of a transfer in review.
type BankTransferResolution struct {
	EndToEndID string
	ReviewID   int64           // the review it answers (BankTransferReview.ReviewID); 0: the transfer's latest
	Resolution string          // BankResolvePaid or BankResolveRequeue
	Amount     decimal.Decimal // paid: the amount the bank paid, in Currency
	Currency   string
	Reason     string // what finance checked (a statement line, the bank's answer)
	By         string // role:subject
}

// BankTransferReview is a bank transfer held for finance's review after a
// restore: the bank has it, or may have it, under terms the rail cannot
// apply, so it left the queue (sent again, it would be paid twice) and is
// never cut into a batch until resolved.
type BankTransferReview struct {
	ReviewID                                    int64 // a transfer may be held for review more than once
	EndToEndID, Reference, ProviderID, Currency string
	Amount                                      decimal.Decimal // the transfer's
	State                                       string          // the transfer's state now
	Cause, Note                                 string          // Review*, and what the bank's report said
	Since                                       time.Time
	Resolution                                  string           // "" while open; BankResolve*, BankResolvedByBank
	PaidAmount                                  *decimal.Decimal // resolved paid: the amount the bank paid
	ResolvedBy                                  string
	ResolvedAt                                  *time.Time
	ResolutionReason                            string
}

// BankFileHold is a restore hold of the bank-file rail: gpubill restore
// and after-recovery open one, and no batch is cut or delivered while it
// is open (the database is back at its point; the bank is not).
type BankFileHold struct {
	HeldSince  time.Time  // zero: the rail was never held
	ReleasedAt *time.Time // nil while held
	ReleasedBy string
	// What a release sends: the transfers queued for the next cutoff and
	// the batches built and not yet written to the outbox.
	QueuedTransfers, UndeliveredBatches int
	// What a release does not send: the transfers held for finance's
	// review (ResolveTransfer), and the oldest of them.
	ReviewTransfers int
	InReview        []BankTransferReview
}

// Held says whether the hold is open.
func (h BankFileHold) Held() bool { return !h.HeldSince.IsZero() && h.ReleasedAt == nil }

// Where an imported bank file came from.
const (
	SourceUpload = "upload" // POST /v1/bank-files
	SourceInbox  = "inbox"  // GPUBILL_BANK_INBOX_DIR
)

// PayoutBatch is one pain.001 sent to the bank.
type PayoutBatch struct {
	ID            string
	CutoffAt      time.Time
	ExecutionDate time.Time
	Transfers     int
	ControlSum    decimal.Decimal
	Totals        []CurrencyTotal
	FileSHA256    string
	CreatedAt     time.Time
	DeliveredAt   *time.Time
	DeliveredPath string
}

// CurrencyTotal is a batch's count and sum in one currency.
type CurrencyTotal struct {
	Currency  string
	Transfers int
	Amount    decimal.Decimal
}

// Outcomes of a bank file's entry.
const (
	EntryApplied          = "applied"           // the transfer moved
	EntryUnchanged        = "unchanged"         // already there (a status repeated, or older than what is known)
	EntryConflict         = "conflict"          // contradicts what is known (rejected after booked …): not applied, look at it
	EntryUnknownReference = "unknown_reference" // no transfer with this EndToEndId
	EntryAmountMismatch   = "amount_mismatch"   // the bank's amount or currency is not the transfer's: not applied
	EntryIgnored          = "ignored"           // not about a payout (a credit without return information …)
	EntryReview           = "review"            // the transfer left the queue for finance's review (BankTransferReview)
	EntryLostBatch        = "lost_batch"        // a status of a batch lost with a restore, covering payments it does not name
	EntryUnreadable       = "unreadable"        // an entry on the client account the rail cannot read (malformed): not applied, look at it
)

// EntryNotApplied says whether an entry's outcome is one for finance to
// look at (counted not applied in an import's answer, logged as a warning).
func EntryNotApplied(outcome string) bool {
	switch outcome {
	case EntryUnknownReference, EntryConflict, EntryAmountMismatch, EntryReview, EntryLostBatch, EntryUnreadable:
		return true
	}
	return false
}

// BankFileImport is the report of one bank file's import.
type BankFileImport struct {
	FileID            string
	Kind              string // pain.002.001.10, camt.054.001.08, …
	MessageID         string
	OriginalMessageID string // pain.002: the batch it answers
	Name              string
	Source            string // upload or inbox
	Duplicate         bool   // the same bytes were imported before: nothing changed now but entries read again (Import)
	ImportedAt        time.Time
	Entries           []BankFileEntry
}

// BankFileEntry is what one status or movement in a bank file did.
type BankFileEntry struct {
	Element    string // where in the file ("…/TxInfAndSts[2]")
	EndToEndID string
	PayoutRef  string // the rail reference (payout id, or id-attempt); "" when unknown
	BankStatus string // ACCP, RJCT, BOOK, RTRN …
	ReasonCode string
	Outcome    string // Entry*
	Note       string
}
