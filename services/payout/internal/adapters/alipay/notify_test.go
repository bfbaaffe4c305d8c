package alipay_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	ap "github.com/gpubill/gpubill/pkg/alipay"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/alipay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// deposits is a ledger that remembers deposits by external reference.
type deposits struct{ byRef map[string]string }

func (d *deposits) Deposit(_ context.Context, renter, currency string, amount decimal.Decimal, ref string) (string, error) {
	d.byRef[ref] = renter + " " + amount.StringFixed(2) + " " + currency
	return "tx-" + ref, nil
}

// seen is a notification store in memory: digests by key, payments and
// refunded totals recorded.
type seen struct {
	keys              map[string]string
	payments, refunds map[string]bool
}

func (s *seen) NotificationSeen(_ context.Context, rail, key string) (bool, string, error) {
	d, ok := s.keys[rail+key]
	return ok, d, nil
}
func (s *seen) RecordNotification(_ context.Context, rail, key, _, _ string, t *app.TopUp, _ string, _ time.Time) (app.Recorded, error) {
	if key != "" {
		s.keys[rail+key] = t.NotificationDigest
	}
	rec := app.Recorded{Fresh: !s.payments[t.ExternalRef()]}
	s.payments[t.ExternalRef()] = true
	if t.Refunded.IsPositive() {
		rec.Refund = !s.refunds[t.ExternalRef()+t.Refunded.String()]
		s.refunds[t.ExternalRef()+t.Refunded.String()] = true
	}
	return rec, nil
}

// The notification route's answers: success only for an applied, a
// duplicate (also Alipay's resend of the applied one), a refund or a
// moneyless notification; fail for a stale one, one naming no renter, an
// unknown trade status, a refund over the total, a form that is not one,
// the applied notify_id with other content; each counted under its
// outcome, and only the applied one deposits. A refund (TRADE_SUCCESS or
// TRADE_CLOSED with refund_fee) was ignored or a duplicate: the renter
// kept the credit, and nobody knew.
func TestNotificationAnswers(t *testing.T) {
	t.Parallel()
	g, rail, _ := gateway(t)
	c := rail.C
	dep := &deposits{byRef: map[string]string{}}
	counted := map[string]int{}
	var last string
	n := &alipay.Notifications{C: c, TopUps: &app.TopUps{Ledger: dep, Store: &seen{keys: map[string]string{}, payments: map[string]bool{}, refunds: map[string]bool{}},
		Clock: clock.System{}, Log: slog.New(slog.DiscardHandler)}, Count: func(_, _, o string) { counted[o]++; last = o },
		Clock: clock.System{}, Log: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(n)
	t.Cleanup(srv.Close)
	c.Cfg.NotifyURL = srv.URL
	payURL, outTradeNo, err := c.PagePayURL("r-1", decimal.RequireFromString("88.50"), "")
	if err != nil {
		t.Fatal(err)
	}
	paid, err := g.Pay(payURL)
	if err != nil || paid.Answer != ap.AnswerSuccess {
		t.Fatalf("payment: %v %q", err, paid.Answer)
	}
	resigned := func(f func(url.Values)) url.Values {
		v := url.Values{}
		for k, x := range paid.Form {
			v[k] = append([]string(nil), x...)
		}
		v.Set("notify_id", "n-"+strings.ReplaceAll(t.Name(), "/", "-")+v.Get("notify_id")[:4])
		f(v)
		if err := g.SignNotification(v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	old := time.Now().Add(-49 * time.Hour).In(ap.Beijing).Format(ap.TimeLayout)
	refund := func(status, fee, id string) func(url.Values) {
		return func(v url.Values) {
			v.Set("trade_status", status)
			v.Set("refund_fee", fee)
			v.Set("gmt_refund", time.Now().In(ap.Beijing).Format(ap.TimeLayout)+".320")
			v.Set("notify_id", id)
		}
	}
	changed := resigned(func(v url.Values) { v.Set("notify_id", paid.Form.Get("notify_id")); v.Set("total_amount", "8.85") })
	for _, tc := range []struct {
		name    string
		give    url.Values
		want    string
		outcome string
	}{
		{"stale", resigned(func(v url.Values) { v.Set("notify_time", old); v.Set("notify_id", "stale") }), ap.AnswerFail, "stale"},
		{"no renter", resigned(func(v url.Values) { v.Set("passback_params", "r 1!"); v.Set("notify_id", "badrenter") }), ap.AnswerFail, "rejected"},
		{"unknown status", resigned(func(v url.Values) { v.Set("trade_status", "TRADE_PENDING"); v.Set("notify_id", "badstatus") }), ap.AnswerFail, "malformed"},
		{"amount in fen", resigned(func(v url.Values) { v.Set("total_amount", "88.505"); v.Set("notify_id", "fen") }), ap.AnswerFail, "malformed"},
		{"closed unpaid", resigned(func(v url.Values) { v.Set("trade_status", ap.TradeClosed); v.Set("notify_id", "closed") }), ap.AnswerSuccess, "ignored"},
		{"refunded in part", resigned(refund(ap.TradeSuccess, "20.00", "refund1")), ap.AnswerSuccess, "refunded"},
		{"the part again", resigned(refund(ap.TradeFinished, "20.00", "refund1b")), ap.AnswerSuccess, "duplicate"},
		{"refunded in full", resigned(refund(ap.TradeClosed, "88.50", "refund2")), ap.AnswerSuccess, "refunded"},
		{"refund over the total", resigned(refund(ap.TradeClosed, "88.51", "refund3")), ap.AnswerFail, "malformed"},
		{"refund not an amount", resigned(refund(ap.TradeSuccess, "1e1", "refund4")), ap.AnswerFail, "malformed"},
		{"resent by Alipay", paid.Form, ap.AnswerSuccess, "duplicate"},
		{"its notify_id with other content", changed, ap.AnswerFail, "replay"},
		// A scanner's POST carries no signature at all: malformed, not
		// forged (forged pages, GpubillTopUpNotificationsRefused).
		{"unsigned", url.Values{"hello": {"world"}}, ap.AnswerFail, "malformed"},
		{"signed badly", func() url.Values {
			v := resigned(func(v url.Values) { v.Set("notify_id", "bad") })
			v.Set("sign", "AAAA")
			return v
		}(), ap.AnswerFail, "forged"},
	} {
		if got := g.Send(srv.URL, tc.give); got.Answer != tc.want || last != tc.outcome {
			t.Errorf("%s: answered %q (%s), want %q (%s)", tc.name, got.Answer, last, tc.want, tc.outcome)
		}
	}
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"trade_no":"1"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != ap.AnswerFail {
		t.Errorf("a JSON body answered %q", body)
	}
	if fin, err := g.Notify(outTradeNo, ap.TradeFinished); err != nil || fin.Answer != ap.AnswerSuccess {
		t.Errorf("TRADE_FINISHED: %v %q", err, fin.Answer)
	}
	// The JSON body and the scanner's form carry no signature: malformed;
	// only the form signed badly is forged.
	want := map[string]int{"accepted": 1, "duplicate": 3, "stale": 1, "rejected": 1, "malformed": 6, "forged": 1, "ignored": 1, "refunded": 2, "replay": 1}
	for o, w := range want {
		if counted[o] != w {
			t.Errorf("outcome %s counted %d, want %d (all: %v)", o, counted[o], w, counted)
		}
	}
	if len(dep.byRef) != 1 || dep.byRef["alipay:"+paid.Form.Get("trade_no")] != "r-1 88.50 CNY" {
		t.Errorf("deposits %v", dep.byRef)
	}
}
