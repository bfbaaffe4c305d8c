package wechatpay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/ids"
	wp "github.com/gpubill/gpubill/pkg/wechatpay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// NotifyPath is the payout service's route WeChat Pay posts notifications
// to (GPUBILL_WECHATPAY_NOTIFY_URL is its public address).
const NotifyPath = "/v1/rails/wechatpay/notify"

// outcomeIgnored: a verified notification that moves no money (another
// event type, a transaction not in SUCCESS), acknowledged.
const outcomeIgnored = "ignored"

const notifyBytesMax = 64 << 10

// Notifications serves WeChat Pay's notifications (JSON POST to
// NotifyPath), each verified by its Wechatpay-* signature headers with the
// platform key (and refused when older than 5 minutes) and its resource
// opened with the APIv3 key:
//   - TRANSACTION.SUCCESS becomes a deposit to the renter named by attach,
//     once per transaction_id (app.TopUps);
//   - MCHTRANSFER.BILL.FINISHED wakes the payout of its out_bill_no, which
//     queries the bill (the notification is never trusted for the status;
//     without notifications the workflow's polls find it too);
//   - REFUND.SUCCESS (a refund made in the merchant platform: gpubill has
//     none of its own) is recorded and counted refunded, once per
//     refund_id, for finance to take the refund's amount back from the
//     wallet (app.TopUps, as Alipay's refunds). It names no renter: the
//     renter is the one who opened its out_trade_no (Orders), and a
//     payment not deposited yet is deposited first, as its
//     TRANSACTION.SUCCESS would have been. REFUND.ABNORMAL and
//     REFUND.CLOSED moved no money back to the renter: acknowledged,
//     logged as a warning, not recorded.
//
// The replay key is the Wechatpay-Nonce: the same notification sent again
// as it was is refused, while WeChat Pay's own retry (signed anew) of a
// payment already deposited or a refund already recorded is a duplicate
// (a refund_id recorded with other content is refused as a replay). It
// answers 200 {"code":"SUCCESS"} for applied, refunded, duplicate and
// ignored ones; 400 {"code":"FAIL"} for refused ones — forged, stale,
// replayed, malformed, another merchant's, a refund of no top-up order
// gpubill opened; 500 {"code":"FAIL"} when it cannot apply now (WeChat Pay
// sends it again). Each is logged and counted.
type Notifications struct {
	C      *wp.Client
	TopUps *app.TopUps
	// Orders finds a refunded payment's renter by its out_trade_no.
	Orders app.TopUpOrderReader
	// Notify wakes the payout of a rail reference (ports.Workflows.RailNews).
	Notify app.Notifier
	Count  func(rail, kind, outcome string)
	Clock  clock.Clock
	Log    *slog.Logger
}

