package alipay

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// NotifyPath is the payout service's route Alipay posts payment
// notifications to (GPUBILL_ALIPAY_NOTIFY_URL is its public address).
const NotifyPath = "/v1/rails/alipay/notify"

// Answers to a notification: Alipay stops sending on "success" and sends
// again (for about 25 hours: 4 m, 10 m, 10 m, 1 h, 2 h, 6 h, 15 h) on
// anything else.
const (
	AnswerSuccess = "success"
	AnswerFail    = "fail"
)

// Trade statuses of a payment notification.
const (
	TradeSuccess   = "TRADE_SUCCESS"  // paid, refundable
	TradeFinished  = "TRADE_FINISHED" // paid, no longer refundable (notified again when the refund period ends)
	TradeWaitBuyer = "WAIT_BUYER_PAY"
	TradeClosed    = "TRADE_CLOSED"
)

// Notification freshness: Alipay's retries end about 25 hours after the
// payment, so a notification older than notifyAgeMax (by its signed
// notify_time) is a replay of an old one; one from the future beyond
// notifySkewMax is refused too.
const (
	notifyAgeMax  = 48 * time.Hour
	notifySkewMax = 15 * time.Minute
	topUpSubject  = "gpubill wallet top-up"
	// pagePayTimeout: an unpaid top-up order closes on the platform after this.
	pagePayTimeout = "2h"
)

// notifyFields are required in every payment notification.
var notifyFields = []string{"notify_id", "notify_time", "app_id", "out_trade_no", "trade_no", "trade_status", "total_amount", "passback_params"}

// outcomeIgnored: a verified notification of a state that moves no money
// (WAIT_BUYER_PAY, TRADE_CLOSED), acknowledged.
const outcomeIgnored = "ignored"

// PagePayBiz is biz_content of alipay.trade.page.pay.
type PagePayBiz struct {
	OutTradeNo     string `json:"out_trade_no"`
	TotalAmount    string `json:"total_amount"`
	Subject        string `json:"subject"`
	ProductCode    string `json:"product_code"`
	TimeoutExpress string `json:"timeout_express,omitempty"`
	// PassbackParams comes back in the payment notification as it was
	// sent (URL-encoded): the renter id the top-up is for. Only a request
	// signed with the app's key makes an order, so it is as trustworthy as
	// the notification's signature.
	PassbackParams string `json:"passback_params"`
}

// PagePayURL is a renter's top-up order on Alipay's computer-website
// payment page: the signed alipay.trade.page.pay request as a URL on the
// gateway, for the renter's browser; its payment notification posts the
// deposit to the renter's wallet. outTradeNo is the merchant's order
// number ("" : a new one).
func (c *Client) PagePayURL(renterID string, amount decimal.Decimal, outTradeNo string) (string, string, error) {
	if err := ids.CheckPartyID(renterID); err != nil {
		return "", "", fmt.Errorf("alipay top-up: renter %q: %w", renterID, err)
	}
	if !amount.IsPositive() || amount.Exponent() < -2 {
		return "", "", fmt.Errorf("alipay top-up: amount %s: want a positive amount in yuan", amount)
	}
	if c.Cfg.NotifyURL == "" {
		return "", "", errors.New("alipay top-up: GPUBILL_ALIPAY_NOTIFY_URL is not set: Alipay could not tell gpubill of the payment")
	}
	if outTradeNo == "" {
		outTradeNo = "tu" + strings.ReplaceAll(ids.New(""), "-", "")
	}
	v, err := c.RequestParams(MethodPagePay, PagePayBiz{OutTradeNo: outTradeNo, TotalAmount: amount.StringFixed(2), Subject: topUpSubject,
		ProductCode: ProductPagePay, TimeoutExpress: pagePayTimeout, PassbackParams: url.QueryEscape(renterID)},
		map[string]string{"notify_url": c.Cfg.NotifyURL})
	if err != nil {
		return "", "", err
	}
	return c.Cfg.gateway() + "?" + v.Encode(), outTradeNo, nil
}

var errInvalidNotice = errors.New("invalid notification")

// VerifyNotification checks a payment notification came from the platform
// for this app: sign_type RSA2, signed (over every field but sign and
// sign_type) by the platform's key, the required fields present, app_id
// ours, seller_id ours when configured. ErrBadSignature when forged.
func (c *Client) VerifyNotification(form url.Values) error {
	if form.Get("sign_type") != SignType {
		return fmt.Errorf("sign_type %q, want %s: %w", form.Get("sign_type"), SignType, ErrBadSignature)
	}
	if err := Verify(c.Cfg.PlatformKey, []byte(SignContent(form, "sign", "sign_type")), form.Get("sign")); err != nil {
		return err
	}
	for _, f := range notifyFields {
		if form.Get(f) == "" {
			return fmt.Errorf("%s missing: %w", f, errInvalidNotice)
		}
	}
	if form.Get("app_id") != c.Cfg.AppID {
		return fmt.Errorf("app_id %q is not this app: %w", form.Get("app_id"), errInvalidNotice)
	}
	if c.Cfg.SellerID != "" && form.Get("seller_id") != c.Cfg.SellerID {
		return fmt.Errorf("seller_id %q is not this merchant: %w", form.Get("seller_id"), errInvalidNotice)
	}
	return nil
}

