package alipay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/shopspring/decimal"

	ap "github.com/gpubill/gpubill/pkg/alipay"
	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// NotifyPath is the payout service's route Alipay posts payment
// notifications to (GPUBILL_ALIPAY_NOTIFY_URL is its public address).
const NotifyPath = "/v1/rails/alipay/notify"

// Notification freshness: Alipay's retries end about 25 hours after the
// payment, so a notification older than notifyAgeMax (by its signed
// notify_time) is a replay of an old one; one from the future beyond
// notifySkewMax is refused too.
const (
	notifyAgeMax  = 48 * time.Hour
	notifySkewMax = 15 * time.Minute
)

// outcomeIgnored: a verified notification of a state that moves no money
// (WAIT_BUYER_PAY, TRADE_CLOSED unpaid), acknowledged.
const outcomeIgnored = "ignored"

// digestSkip: the fields a notification's content digest leaves out.
// Alipay's resend of a notification keeps its notify_id and its content;
// its send time (and so its signature) is assumed to change.
var digestSkip = []string{"sign", "sign_type", "notify_time"}

// Notifications serves Alipay's asynchronous payment notifications
// (form-encoded POST to NotifyPath): a verified TRADE_SUCCESS or
// TRADE_FINISHED becomes a deposit to the renter named by passback_params,
// once per trade_no (app.TopUps). One carrying a refund_fee (a refund made
// in the merchant console: partial on TRADE_SUCCESS, full on TRADE_CLOSED)
// is recorded and counted refunded, once per refunded total, for finance
// to take back. It answers "success" for an applied one, a refund, a
// duplicate (the same trade notified again under another notify_id, e.g.
// TRADE_FINISHED after TRADE_SUCCESS, or Alipay's resend of one applied:
// its notify_id with the same content) and a moneyless one
// (WAIT_BUYER_PAY, TRADE_CLOSED unpaid); "fail" for anything refused —
// forged, another app's, stale, a notify_id applied before with other
// content (replay), malformed — or not applied now (Alipay sends it
// again). Each is logged and counted.
type Notifications struct {
	C      *ap.Client
	TopUps *app.TopUps
	Count  func(rail, kind, outcome string)
	Clock  clock.Clock
	Log    *slog.Logger
}

func (n *Notifications) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	outcome, attrs, err := n.handle(r)
	if n.Count != nil {
		n.Count(Name, app.NotifyKindTopUp, outcome)
	}
	attrs = append([]any{"rail", Name, "outcome", outcome, "remote", r.RemoteAddr}, attrs...)
	answer := ap.AnswerFail
	switch outcome {
	case app.NotifyAccepted, app.NotifyDuplicate, app.NotifyRefunded, outcomeIgnored:
		// A refund is logged as an error by app.TopUps, once.
		answer = ap.AnswerSuccess
		if outcome != app.NotifyAccepted && outcome != app.NotifyRefunded {
			n.Log.Info("Alipay notification acknowledged", attrs...)
		}
	default:
		n.Log.Warn("Alipay notification refused", append(attrs, "err", errText(err))...)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(answer))
}

// yuanRE is an amount as Alipay writes one: yuan, at most two decimals
// (decimal.NewFromString also takes "1e1" and "-5").
var yuanRE = regexp.MustCompile(`^[0-9]{1,12}(\.[0-9]{1,2})?$`)