type answer struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (n *Notifications) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind, outcome, attrs, err := n.handle(r)
	if n.Count != nil {
		n.Count(Name, kind, outcome)
	}
	attrs = append([]any{"rail", Name, "kind", kind, "outcome", outcome, "remote", r.RemoteAddr}, attrs...)
	status, ans := http.StatusOK, answer{Code: "SUCCESS", Message: "成功"}
	switch outcome {
	case app.NotifyAccepted, app.NotifyDuplicate, app.NotifyRefunded, outcomeIgnored:
		// A refund is logged as an error by app.TopUps, once.
		if outcome != app.NotifyAccepted && outcome != app.NotifyRefunded {
			n.Log.Info("WeChat Pay notification acknowledged", attrs...)
		}
	case app.NotifyFailed:
		status, ans = http.StatusInternalServerError, answer{Code: "FAIL", Message: "not applied, send again"}
		n.Log.Error("WeChat Pay notification not applied", append(attrs, "err", errText(err))...)
	default:
		status, ans = http.StatusBadRequest, answer{Code: "FAIL", Message: "refused: " + outcome}
		n.Log.Warn("WeChat Pay notification refused", append(attrs, "err", errText(err))...)
	}
	b, merr := json.Marshal(ans)
	if merr != nil {
		http.Error(w, `{"code":"FAIL","message":"internal"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if _, err := w.Write(b); err != nil {
		n.Log.Warn("WeChat Pay notification answer not written", "err", err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (n *Notifications) handle(r *http.Request) (kind, outcome string, attrs []any, err error) {
	kind = app.NotifyKindTopUp
	body, err := io.ReadAll(io.LimitReader(r.Body, notifyBytesMax+1))
	if err != nil {
		return kind, app.NotifyMalformed, nil, fmt.Errorf("body: %w", err)
	}
	if len(body) > notifyBytesMax {
		return kind, app.NotifyMalformed, nil, fmt.Errorf("body over %d bytes", notifyBytesMax)
	}
	var peek struct {
		ID        string `json:"id"`
		EventType string `json:"event_type"`
	}
	if json.Unmarshal(body, &peek) == nil && strings.HasPrefix(peek.EventType, "MCHTRANSFER.") {
		kind = app.NotifyKindPayout // for the count only: nothing unverified decides anything else
	}
	key := r.Header.Get(wp.HeaderNonce)
	attrs = []any{"notification_id", peek.ID, "event_type", peek.EventType, "nonce", key}
	if r.Header.Get(wp.HeaderSignature) == "" && r.Header.Get(wp.HeaderSerial) == "" {
		// Not WeChat Pay's (a scanner, a probe): forged would page as if
		// its platform key had changed (GpubillTopUpNotificationsRefused).
		return kind, app.NotifyMalformed, attrs, errors.New("unsigned: no " + wp.HeaderSignature + " or " + wp.HeaderSerial)
	}
	env, pt, err := n.C.OpenNotification(r.Header, body)
	switch {
	case errors.Is(err, wp.ErrBadSignature):
		return kind, app.NotifyForged, attrs, err
	case errors.Is(err, wp.ErrStale):
		return kind, app.NotifyStale, attrs, err
	case err != nil:
		return kind, app.NotifyMalformed, attrs, err
	}
	switch env.EventType {
	case wp.EventTransactionSuccess:
		outcome, more, err := n.topUp(r.Context(), pt, key)
		return kind, outcome, append(attrs, more...), err
	case wp.EventTransferFinished:
		outcome, more, err := n.transfer(r.Context(), pt, key)
		return kind, outcome, append(attrs, more...), err
	case wp.EventRefundSuccess, wp.EventRefundAbnormal, wp.EventRefundClosed:
		outcome, more, err := n.refund(r.Context(), env.EventType, pt, key)
		return kind, outcome, append(attrs, more...), err
	}
	return kind, outcomeIgnored, attrs, nil
}

// refundStatus is each refund event's refund_status.
var refundStatus = map[string]string{wp.EventRefundSuccess: wp.RefundSuccess, wp.EventRefundAbnormal: wp.RefundAbnormal,
	wp.EventRefundClosed: wp.RefundClosed}

// refund records a refund of a renter's payment (REFUND.SUCCESS) under its
// refund_id: the payment is deposited (the ledger's idempotency answers
// the deposit its TRANSACTION.SUCCESS made, or makes it now to the renter
// who opened the order) and the refund's amount added to the payment's
// refunded total, for finance to take back.
func (n *Notifications) refund(ctx context.Context, event string, pt []byte, key string) (string, []any, error) {
	var rf wp.Refund
	if err := json.Unmarshal(pt, &rf); err != nil {
		return app.NotifyMalformed, nil, fmt.Errorf("refund: %w", err)
	}
	attrs := []any{"out_trade_no", rf.OutTradeNo, "transaction_id", rf.TransactionID, "out_refund_no", rf.OutRefundNo, "refund_id", rf.RefundID,
		"refund_status", rf.RefundStatus, "refund_fen", rf.Amount.Refund, "total_fen", rf.Amount.Total}
	switch {
	case rf.MchID != n.C.Cfg.MchID:
		return app.NotifyRejected, attrs, fmt.Errorf("refund of mchid %q: not this merchant", rf.MchID)
	case rf.RefundStatus != refundStatus[event]:
		return app.NotifyMalformed, attrs, fmt.Errorf("%s with refund_status %q", event, rf.RefundStatus)
	case event != wp.EventRefundSuccess:
		// Nothing went back to the payer: the wallet credit stands. Whoever
		// made the refund in the merchant platform sees it there (an
		// abnormal one waits for the merchant to send it elsewhere; its
		// REFUND.SUCCESS is recorded then).
		n.Log.Warn("WeChat Pay refund of a renter's top-up did not go through: nothing recorded", append([]any{"rail", Name, "event_type", event}, attrs...)...)
		return outcomeIgnored, attrs, nil
	case rf.TransactionID == "" || rf.OutTradeNo == "" || rf.RefundID == "":
		return app.NotifyMalformed, attrs, errors.New("refund without transaction_id, out_trade_no or refund_id")
	case rf.Amount.Refund <= 0 || rf.Amount.Total <= 0 || rf.Amount.Refund > rf.Amount.Total:
		return app.NotifyMalformed, attrs, fmt.Errorf("refund of %d fen of %d: want a positive amount in fen, at most the payment's", rf.Amount.Refund, rf.Amount.Total)
	}
	if n.Orders == nil {
		return app.NotifyFailed, attrs, errors.New("refund: no top-up orders to find its renter in (wiring)")
	}
	total := wp.Yuan(rf.Amount.Total)
	o, err := n.Orders.TopUpOrder(ctx, rf.OutTradeNo)
	if errors.Is(err, app.ErrUnknownTopUpOrder) {
		// A payment made before orders were kept (payout/0011) has no
		// order: its deposit names the renter.
		o, err = n.Orders.DepositedTopUp(ctx, Name, rf.TransactionID)
	}
	switch {
	case errors.Is(err, app.ErrUnknownTopUpOrder):
		return app.NotifyRejected, attrs, fmt.Errorf("refund %s: out_trade_no %s is no top-up order gpubill opened, and transaction %s no payment it deposited",
			rf.RefundID, rf.OutTradeNo, rf.TransactionID)
	case err != nil:
		return app.NotifyFailed, attrs, err
	case o.Rail != Name || o.Currency != wp.Currency || !o.Amount.Equal(total):
		return app.NotifyRejected, attrs, fmt.Errorf("refund %s: order %s was opened on %s for %s %s, the refunded payment is %s %s",
			rf.RefundID, o.ID, o.Rail, o.Amount, o.Currency, total, wp.Currency)
	}
	attrs = append(attrs, "renter_id", o.RenterID)
	// The digest of what the refund says, read (not the sealed bytes: its
	// retry is sealed anew, and the same fields may come in another order).
	content, err := json.Marshal(rf)
	if err != nil {
		return app.NotifyFailed, attrs, err
	}
	digest := sha256.Sum256(content)
	out, err := n.TopUps.Apply(ctx, app.TopUp{Rail: Name, PaymentID: rf.TransactionID, RenterID: o.RenterID, Currency: wp.Currency,
		Amount: total, NotificationKey: key, Refunded: wp.Yuan(rf.Amount.Refund), RefundedAt: rf.SuccessTime,
		RefundID: rf.RefundID, RefundDigest: hex.EncodeToString(digest[:])})
	return out, attrs, err
}

func (n *Notifications) topUp(ctx context.Context, pt []byte, key string) (string, []any, error) {
	var t wp.Transaction
	if err := json.Unmarshal(pt, &t); err != nil {
		return app.NotifyMalformed, nil, fmt.Errorf("transaction: %w", err)
	}
	attrs := []any{"out_trade_no", t.OutTradeNo, "transaction_id", t.TransactionID, "trade_state", t.TradeState, "total_fen", t.Amount.Total}
	switch {
	case t.MchID != n.C.Cfg.MchID || t.AppID != n.C.Cfg.AppID:
		return app.NotifyRejected, attrs, fmt.Errorf("transaction of mchid %q appid %q: not this merchant", t.MchID, t.AppID)
	case t.TradeState != wp.TradeSuccess:
		return outcomeIgnored, attrs, nil
	case t.TransactionID == "" || t.OutTradeNo == "":
		return app.NotifyMalformed, attrs, errors.New("transaction without transaction_id or out_trade_no")
	case t.Amount.Total <= 0 || t.Amount.Currency != wp.Currency:
		return app.NotifyMalformed, attrs, fmt.Errorf("amount %d %q: want a positive amount in fen of CNY", t.Amount.Total, t.Amount.Currency)
	}
	if err := ids.CheckPartyID(t.Attach); err != nil {
		return app.NotifyRejected, attrs, fmt.Errorf("transaction %s: attach %q is no renter id: %w", t.TransactionID, t.Attach, err)
	}
	attrs = append(attrs, "renter_id", t.Attach)
	out, err := n.TopUps.Apply(ctx, app.TopUp{Rail: Name, PaymentID: t.TransactionID, RenterID: t.Attach, Currency: wp.Currency,
		Amount: wp.Yuan(t.Amount.Total), NotificationKey: key})
	return out, attrs, err
}

func (n *Notifications) transfer(ctx context.Context, pt []byte, key string) (string, []any, error) {
	var b wp.TransferBill
	if err := json.Unmarshal(pt, &b); err != nil {
		return app.NotifyMalformed, nil, fmt.Errorf("transfer bill: %w", err)
	}
	attrs := []any{"out_bill_no", b.OutBillNo, "transfer_bill_no", b.TransferBillNo, "state", b.State}
	if b.MchID != n.C.Cfg.MchID {
		return app.NotifyRejected, attrs, fmt.Errorf("transfer bill of mch_id %q: not this merchant", b.MchID)
	}
	ref, err := wp.Reference(b.OutBillNo)
	if err != nil {
		return app.NotifyRejected, attrs, err
	}
	attrs = append(attrs, "reference", ref)
	out, err := n.TopUps.PayoutNotified(ctx, Name, key, ref)
	if err != nil {
		return out, attrs, err
	}
	if n.Notify != nil {
		n.Notify(ref)
	}
	return out, attrs, nil
}

// Checkout is WeChat Pay as a top-up rail: the renter scans a Native
// order's code (code_url, answered as pay_url) and pays in WeChat; the
// payment's notification comes back to NotifyPath.
type Checkout struct {
	C   *wp.Client
	Log *slog.Logger
}

// logRefusal records the platform's refusal of an order, whose message
// the client is not shown.
func (ch Checkout) logRefusal(msg, orderID string, err error) {
	log := ch.Log
	if log == nil {
		log = slog.Default()
	}
	log.Warn(msg, "order", orderID, "err", err)
}

var _ app.Checkout = Checkout{}

// CheckOrder implements app.Checkout: WeChat Pay takes yuan, as a whole
// number of fen.
func (ch Checkout) CheckOrder(currency string, amount decimal.Decimal) error {
	if currency != wp.Currency {
		return apperr.Invalid("currency", "WeChat Pay top-ups are in %s, not %s", wp.Currency, currency)
	}
	if _, err := wp.Fen(amount); err != nil {
		return apperr.Invalid("amount", "%s", err.Error())
	}
	return nil
}

// OrderTimeout implements app.Checkout.
func (ch Checkout) OrderTimeout() time.Duration { return wp.OrderTimeout }

// Order implements app.Checkout: the Native order's code_url.
func (ch Checkout) Order(ctx context.Context, renterID string, amount decimal.Decimal, currency, orderID string, opened time.Time) (string, time.Time, error) {
	if err := ch.CheckOrder(currency, amount); err != nil {
		return "", time.Time{}, err
	}
	// From when the key first opened the order: a retry a second later asked
	// for another time_expire, other content under the same out_trade_no.
	expires := opened.Add(wp.OrderTimeout).Truncate(time.Second)
	code, err := ch.C.NativeOrder(ctx, renterID, amount, orderID, expires)
	var refused *wp.APIError
	switch {
	case wp.IsCode(err, wp.CodeInvalidRequest):
		// The same out_trade_no with other content: the rail's answer is
		// logged, not passed to the client (its API path and message).
		ch.logRefusal("WeChat Pay refused a top-up order as other content under its number", orderID, err)
		return "", time.Time{}, fmt.Errorf("%w: WeChat Pay refused order %s as another order under its number", apperr.ErrConflict, orderID)
	case wp.IsCode(err, wp.CodeOrderPaid):
		return "", time.Time{}, fmt.Errorf("%w: WeChat Pay answered %s: order %s is paid (the wallet is credited from its notification)",
			apperr.ErrConflict, wp.CodeOrderPaid, orderID)
	case errors.Is(err, wp.ErrUnavailable):
		return "", time.Time{}, fmt.Errorf("%w: WeChat Pay: %w", apperr.ErrUnavailable, err)
	case errors.As(err, &refused) && (refused.Status == http.StatusUnauthorized ||
		slices.Contains([]string{wp.CodeSignError, wp.CodeNoAuth, wp.CodeAppIDMchIDMismatch, wp.CodeMchNotExists}, refused.Code)):
		// gpubill's own merchant key, serial, app id or permissions
		// refused: no order can be made until an operator fixes the
		// configuration, which is not the renter's to act on.
		log := ch.Log
		if log == nil {
			log = slog.Default()
		}
		log.Error("WeChat Pay refused gpubill's request signature: check the merchant key and its serial", "order", orderID, "err", err)
		return "", time.Time{}, fmt.Errorf("%w: WeChat Pay is not taking top-ups now", apperr.ErrUnavailable)
	case errors.As(err, &refused) && refused.Status >= 400 && refused.Status < 500:
		// ORDER_CLOSED, PARAM_ERROR, …: the client is told the code (it was
		// a 500), the message is logged.
		ch.logRefusal("WeChat Pay refused a top-up order", orderID, err)
		return "", time.Time{}, fmt.Errorf("%w: WeChat Pay refused order %s: %s", apperr.ErrPrecondition, orderID, refused.Code)
	case err != nil:
		return "", time.Time{}, err
	}
	return code, expires, nil
}
