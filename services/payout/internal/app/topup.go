package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
)

// Notification outcomes (what a rail's notification endpoint counts and
// answers): accepted, duplicate and refunded are acknowledged to the rail;
// the others are refused.
const (
	NotifyAccepted  = "accepted"  // verified and applied
	NotifyDuplicate = "duplicate" // a payment already deposited, notified again (or the rail's resend of an applied notification): nothing more
	NotifyRefunded  = "refunded"  // a refund of a top-up, made at the rail, recorded: finance takes it back from the wallet
	NotifyReplay    = "replay"    // a notification already applied, sent again as it was
	NotifyForged    = "forged"    // signature or certificate does not verify
	NotifyStale     = "stale"     // timestamp too far from now
	NotifyMalformed = "malformed" // headers, body or decrypted resource unreadable
	NotifyRejected  = "rejected"  // verified, but not applicable (unknown renter, not a success, …)
	NotifyFailed    = "failed"    // could not be applied now (ledger or database down): the rail retries
)

// Notification kinds.
const (
	NotifyKindTopUp  = "topup"
	NotifyKindPayout = "payout"
)

// ErrReplay is a notification whose replay key was already applied.
var ErrReplay = errors.New("notification replayed")

// ErrDepositRefused is a deposit the ledger refuses for good: the payment
// id already deposited with another renter, currency or amount, or an
// invalid renter id.
var ErrDepositRefused = errors.New("deposit refused by the ledger")

// TopUp is a renter's payment a rail confirmed (its verified notification).
type TopUp struct {
	Rail      string // "wechatpay", "alipay"
	PaymentID string // the rail's payment id (WeChat Pay transaction_id): one deposit per id
	RenterID  string
	Currency  string
	Amount    decimal.Decimal
	// NotificationKey is the notification's replay key (WeChat Pay: the
	// Wechatpay-Nonce header); "" when the rail has none.
	NotificationKey string
	// NotificationDigest is a digest of the notification's content, for a
	// rail that resends a notification under its replay key (Alipay): the
	// key applied before with the same digest is that resend; "" when the
	// rail signs each retry anew (the key again is then a replay).
	NotificationDigest string
	// Refunded is the payment's refunded total the rail notified (Alipay's
	// refund_fee), zero when none; RefundedAt is when, as the rail said.
	Refunded   decimal.Decimal
	RefundedAt string
	// RefundID is the rail's id of one refund, for a rail that notifies
	// each refund on its own with that refund's amount (WeChat Pay's
	// refund_id): Refunded is then that refund's amount, added to the
	// payment's refunded total once per id, and RefundDigest a digest of
	// the refund's content (the id notified again with the same digest is
	// the rail's retry; with another, ErrReplay). "" for a rail that
	// notifies the refunded total (Alipay).
	RefundID     string
	RefundDigest string
}

// ExternalRef is the ledger deposit's external reference (its idempotency
// key): rail:payment_id.
func (t TopUp) ExternalRef() string { return t.Rail + ":" + t.PaymentID }

// Deposits is the ledger's deposit path: Dr bank:client, Cr
// renter:{id}:wallet, idempotent on the external reference. It returns the
// ledger transaction's id; a refusal no retry can fix wraps
// ErrDepositRefused.
type Deposits interface {
	Deposit(ctx context.Context, renterID, currency string, amount decimal.Decimal, externalRef string) (string, error)
}

// NotificationStore keeps the notifications applied and the top-ups.
type NotificationStore interface {
	// NotificationSeen reports whether a replay key was applied before,
	// and the content digest it was applied with ("" if none).
	NotificationSeen(ctx context.Context, rail, key string) (seen bool, digest string, err error)
	// RecordNotification keeps a replay key as applied (with
	// t.NotificationDigest), in one transaction with the top-up and its
	// refund when t is not nil. A key recorded meanwhile wraps ErrReplay.
	RecordNotification(ctx context.Context, rail, key, kind, reference string, t *TopUp, ledgerTx string, at time.Time) (Recorded, error)
}

// Recorded is what RecordNotification kept new.
type Recorded struct {
	Fresh bool // the payment's first notification
	// Refund: a refunded total above every one recorded before for the
	// payment (a refund id not recorded before, when the rail notifies
	// each refund).
	Refund bool
	// RefundedBefore is the highest refunded total recorded before (when
	// Refund): what finance took back already, if it acted on each page;
	// RefundedTotal the payment's refunded total recorded now.
	RefundedBefore, RefundedTotal decimal.Decimal
}