// yuan reads an amount field of a notification.
func yuan(s string) (decimal.Decimal, bool) {
	if !yuanRE.MatchString(s) {
		return decimal.Zero, false
	}
	d, err := decimal.NewFromString(s)
	return d, err == nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (n *Notifications) handle(r *http.Request) (string, []any, error) {
	if err := r.ParseForm(); err != nil {
		return app.NotifyMalformed, nil, fmt.Errorf("not a form: %w", err)
	}
	form := r.PostForm
	attrs := []any{"notify_id", form.Get("notify_id"), "out_trade_no", form.Get("out_trade_no"), "trade_no", form.Get("trade_no"),
		"trade_status", form.Get("trade_status"), "total_amount", form.Get("total_amount"), "refund_fee", form.Get("refund_fee")}
	if form.Get("sign") == "" && form.Get("sign_type") == "" {
		// Not Alipay's (a scanner, a probe): forged would page as if
		// Alipay's key had changed (GpubillTopUpNotificationsRefused).
		return app.NotifyMalformed, attrs, errors.New("unsigned: no sign or sign_type")
	}
	if err := n.C.VerifyNotification(form); err != nil {
		if errors.Is(err, ap.ErrBadSignature) {
			return app.NotifyForged, attrs, err
		}
		return app.NotifyMalformed, attrs, err
	}
	at, err := time.ParseInLocation(ap.TimeLayout, form.Get("notify_time"), ap.Beijing)
	if err != nil {
		return app.NotifyMalformed, attrs, fmt.Errorf("notify_time %q: %w", form.Get("notify_time"), err)
	}
	if now := n.Clock.Now(); at.Before(now.Add(-notifyAgeMax)) || at.After(now.Add(notifySkewMax)) {
		return app.NotifyStale, attrs, fmt.Errorf("notify_time %s is not within %s of now", form.Get("notify_time"), notifyAgeMax)
	}
	refunded := decimal.Zero
	if fee := form.Get("refund_fee"); fee != "" {
		var ok bool
		if refunded, ok = yuan(fee); !ok {
			return app.NotifyMalformed, attrs, fmt.Errorf("refund_fee %q: want an amount in yuan", fee)
		}
	}
	switch form.Get("trade_status") {
	case ap.TradeSuccess, ap.TradeFinished:
	case ap.TradeClosed:
		// Closed unpaid, or paid and then refunded in full: only the
		// latter carries a refund_fee (it was ignored, and the renter kept
		// the wallet credit).
		if !refunded.IsPositive() {
			return outcomeIgnored, attrs, nil
		}
	case ap.TradeWaitBuyer:
		return outcomeIgnored, attrs, nil
	default:
		return app.NotifyMalformed, attrs, fmt.Errorf("trade_status %q", form.Get("trade_status"))
	}
	amount, ok := yuan(form.Get("total_amount"))
	if !ok || !amount.IsPositive() {
		return app.NotifyMalformed, attrs, fmt.Errorf("total_amount %q: want a positive amount in yuan", form.Get("total_amount"))
	}
	if refunded.GreaterThan(amount) {
		return app.NotifyMalformed, attrs, fmt.Errorf("refund_fee %s is more than total_amount %s", refunded, amount)
	}
	renter, err := url.QueryUnescape(form.Get("passback_params"))
	if err == nil {
		err = ids.CheckPartyID(renter)
	}
	if err != nil {
		return app.NotifyRejected, attrs, fmt.Errorf("trade %s: passback_params %q is no renter id: %w", form.Get("trade_no"), form.Get("passback_params"), err)
	}
	attrs = append(attrs, "renter_id", renter)
	digest := sha256.Sum256([]byte(ap.SignContent(form, digestSkip...)))
	out, err := n.TopUps.Apply(r.Context(), app.TopUp{Rail: Name, PaymentID: form.Get("trade_no"), RenterID: renter, Currency: ap.Currency,
		Amount: amount, NotificationKey: form.Get("notify_id"), NotificationDigest: hex.EncodeToString(digest[:]),
		Refunded: refunded, RefundedAt: form.Get("gmt_refund")})
	return out, attrs, err
}

// Checkout is Alipay as a top-up rail: the renter pays a computer-website
// payment order (alipay.trade.page.pay) whose notification comes back to
// NotifyPath.
type Checkout struct {
	C *ap.Client
}

var _ app.Checkout = Checkout{}

// CheckOrder implements app.Checkout: Alipay takes yuan, at most
// ap.PagePayAmountMax an order.
func (ch Checkout) CheckOrder(currency string, amount decimal.Decimal) error {
	if currency != ap.Currency {
		return apperr.Invalid("currency", "Alipay top-ups are in %s, not %s", ap.Currency, currency)
	}
	if amount.GreaterThan(ap.PagePayAmountMax) {
		return apperr.Invalid("amount", "Alipay takes at most %s %s an order", ap.PagePayAmountMax.StringFixed(2), ap.Currency)
	}
	return nil
}

// OrderTimeout implements app.Checkout.
func (ch Checkout) OrderTimeout() time.Duration { return ap.PagePayTimeout }

// Order implements app.Checkout: the signed page-pay URL on the gateway.
func (ch Checkout) Order(_ context.Context, renterID string, amount decimal.Decimal, currency, orderID string, opened time.Time) (string, time.Time, error) {
	if err := ch.CheckOrder(currency, amount); err != nil {
		return "", time.Time{}, err
	}
	u, _, err := ch.C.PagePayURL(renterID, amount, orderID)
	if err != nil {
		return "", time.Time{}, err
	}
	return u, opened.Add(ch.OrderTimeout()), nil
}