// Notifications serves Alipay's asynchronous payment notifications
// (form-encoded POST to NotifyPath): a verified TRADE_SUCCESS or
// TRADE_FINISHED becomes a deposit to the renter named by passback_params,
// once per trade_no (app.TopUps). It answers "success" for an applied one,
// a duplicate (the same trade notified again under another notify_id, e.g.
// TRADE_FINISHED after TRADE_SUCCESS) and a moneyless one (WAIT_BUYER_PAY,
// TRADE_CLOSED); "fail" for anything refused — forged, another app's,
// stale, a notify_id applied before (replay), malformed — or not applied
// now (Alipay sends it again). Each is logged and counted.
type Notifications struct {
	C      *Client
	TopUps *app.TopUps
	Count  func(rail, kind, outcome string)
	Clock  clock.Clock
	Log    *slog.Logger
}

func (n *Notifications) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	outcome, err, attrs := n.handle(r)
	if n.Count != nil {
		n.Count(Name, app.NotifyKindTopUp, outcome)
	}
	attrs = append([]any{"rail", Name, "outcome", outcome, "remote", r.RemoteAddr}, attrs...)
	answer := AnswerFail
	switch outcome {
	case app.NotifyAccepted, app.NotifyDuplicate, outcomeIgnored:
		answer = AnswerSuccess
		if outcome != app.NotifyAccepted {
			n.Log.Info("Alipay notification acknowledged", attrs...)
		}
	default:
		n.Log.Warn("Alipay notification refused", append(attrs, "err", errText(err))...)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, answer)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (n *Notifications) handle(r *http.Request) (string, error, []any) {
	if err := r.ParseForm(); err != nil {
		return app.NotifyMalformed, fmt.Errorf("not a form: %w", err), nil
	}
	form := r.PostForm
	attrs := []any{"notify_id", form.Get("notify_id"), "out_trade_no", form.Get("out_trade_no"), "trade_no", form.Get("trade_no"),
		"trade_status", form.Get("trade_status"), "total_amount", form.Get("total_amount")}
	if err := n.C.VerifyNotification(form); err != nil {
		if errors.Is(err, ErrBadSignature) {
			return app.NotifyForged, err, attrs
		}
		return app.NotifyMalformed, err, attrs
	}
	at, err := time.ParseInLocation(TimeLayout, form.Get("notify_time"), Beijing)
	if err != nil {
		return app.NotifyMalformed, fmt.Errorf("notify_time %q: %w", form.Get("notify_time"), err), attrs
	}
	if now := n.Clock.Now(); at.Before(now.Add(-notifyAgeMax)) || at.After(now.Add(notifySkewMax)) {
		return app.NotifyStale, fmt.Errorf("notify_time %s is not within %s of now", form.Get("notify_time"), notifyAgeMax), attrs
	}
	switch form.Get("trade_status") {
	case TradeSuccess, TradeFinished:
	case TradeWaitBuyer, TradeClosed:
		return outcomeIgnored, nil, attrs
	default:
		return app.NotifyMalformed, fmt.Errorf("trade_status %q", form.Get("trade_status")), attrs
	}
	amount, err := decimal.NewFromString(form.Get("total_amount"))
	if err != nil || !amount.IsPositive() || amount.Exponent() < -2 {
		return app.NotifyMalformed, fmt.Errorf("total_amount %q: want a positive amount in yuan", form.Get("total_amount")), attrs
	}
	renter, err := url.QueryUnescape(form.Get("passback_params"))
	if err == nil {
		err = ids.CheckPartyID(renter)
	}
	if err != nil {
		return app.NotifyRejected, fmt.Errorf("trade %s: passback_params %q is no renter id: %w", form.Get("trade_no"), form.Get("passback_params"), err), attrs
	}
	attrs = append(attrs, "renter_id", renter)
	out, err := n.TopUps.Apply(r.Context(), app.TopUp{Rail: Name, PaymentID: form.Get("trade_no"), RenterID: renter, Currency: Currency,
		Amount: amount, NotificationKey: form.Get("notify_id")})
	return out, err, attrs
}
