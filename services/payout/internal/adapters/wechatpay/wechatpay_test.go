package wechatpay_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	wp "github.com/gpubill/gpubill/pkg/wechatpay"
	"github.com/gpubill/gpubill/pkg/wechatpay/fakewechatpay"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/wechatpay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

const (
	mchID  = "1900000109"
	appID  = "wxd678efh567hg6787"
	serial = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"
)

var apiV3Key = []byte("0123456789abcdefghijklmnopqrstuv")

func key(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func platform(t *testing.T) (*fakewechatpay.Platform, *wechatpay.Rail) {
	t.Helper()
	mk := key(t)
	p, err := fakewechatpay.New(mchID, appID, &mk.PublicKey, serial, apiV3Key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	cfg := wp.Config{MchID: mchID, AppID: appID, MerchantKey: mk, MerchantSerial: serial, PlatformKey: &p.Key.PublicKey, PlatformSerial: p.Serial,
		APIv3Key: apiV3Key, BaseURL: p.URL}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	return p, &wechatpay.Rail{C: &wp.Client{Cfg: cfg, Clock: clock.System{}}, Log: slog.New(slog.DiscardHandler)}
}

const ref0 = "po_019ad6a1-7c2b-7f00-8e3a-0123456789a"

func transfer(n int, openid, name, amount string) app.Transfer {
	return app.Transfer{Reference: ref0 + string(rune('0'+n)), ProviderID: "p", Currency: "CNY", Amount: decimal.RequireFromString(amount),
		Method: domain.Method{Type: domain.MethodWechat, WechatOpenID: openid, AccountName: name}}
}

// Each fate of a transfer as the rail reports it.
func TestRailOutcomes(t *testing.T) {
	t.Parallel()
	p, rail := platform(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		tr       app.Transfer
		before   func()
		state    string
		failure  string
		queryNow string
	}{
		{"paid", transfer(1, "oUpF8uMuAJO_M2pxb1Q9zNjW0001", "", "620.00"), nil, app.RailAccepted, "", app.RailPaid},
		{"frozen", transfer(2, "oUpF8uMuAJO_M2pxb1Q9zNjW0002", "", "300.00"), nil, app.RailAccepted, "", app.RailFailed},
		{"invalid openid", transfer(3, "oUpF8uMuAJO_M2pxb1Q9zNjW0004", "", "1.00"), nil, app.RailAccepted, "", app.RailFailed},
		{"processing", transfer(4, "oUpF8uMuAJO_M2pxb1Q9zNjW0005", "", "150.00"), nil, app.RailAccepted, "", app.RailInTransit},
		{"balance short", transfer(5, "oUpF8uMuAJO_M2pxb1Q9zNjW0001", "", "10.00"), func() { p.RejectNext(403, "NOT_ENOUGH", "资金不足") },
			app.RailFailed, domain.FailInsufficientFunds, ""},
		{"not CNY", app.Transfer{Reference: ref0 + "6", Currency: "USD", Amount: decimal.RequireFromString("1"), Method: domain.Method{Type: domain.MethodWechat, WechatOpenID: "oUpF8uMuAJO_M2pxb1Q9zNjW0001"}},
			nil, app.RailFailed, domain.FailUnsupported, ""},
		{"2000 yuan without a name", transfer(7, "oUpF8uMuAJO_M2pxb1Q9zNjW0001", "", "2000.00"), nil, app.RailFailed, domain.FailNameMismatch, ""},
		{"2000 yuan with a name", transfer(8, "oUpF8uMuAJO_M2pxb1Q9zNjW0001", "王芳", "2000.00"), nil, app.RailAccepted, "", app.RailPaid},
	} {
		if tc.before != nil {
			tc.before()
		}
		st, err := rail.Submit(ctx, tc.tr)
		if err != nil || st.State != tc.state || st.FailureCode != tc.failure {
			t.Errorf("%s: submit %+v %v, want %s %s", tc.name, st, err, tc.state, tc.failure)
			continue
		}
		if tc.queryNow == "" {
			continue
		}
		q, err := rail.Query(ctx, tc.tr.Reference)
		if err != nil || q.State != tc.queryNow {
			t.Errorf("%s: query %+v %v, want %s", tc.name, q, err, tc.queryNow)
		}
	}
	q, err := rail.Query(ctx, ref0+"2")
	if err != nil || q.FailureCode != domain.FailAccountFrozen || !strings.HasPrefix(q.Message, "ACCOUNT_FROZEN") {
		t.Errorf("frozen: %+v %v", q, err)
	}
	if q, err := rail.Query(ctx, ref0+"3"); err != nil || q.FailureCode != domain.FailInvalidAccount {
		t.Errorf("invalid openid: %+v %v", q, err)
	}
	if q, err := rail.Query(ctx, ref0+"4"); err != nil || q.State != app.RailPaid || q.Currency != "CNY" || !q.Amount.Equal(decimal.RequireFromString("150.00")) {
		t.Errorf("processing, queried again: %+v %v, want paid, 150.00 CNY (transfer_amount 15000 fen)", q, err)
	}
	if no, err := wp.OutBillNo(ref0 + "8"); err != nil {
		t.Fatal(err)
	} else if _, b := p.Transfers(no); b == nil || b.UserName != "王芳" || b.TransferAmount != 200000 {
		t.Errorf("2000 yuan at the platform: %+v", b)
	}
	// Unknown outcomes are never failures: a SYSTEM_ERROR, a lost answer.
	p.RejectNext(500, "SYSTEM_ERROR", "系统繁忙")
	if st, err := rail.Submit(ctx, transfer(9, "oUpF8uMuAJO_M2pxb1Q9zNjW0001", "", "5.00")); !errors.Is(err, app.ErrRailUnavailable) || st.State != "" {
		t.Errorf("SYSTEM_ERROR: %+v %v", st, err)
	}
	if _, err := rail.Query(ctx, ref0+"9"); !errors.Is(err, app.ErrUnknownReference) {
		t.Errorf("after SYSTEM_ERROR nothing was booked: %v", err)
	}
	p.LoseAnswers(1)
	lost := transfer(9, "oUpF8uMuAJO_M2pxb1Q9zNjW0001", "", "5.00")
	if _, err := rail.Submit(ctx, lost); !errors.Is(err, app.ErrRailUnavailable) {
		t.Errorf("lost answer: %v", err)
	}
	if q, err := rail.Query(ctx, lost.Reference); err != nil || q.State != app.RailPaid {
		t.Errorf("lost answer, queried: %+v %v", q, err)
	}
	// The same reference with another amount: refused, not failed.
	other := lost
	other.Amount = decimal.RequireFromString("6.00")
	if st, err := rail.Submit(ctx, other); err == nil || errors.Is(err, app.ErrRailUnavailable) || st.State != "" {
		t.Errorf("another amount under the same out_bill_no: %+v %v", st, err)
	}
	if _, err := rail.Query(ctx, "bank-ref-with-dash"); !errors.Is(err, app.ErrUnknownReference) {
		t.Errorf("a reference that is no out_bill_no: %v", err)
	}
}

// deposits is a ledger that remembers deposits by external reference.
type deposits struct {
	mu    sync.Mutex
	byRef map[string]string
}

func (d *deposits) Deposit(_ context.Context, renter, currency string, amount decimal.Decimal, ref string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.byRef[ref] = renter + " " + amount.StringFixed(2) + " " + currency
	return "tx-" + ref, nil
}

// seen is a notification store in memory.
type seen struct {
	mu             sync.Mutex
	keys, payments map[string]bool
}

func (s *seen) NotificationSeen(_ context.Context, rail, key string) (bool, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[rail+key], "", nil
}

func (s *seen) RecordNotification(_ context.Context, rail, key, _, _ string, t *app.TopUp, _ string, _ time.Time) (app.Recorded, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key != "" {
		if s.keys[rail+key] {
			return app.Recorded{}, app.ErrReplay
		}
		s.keys[rail+key] = true
	}
	if t == nil {
		return app.Recorded{Fresh: true}, nil
	}
	fresh := !s.payments[t.ExternalRef()]
	s.payments[t.ExternalRef()] = true
	return app.Recorded{Fresh: fresh}, nil
}

// The notification route's answers: 200 SUCCESS for an applied, a
// duplicate (WeChat Pay's retry, signed anew) or a moneyless one; 400 FAIL
// for a replay, a forgery, a stale one, another merchant's and one naming
// no renter; each counted, only the applied one deposits; a transfer's
// notification wakes its payout's reference.
func TestNotificationAnswers(t *testing.T) {
	t.Parallel()
	p, rail := platform(t)
	c := rail.C
	dep := &deposits{byRef: map[string]string{}}
	var mu sync.Mutex
	counted := map[string]int{}
	var woken []string
	n := &wechatpay.Notifications{C: c, TopUps: &app.TopUps{Ledger: dep, Store: &seen{keys: map[string]bool{}, payments: map[string]bool{}},
		Clock: clock.System{}, Log: slog.New(slog.DiscardHandler)},
		Notify: func(ref string) { mu.Lock(); woken = append(woken, ref); mu.Unlock() },
		Count:  func(_, kind, o string) { mu.Lock(); counted[kind+"/"+o]++; mu.Unlock() },
		Clock:  clock.System{}, Log: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(n)
	t.Cleanup(srv.Close)
	c.Cfg.NotifyURL = srv.URL + wechatpay.NotifyPath
	ctx := context.Background()
	code, _, err := (wechatpay.Checkout{C: c}).Order(ctx, "r-1", decimal.RequireFromString("100.00"), "CNY", "tu0123456789", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := (wechatpay.Checkout{C: c}).Order(ctx, "r-1", decimal.RequireFromString("50.00"), "CNY", "tu0123456789", time.Now()); !errors.Is(err, apperr.ErrConflict) {
		t.Errorf("the order number again with another amount: %v, want a conflict", err)
	}
	if _, _, err := (wechatpay.Checkout{C: c}).Order(ctx, "r-1", decimal.RequireFromString("50.00"), "USD", "tu0123456788", time.Now()); !errors.As(err, new(*apperr.InvalidError)) {
		t.Errorf("USD: %v", err)
	}
	paid, err := p.Pay(code)
	if err != nil || paid.Status != http.StatusOK || !strings.Contains(paid.Answer, `"SUCCESS"`) {
		t.Fatalf("payment notification: %v %+v", err, paid)
	}
	// WeChat Pay's refusals of an order are the client's to see, naming
	// the code (they were a 500): the order again once paid (ORDERPAID), a
	// time_expire past (PARAM_ERROR); an amount too large for fen is a 400
	// naming amount before anything is sent.
	ch := wechatpay.Checkout{C: c, Log: slog.New(slog.DiscardHandler)}
	if _, _, err := ch.Order(ctx, "r-1", decimal.RequireFromString("100.00"), "CNY", "tu0123456789", time.Now()); !errors.Is(err, apperr.ErrConflict) ||
		!strings.Contains(err.Error(), "ORDERPAID") {
		t.Errorf("the paid order again: %v, want a conflict naming ORDERPAID", err)
	}
	if _, _, err := ch.Order(ctx, "r-1", decimal.RequireFromString("100.00"), "CNY", "tu0123456787", time.Now().Add(-3*time.Hour)); !errors.Is(err, apperr.ErrPrecondition) ||
		!strings.Contains(err.Error(), "PARAM_ERROR") {
		t.Errorf("a time_expire past: %v, want a failed precondition naming PARAM_ERROR", err)
	}
	// gpubill's own signature refused (a wrong merchant serial): not the
	// renter's to act on, so no code is passed on: unavailable, logged.
	bad := &wp.Client{Cfg: c.Cfg, Clock: clock.System{}}
	bad.Cfg.MerchantSerial = "0000000000000000"
	if _, _, err := (wechatpay.Checkout{C: bad, Log: slog.New(slog.DiscardHandler)}).Order(ctx, "r-1", decimal.RequireFromString("100.00"), "CNY",
		"tu0123456786", time.Now()); !errors.Is(err, apperr.ErrUnavailable) || strings.Contains(err.Error(), "SIGN_ERROR") {
		t.Errorf("gpubill's signature refused: %v, want unavailable, no code", err)
	}
	// Likewise the merchant's own permissions (NO_AUTH, a 403 as ORDERPAID
	// is): it was a 400 handing the renter WeChat Pay's code.
	p.RejectNext(http.StatusForbidden, wp.CodeNoAuth, "the merchant has no permission for Native payments")
	if _, _, err := ch.Order(ctx, "r-1", decimal.RequireFromString("100.00"), "CNY", "tu0123456785", time.Now()); !errors.Is(err, apperr.ErrUnavailable) ||
		strings.Contains(err.Error(), wp.CodeNoAuth) {
		t.Errorf("NO_AUTH: %v, want unavailable, no code", err)
	}
	var inv *apperr.InvalidError
	if err := ch.CheckOrder("CNY", decimal.RequireFromString("100000000000000")); !errors.As(err, &inv) || !strings.Contains(err.Error(), "amount") {
		t.Errorf("an amount too large for fen: %v, want invalid naming amount", err)
	}
	retry, err := p.Renotify("tu0123456789", "")
	if err != nil || !retry.Accepted() {
		t.Errorf("WeChat Pay's retry (a new nonce): %v %+v", err, retry)
	}
	if again := p.Resend(paid); again.Status != http.StatusBadRequest || !strings.Contains(again.Answer, `"FAIL"`) {
		t.Errorf("replay: %+v", again)
	}
	forged, err := fakewechatpay.SignHeadersWith(key(t), p.Serial, time.Now(), paid.Body)
	if err != nil {
		t.Fatal(err)
	}
	if f := p.Send(paid.URL, forged, paid.Body); f.Status != http.StatusBadRequest {
		t.Errorf("forged: %+v", f)
	}
	stale, err := fakewechatpay.SignHeadersWith(p.Key, p.Serial, time.Now().Add(-6*time.Minute), paid.Body)
	if err != nil {
		t.Fatal(err)
	}
	if f := p.Send(paid.URL, stale, paid.Body); f.Status != http.StatusBadRequest {
		t.Errorf("stale: %+v", f)
	}
	// Verified but not applicable: another merchant's, no renter, not paid, garbage.
	for name, tc := range map[string]struct {
		event string
		res   map[string]any
		want  int
	}{
		"another merchant": {wp.EventTransactionSuccess, map[string]any{"mchid": "1900000999", "appid": appID, "out_trade_no": "tu9", "transaction_id": "42001",
			"trade_state": "SUCCESS", "attach": "r-1", "amount": map[string]any{"total": 100, "currency": "CNY"}}, http.StatusBadRequest},
		"no renter": {wp.EventTransactionSuccess, map[string]any{"mchid": mchID, "appid": appID, "out_trade_no": "tu9", "transaction_id": "42002",
			"trade_state": "SUCCESS", "attach": "r:1", "amount": map[string]any{"total": 100, "currency": "CNY"}}, http.StatusBadRequest},
		"not paid": {wp.EventTransactionSuccess, map[string]any{"mchid": mchID, "appid": appID, "out_trade_no": "tu9", "transaction_id": "42003",
			"trade_state": "CLOSED", "attach": "r-1", "amount": map[string]any{"total": 100, "currency": "CNY"}}, http.StatusOK},
		"a refund without its fields": {wp.EventRefundSuccess, map[string]any{"mchid": mchID}, http.StatusBadRequest},
		"a bill not ours":             {wp.EventTransferFinished, map[string]any{"mch_id": mchID, "out_bill_no": "Pzzz", "state": "SUCCESS"}, http.StatusBadRequest},
	} {
		body, err := p.Envelope("EV-"+name, tc.event, "transaction", "", tc.res)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := p.Post(paid.URL, body); err != nil || got.Status != tc.want {
			t.Errorf("%s: %+v %v, want %d", name, got, err, tc.want)
		}
	}
	if got := p.Send(paid.URL, http.Header{}, []byte("not json")); got.Status != http.StatusBadRequest {
		t.Errorf("unsigned garbage: %+v", got)
	}
	if got, err := p.Post(paid.URL, []byte(`{"id":"EV-x","event_type":"TRANSACTION.SUCCESS"}`)); err != nil || got.Status != http.StatusBadRequest {
		t.Errorf("signed, no resource: %+v %v", got, err)
	}
	// A transfer's notification wakes its payout (the platform's own
	// notification of this bill is not asked for: no notify_url).
	c.Cfg.NotifyURL = ""
	st, err := rail.Submit(ctx, transfer(1, "oUpF8uMuAJO_M2pxb1Q9zNjW0001", "", "1.00"))
	if err != nil || st.State != app.RailAccepted {
		t.Fatal(st, err)
	}
	no, err := wp.OutBillNo(ref0 + "1")
	if err != nil {
		t.Fatal(err)
	}
	bill, err := c.QueryTransfer(ctx, no)
	if err != nil {
		t.Fatal(err)
	}
	body, err := p.Envelope("EV-bill", wp.EventTransferFinished, "mch_payment", "", bill)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Post(paid.URL, body); err != nil || !got.Accepted() {
		t.Errorf("transfer notification: %+v %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(woken) != 1 || woken[0] != ref0+"1" {
		t.Errorf("woken %v", woken)
	}
	if len(dep.byRef) != 1 || dep.byRef["wechatpay:"+transactionOf(t, p, "tu0123456789")] != "r-1 100.00 CNY" {
		t.Errorf("deposits %v", dep.byRef)
	}
	// The unsigned garbage is malformed, not forged: forged pages as if
	// WeChat Pay's platform key had changed (GpubillTopUpNotificationsRefused).
	for k, want := range map[string]int{"topup/accepted": 1, "topup/duplicate": 1, "topup/replay": 1, "topup/forged": 1, "topup/stale": 1,
		"topup/rejected": 2, "topup/ignored": 1, "topup/malformed": 3, "payout/rejected": 1, "payout/accepted": 1} {
		if counted[k] != want {
			t.Errorf("counted %s = %d, want %d (all: %v)", k, counted[k], want, counted)
		}
	}
}

func transactionOf(t *testing.T, p *fakewechatpay.Platform, outTradeNo string) string {
	t.Helper()
	id, ok := p.TransactionID(outTradeNo)
	if !ok {
		t.Fatalf("no transaction for %s", outTradeNo)
	}
	return id
}