// TopUps turns confirmed rail payments into ledger deposits, exactly once
// per payment id, and refuses a notification applied before.
type TopUps struct {
	Ledger Deposits
	Store  NotificationStore
	Clock  clock.Clock
	Log    *slog.Logger
}

// Apply deposits a confirmed payment: NotifyAccepted the first time,
// NotifyDuplicate when the payment was deposited before (the ledger's
// idempotency answers the original deposit; nothing moves twice). A
// notification key seen before is ErrReplay, unless its content digest is
// the one applied: the rail's own resend (its "success" lost), a
// duplicate, or the rail resends it for a day. The deposit goes first and
// the key is recorded after it, so a failure between the two leaves the key
// free for the rail's retry, which the ledger answers with the same deposit.
//
// A payment notified with a refunded total (made in the rail's merchant
// console: gpubill has no refund route) is deposited as paid and the
// refund recorded, NotifyRefunded the first time that total is notified,
// logged as an error: the wallet still holds what the renter got back,
// and finance takes it back by hand (the notification was acknowledged as
// a duplicate or a moneyless one, and the renter kept the credit). A rail
// that notifies each refund on its own (t.RefundID) is NotifyRefunded the
// first time that refund is notified, NotifyDuplicate on its retry, and
// NotifyReplay for its id with other content.
func (a *TopUps) Apply(ctx context.Context, t TopUp) (string, error) {
	if t.NotificationKey != "" {
		seen, digest, err := a.Store.NotificationSeen(ctx, t.Rail, t.NotificationKey)
		if err != nil {
			return NotifyFailed, err
		}
		if seen && t.NotificationDigest != "" && digest == t.NotificationDigest {
			return NotifyDuplicate, nil
		}
		if seen {
			return NotifyReplay, fmt.Errorf("%s notification %s: %w", t.Rail, t.NotificationKey, ErrReplay)
		}
	}
	txID, err := a.Ledger.Deposit(ctx, t.RenterID, t.Currency, t.Amount, t.ExternalRef())
	if err != nil {
		if errors.Is(err, ErrDepositRefused) {
			return NotifyRejected, err
		}
		return NotifyFailed, err
	}
	rec, err := a.Store.RecordNotification(ctx, t.Rail, t.NotificationKey, NotifyKindTopUp, t.PaymentID, &t, txID, a.Clock.Now())
	if err != nil {
		if errors.Is(err, ErrReplay) {
			return NotifyReplay, err
		}
		return NotifyFailed, err
	}
	if rec.Fresh {
		a.Log.Info("renter top-up deposited", "rail", t.Rail, "payment_id", t.PaymentID, "renter_id", t.RenterID,
			"amount", t.Amount.String(), "currency", t.Currency, "ledger_transaction_id", txID)
	}
	if rec.Refund {
		attrs := []any{"rail", t.Rail, "payment_id", t.PaymentID, "renter_id", t.RenterID, "amount", t.Amount.String(),
			"refunded_total", rec.RefundedTotal.String(), "refunded_since_last", rec.RefundedTotal.Sub(rec.RefundedBefore).String(),
			"refunded_at", t.RefundedAt, "currency", t.Currency, "external_ref", t.ExternalRef(), "ledger_transaction_id", txID}
		if t.RefundID != "" {
			attrs = append(attrs, "refund_id", t.RefundID)
		}
		a.Log.Error("renter top-up refunded at the rail: the wallet still holds refunded_since_last; take it back by a finance entry (or reverse the deposit when it is the whole amount)",
			attrs...)
		return NotifyRefunded, nil
	}
	if !rec.Fresh {
		return NotifyDuplicate, nil
	}
	return NotifyAccepted, nil
}

// PayoutNotified records a rail's verified notification about a payout
// reference (its replay key), so the same notification again is ErrReplay;
// the caller then wakes the payout, which queries the rail (the
// notification itself is never trusted for the status).
func (a *TopUps) PayoutNotified(ctx context.Context, rail, key, reference string) (string, error) {
	if key == "" {
		return NotifyAccepted, nil
	}
	if _, err := a.Store.RecordNotification(ctx, rail, key, NotifyKindPayout, reference, nil, "", a.Clock.Now()); err != nil {
		if errors.Is(err, ErrReplay) {
			return NotifyReplay, err
		}
		return NotifyFailed, err
	}
	return NotifyAccepted, nil
}
