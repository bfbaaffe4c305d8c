package payoutstack_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/alipay"
	"github.com/gpubill/gpubill/pkg/alipay/fakealipay"
	"github.com/gpubill/gpubill/pkg/auth"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout"
)

const alipayAppID = "2021000000000001"

// alipayStack is the stack with payouts to Alipay accounts on the Alipay
// rail, against a fake open platform that knows the app's public key; the
// app's key pair and the platform's are generated here, never stored.
func alipayStack(t *testing.T) (*stack, *fakealipay.Gateway) {
	t.Helper()
	cfg, g := alipayConfig(t)
	return alipayStackOn(t, "", cfg), g
}

// alipayConfig is the payout configuration of alipayStack and its fake
// open platform.
func alipayConfig(t *testing.T) (payout.Config, *fakealipay.Gateway) {
	t.Helper()
	appKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	g, err := fakealipay.New(alipayAppID, &appKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return payout.Config{AlipayOn: true, Alipay: alipay.Config{AppID: alipayAppID, PrivateKey: appKey,
		PlatformKey: &g.PlatformKey.PublicKey, GatewayURL: g.URL, SellerID: g.SellerID,
		NotifyURL: "http://127.0.0.1:1/v1/rails/alipay/notify"}}, g // the stack's address is known once it listens
}

// alipayStackOn is a stack with cfg (alipayConfig) on the database at dsn
// ("": a fresh one).
func alipayStackOn(t *testing.T, dsn string, cfg payout.Config) *stack {
	t.Helper()
	st := newStackOn(t, dsn, cfg)
	st.s.TestHooks().AlipayClient().Cfg.NotifyURL = "http://" + st.http + "/v1/rails/alipay/notify"
	return st
}

// alipaySetup gives a provider verified KYC and an Alipay account.
func (st *stack) alipaySetup(t *testing.T, provider, alipayID, name string) {
	t.Helper()
	if _, err := st.s.API().PutKyc(fin, &payoutv1.PutKycRequest{ProviderId: provider, Status: "verified", Reference: "kyc-" + provider}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.s.API().PutPayoutMethod(as(auth.RoleProvider, provider), &payoutv1.PutPayoutMethodRequest{ProviderId: provider,
		Type: "alipay", AlipayId: alipayID, AccountName: name}); err != nil {
		t.Fatal(err)
	}
}

// topUp is the answer of POST /v1/renters/{id}/top-ups.
type topUp struct {
	TopUpID  string `json:"top_up_id"`
	RenterID string `json:"renter_id"`
	Rail     string `json:"rail"`
	Amount   string `json:"amount"`
	PayURL   string `json:"pay_url"`
}

// renterPost posts body to path as renter sub.
func (st *stack) renterPost(t *testing.T, sub, path, body string) (int, string) {
	t.Helper()
	tok, err := auth.Issue(st.secret, auth.RoleRenter, sub, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+st.http+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// openTopUp opens a renter's top-up through the REST API, as the renter;
// the same idempotency key answers the same order.
func (st *stack) openTopUp(t *testing.T, renter, body string) topUp {
	t.Helper()
	var got [2]topUp
	for i := range got {
		code, resp := st.renterPost(t, renter, "/v1/renters/"+renter+"/top-ups", body)
		if err := json.Unmarshal([]byte(resp), &got[i]); code != http.StatusOK || err != nil {
			t.Fatalf("POST top-ups: %d %s %v", code, resp, err)
		}
	}
	if got[0].TopUpID == "" || got[0].TopUpID != got[1].TopUpID || got[0].RenterID != renter || got[0].Rail != "alipay" ||
		!strings.HasPrefix(got[0].PayURL, "http") {
		t.Fatalf("top-up answers %+v", got)
	}
	return got[0]
}

// notifications reads gpubill_rail_notifications_total for Alipay top-ups
// by outcome from the default registry.
func notifications(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "gpubill_rail_notifications_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["rail"] == "alipay" && l["kind"] == "topup" {
				out[l["outcome"]] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// Payouts and a top-up through the Alipay rail end to end, against the
// fake open platform, with the real ledger and Temporal: a user id paid at
// once, a frozen account refused (failed, account_frozen, money back to
// available), a logon id (with the holder's name) processing then paid,
// and one whose answer is lost after the platform booked it — queried by
// out_biz_no and found paid, with exactly one transfer at the platform.
// Then a renter's page-pay order paid: its notification is one deposit;
// the same notification again (Alipay's resend) and TRADE_FINISHED for the
// same trade are duplicates, its notify_id with other content and forged
// ones are refused, refunds are recorded and counted refunded; each
// counted.
// Every provider account, the wallet and bank:client exact after each step.
func TestAlipayRailEndToEnd(t *testing.T) {
	t.Parallel()
	st, g := alipayStack(t)
	ctx := context.Background()
	const cyc = "cyc-20260101"
	st.alipaySetup(t, "pa-paid", "2088123412340001", "")
	st.alipaySetup(t, "pa-frozen", "2088123412340002", "")
	st.alipaySetup(t, "pa-dealing", "payee0005@example.com", "Wang Fang")
	for _, s := range []struct{ p, net string }{{"pa-paid", "620.00"}, {"pa-frozen", "300.00"}, {"pa-dealing", "150.00"}} {
		st.settle(t, s.p, cyc, "CNY", s.net)
	}
	paid := st.waitStatus(t, "pa-paid", cyc, "paid", waitLong)
	frozen := st.waitStatus(t, "pa-frozen", cyc, "failed", waitLong)
	dealing := st.waitStatus(t, "pa-dealing", cyc, "paid", waitLong)
	if frozen.FailureCode != "account_frozen" || !strings.HasPrefix(frozen.FailureMessage, "PAYEE_ACCOUNT_STATUS_ERROR") {
		t.Errorf("pa-frozen: %s %q", frozen.FailureCode, frozen.FailureMessage)
	}
	if h := history(dealing); !strings.Contains(h, "submitted>in_transit>paid") {
		t.Errorf("pa-dealing history %s, want it in transit before paid", h)
	}
	if n := paid.StatusHistory[1].Note; !strings.Contains(n, "submitted to alipay as "+paid.PayoutId) {
		t.Errorf("pa-paid submitted note %q", n)
	}
	for _, tc := range []struct {
		p      *payoutv1.Payout
		amount string
		idType string
	}{{paid, "620.00", alipay.IdentityUserID}, {frozen, "300.00", alipay.IdentityUserID}, {dealing, "150.00", alipay.IdentityLogonID}} {
		calls, o := g.Transfers(tc.p.PayoutId)
		if calls != 1 || o == nil || o.Amount != tc.amount || o.IdentityType != tc.idType {
			t.Errorf("%s at the platform: %d transfer calls, order %+v", tc.p.ProviderId, calls, o)
		}
	}
	paidOut := decimal.RequireFromString("770.00")
	st.checkStep(t, "payouts", map[string]ledgerWant{"pa-paid": {"0", "0"}, "pa-frozen": {"300.00", "0"}, "pa-dealing": {"0", "0"}}, paidOut)

	// The platform books the next transfer and the answer is lost: the
	// workflow queries out_biz_no before submitting again and finds it paid.
	g.LoseAnswers(1)
	st.alipaySetup(t, "pa-lost", "2088123412340011", "")
	st.settle(t, "pa-lost", cyc, "CNY", "410.00")
	lost := st.waitStatus(t, "pa-lost", cyc, "paid", waitLong)
	if calls, o := g.Transfers(lost.PayoutId); calls != 1 || o == nil || o.Queries == 0 {
		t.Errorf("pa-lost at the platform: %d transfer calls (want 1), order %+v (want queried)", calls, o)
	}
	paidOut = paidOut.Add(decimal.RequireFromString("410.00"))
	st.checkStep(t, "lost answer", map[string]ledgerWant{"pa-lost": {"0", "0"}, "pa-frozen": {"300.00", "0"}}, paidOut)
	st.checkFunds(t, "CNY", paidOut)

	// A renter tops up 100.00 on Alipay's payment page.
	const renter = "r-alipay"
	wallet := "renter:" + renter + ":wallet"
	before := notifications(t)
	top := st.openTopUp(t, renter, `{"rail":"alipay","amount":"100.00","currency":"CNY","idempotency_key":"k-1"}`)
	outTradeNo := top.TopUpID
	n, err := g.Pay(top.PayURL)
	if err != nil || n.Err != nil || n.Answer != alipay.AnswerSuccess {
		t.Fatalf("payment notification: %v %v answered %q", err, n.Err, n.Answer)
	}
	for _, tc := range []struct {
		name, sub, path, body string
		want                  int
		wantIn                string
	}{
		{"another renter's", "r-other", "/v1/renters/" + renter + "/top-ups", `{"rail":"alipay","amount":"1.00","currency":"CNY","idempotency_key":"k"}`, http.StatusForbidden, ""},
		{"a rail not configured", renter, "/v1/renters/" + renter + "/top-ups", `{"rail":"wechat","amount":"1.00","currency":"CNY","idempotency_key":"k"}`, http.StatusBadRequest, `"rail"`},
		{"not CNY", renter, "/v1/renters/" + renter + "/top-ups", `{"rail":"alipay","amount":"1.00","currency":"USD","idempotency_key":"k"}`, http.StatusBadRequest, `"currency"`},
		{"no key", renter, "/v1/renters/" + renter + "/top-ups", `{"rail":"alipay","amount":"1.00","currency":"CNY"}`, http.StatusBadRequest, `"idempotency_key"`},
		{"nothing to pay", renter, "/v1/renters/" + renter + "/top-ups", `{"rail":"alipay","amount":"0","currency":"CNY","idempotency_key":"k"}`, http.StatusBadRequest, `"amount"`},
	} {
		if code, body := st.renterPost(t, tc.sub, tc.path, tc.body); code != tc.want || !strings.Contains(body, tc.wantIn) {
			t.Errorf("top-up %s: %d %s, want %d naming %s", tc.name, code, body, tc.want, tc.wantIn)
		}
	}
	st.mu.Lock()
	st.deposits["CNY"] = st.deposits["CNY"].Add(decimal.RequireFromString("100.00"))
	st.mu.Unlock()
	checkWallet := func(step string) {
		t.Helper()
		if got := st.balance(t, wallet, "CNY"); !got.Equal(decimal.RequireFromString("100.00")) {
			t.Errorf("%s: %s %s, want 100.00", step, wallet, got)
		}
		st.checkStep(t, step, map[string]ledgerWant{"pa-frozen": {"300.00", "0"}}, paidOut)
	}
	checkWallet("top-up")

	notifyURL := st.s.TestHooks().AlipayClient().Cfg.NotifyURL
	// The same notification again (same notify_id and signature), as
	// Alipay sends it when its "success" was lost: a duplicate,
	// acknowledged (it was refused, and Alipay kept sending it for a day).
	if again := g.Resend(n, notifyURL); again.Answer != alipay.AnswerSuccess {
		t.Errorf("the notification sent again answered %q %v, want success", again.Answer, again.Err)
	}
	// Its notify_id with other content (signed): refused.
	changed := copyForm(n.Form)
	changed.Set("total_amount", "99.00")
	if err := g.SignNotification(changed); err != nil {
		t.Fatal(err)
	}
	if f := g.Send(notifyURL, changed); f.Answer != alipay.AnswerFail {
		t.Errorf("the notify_id again with another amount answered %q", f.Answer)
	}
	// TRADE_FINISHED for the same trade (a new notify_id): a duplicate, acknowledged.
	if fin, err := g.Notify(outTradeNo, alipay.TradeFinished); err != nil || fin.Answer != alipay.AnswerSuccess {
		t.Errorf("TRADE_FINISHED answered %q %v %v", fin.Answer, err, fin.Err)
	}
	// Forged: the amount raised under the platform's signature of the
	// original, and a new trade signed by a key that is not the platform's.
	raised := url.Values{}
	for k, v := range n.Form {
		raised[k] = append([]string(nil), v...)
	}
	raised.Set("total_amount", "1000.00")
	raised.Set("notify_id", "forged-1")
	if f := g.Send(st.s.TestHooks().AlipayClient().Cfg.NotifyURL, raised); f.Answer != alipay.AnswerFail {
		t.Errorf("notification with a raised amount answered %q", f.Answer)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forged := url.Values{}
	for k, v := range n.Form {
		forged[k] = append([]string(nil), v...)
	}
	forged.Set("trade_no", "2026120122001499999999999999")
	forged.Set("notify_id", "forged-2")
	forged.Del("sign")
	sig, err := alipay.Sign(other, []byte(alipay.SignContent(forged, "sign", "sign_type")))
	if err != nil {
		t.Fatal(err)
	}
	forged.Set("sign", sig)
	if f := g.Send(st.s.TestHooks().AlipayClient().Cfg.NotifyURL, forged); f.Answer != alipay.AnswerFail {
		t.Errorf("notification signed by another key answered %q", f.Answer)
	}
	checkWallet("replay, duplicate, forged")

	// Finance refunds 30.00 of the trade in Alipay's merchant console:
	// Alipay notifies TRADE_SUCCESS with the refund (a new notify_id), then
	// refunds the rest and notifies TRADE_CLOSED. Each is recorded and
	// counted refunded (it was a duplicate, then ignored, and nobody knew
	// the renter kept the wallet credit); the same refund notified again is
	// a duplicate. The deposit stays: finance reverses it.
	refund := func(status, fee, notifyID string) string {
		t.Helper()
		f := copyForm(n.Form)
		f.Set("trade_status", status)
		f.Set("refund_fee", fee)
		f.Set("gmt_refund", time.Now().In(alipay.Beijing).Format(alipay.TimeLayout)+".123")
		f.Set("notify_id", notifyID)
		f.Set("notify_time", time.Now().In(alipay.Beijing).Format(alipay.TimeLayout))
		if err := g.SignNotification(f); err != nil {
			t.Fatal(err)
		}
		return g.Send(notifyURL, f).Answer
	}
	for _, tc := range []struct{ status, fee, notifyID string }{
		{alipay.TradeSuccess, "30.00", "refund-1"},
		{alipay.TradeSuccess, "30.00", "refund-1-again"},
		{alipay.TradeClosed, "100.00", "refund-2"},
	} {
		if got := refund(tc.status, tc.fee, tc.notifyID); got != alipay.AnswerSuccess {
			t.Errorf("refund %s %s answered %q", tc.status, tc.fee, got)
		}
	}
	var refunds string
	if err := st.d.Pool.QueryRow(ctx, `select string_agg(refunded_total::numeric(20, 2)::text || ' ' || notification_key, ',' order by refunded_total)
		from payout.rail_refunds where rail = 'alipay' and payment_id = $1`, n.Form.Get("trade_no")).Scan(&refunds); err != nil || refunds != "30.00 refund-1,100.00 refund-2" {
		t.Errorf("refunds recorded %q (%v), want 30.00 and 100.00", refunds, err)
	}
	checkWallet("refunds")

	// One deposit, under the trade's number.
	txs, err := st.ledger.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{Account: wallet})
	if err != nil {
		t.Fatal(err)
	}
	if len(txs.Transactions) != 1 || txs.Transactions[0].Metadata["external_ref"] != "alipay:"+n.Form.Get("trade_no") {
		t.Errorf("wallet transactions: %v", txs.Transactions)
	}
	after := notifications(t)
	for outcome, want := range map[string]float64{"accepted": 1, "replay": 1, "duplicate": 3, "forged": 2, "refunded": 2, "ignored": 0} {
		if got := after[outcome] - before[outcome]; got != want {
			t.Errorf("gpubill_rail_notifications_total{rail=alipay,kind=topup,outcome=%s} +%v, want +%v", outcome, got, want)
		}
	}
	st.checkFunds(t, "CNY", paidOut)
	if r := g.Refused(); len(r) != 0 {
		t.Errorf("the platform refused requests: %v", r)
	}
}

// copyForm copies a notification's form.
func copyForm(f url.Values) url.Values {
	c := url.Values{}
	for k, v := range f {
		c[k] = append([]string(nil), v...)
	}
	return c
}
