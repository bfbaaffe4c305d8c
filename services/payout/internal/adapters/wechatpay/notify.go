package wechatpay

import (
	"context"
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
//     without notifications the workflow's polls find it too).
//
// The replay key is the Wechatpay-Nonce: the same notification sent again
// as it was is refused, while WeChat Pay's own retry (signed anew) of a
// payment already deposited is a duplicate. It answers 200
// {"code":"SUCCESS"} for applied, duplicate and ignored ones; 400
// {"code":"FAIL"} for refused ones — forged, stale, replayed, malformed,
// another merchant's; 500 {"code":"FAIL"} when it cannot apply now
// (WeChat Pay sends it again). Each is logged and counted.
type Notifications struct {
	C      *wp.Client
	TopUps *app.TopUps
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
	case app.NotifyAccepted, app.NotifyDuplicate, outcomeIgnored:
		if outcome != app.NotifyAccepted {
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
	}
	return kind, outcomeIgnored, attrs, nil
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
