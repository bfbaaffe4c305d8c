package payoutstack_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/pkg/wechatpay"
	"github.com/gpubill/gpubill/pkg/wechatpay/fakewechatpay"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout"
)

const (
	wechatMchID  = "1900000109"
	wechatAppID  = "wxd678efh567hg6787"
	wechatSerial = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"
	wechatNotify = "/v1/rails/wechatpay/notify"
)

// wechatStack is the stack with payouts to WeChat openids on the WeChat
// Pay rail, against a fake platform that knows the merchant's key; the
// merchant key, the platform's key and certificate and the APIv3 key are
// generated here, never stored.
func wechatStack(t *testing.T) (*stack, *fakewechatpay.Platform) {
	t.Helper()
	cfg, p := wechatConfig(t)
	return wechatStackOn(t, "", cfg), p
}

// wechatConfig is the payout configuration of wechatStack and its fake
// platform.
func wechatConfig(t *testing.T) (payout.Config, *fakewechatpay.Platform) {
	t.Helper()
	mk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	v3 := make([]byte, 16)
	if _, err := rand.Read(v3); err != nil {
		t.Fatal(err)
	}
	apiV3Key := hexOf(v3) // 32 characters, as the merchant platform sets it
	p, err := fakewechatpay.New(wechatMchID, wechatAppID, &mk.PublicKey, wechatSerial, apiV3Key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	pk, serial, err := wechatpay.ParsePlatformCert(p.Cert, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return payout.Config{WeChatPayOn: true, WeChatPay: wechatpay.Config{MchID: wechatMchID, AppID: wechatAppID, MerchantKey: mk,
		MerchantSerial: wechatSerial, PlatformKey: pk, PlatformSerial: serial, APIv3Key: apiV3Key, BaseURL: p.URL,
		NotifyURL: "http://127.0.0.1:1" + wechatNotify}}, p // the stack's address is known once it listens
}

// wechatStackOn is a stack with cfg (wechatConfig) on the database at dsn
// ("": a fresh one).
func wechatStackOn(t *testing.T, dsn string, cfg payout.Config) *stack {
	t.Helper()
	st := newStackOn(t, dsn, cfg)
	st.s.TestHooks().WeChatPayClient().Cfg.NotifyURL = "http://" + st.http + wechatNotify
	return st
}

func hexOf(b []byte) []byte {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return out
}

// wechatSetup gives a provider verified KYC and a WeChat openid.
func (st *stack) wechatSetup(t *testing.T, provider, openid string) {
	t.Helper()
	if _, err := st.s.API().PutKyc(fin, &payoutv1.PutKycRequest{ProviderId: provider, Status: "verified", Reference: "kyc-" + provider}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.s.API().PutPayoutMethod(as(auth.RoleProvider, provider), &payoutv1.PutPayoutMethodRequest{ProviderId: provider,
		Type: "wechat", WechatOpenid: openid}); err != nil {
		t.Fatal(err)
	}
}

// railNotifications reads gpubill_rail_notifications_total of a rail and
// kind by outcome from the default registry.
func railNotifications(t *testing.T, rail, kind string) map[string]float64 {
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
			if l["rail"] == rail && l["kind"] == kind {
				out[l["outcome"]] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// Payouts and a top-up through the WeChat Pay rail end to end, against the
// fake platform, with the real ledger and Temporal: an openid paid, a
// frozen account refused (failed, account_frozen, money back to
// available), one processing then paid, and one whose answer is lost
// after the platform booked the bill — queried by out_bill_no and found
// paid, with exactly one transfer at the platform; every transfer
// notification the platform sent acknowledged. Then a renter's Native
// order paid: its notification is one deposit; WeChat Pay's retry of it
// (signed anew) is a duplicate, the same notification again as it was (a
// replay) and forged ones are refused; each counted. Every provider
// account, the wallet and bank:client exact after each step.
func TestWeChatPayRailEndToEnd(t *testing.T) {
	t.Parallel()
	st, p := wechatStack(t)
	ctx := context.Background()
	const cyc = "cyc-20260101"
	p.Freeze("oUpF8uMuAJO_M2pxb1Q9zNjWfrz1")
	st.wechatSetup(t, "pw-paid", "oUpF8uMuAJO_M2pxb1Q9zNjW0001")
	st.wechatSetup(t, "pw-frozen", "oUpF8uMuAJO_M2pxb1Q9zNjWfrz1")
	st.wechatSetup(t, "pw-dealing", "oUpF8uMuAJO_M2pxb1Q9zNjW0005")
	for _, s := range []struct{ p, net string }{{"pw-paid", "620.00"}, {"pw-frozen", "300.00"}, {"pw-dealing", "150.00"}} {
		st.settle(t, s.p, cyc, "CNY", s.net)
	}
	paid := st.waitStatus(t, "pw-paid", cyc, "paid", waitLong)
	frozen := st.waitStatus(t, "pw-frozen", cyc, "failed", waitLong)
	dealing := st.waitStatus(t, "pw-dealing", cyc, "paid", waitLong)
	if frozen.FailureCode != "account_frozen" || !strings.HasPrefix(frozen.FailureMessage, "ACCOUNT_FROZEN") {
		t.Errorf("pw-frozen: %s %q", frozen.FailureCode, frozen.FailureMessage)
	}
	if h := history(dealing); !strings.Contains(h, "in_transit>paid") {
		t.Errorf("pw-dealing history %s, want it in transit before paid", h)
	}
	if n := paid.StatusHistory[1].Note; !strings.Contains(n, "submitted to wechatpay as "+paid.PayoutId) {
		t.Errorf("pw-paid submitted note %q", n)
	}
	for _, tc := range []struct {
		p   *payoutv1.Payout
		fen int64
	}{{paid, 62000}, {frozen, 30000}, {dealing, 15000}} {
		no, err := wechatpay.OutBillNo(tc.p.PayoutId)
		if err != nil {
			t.Fatal(err)
		}
		calls, b := p.Transfers(no)
		if calls != 1 || b == nil || b.TransferAmount != tc.fen || b.OpenID == "" {
			t.Errorf("%s at the platform: %d transfer calls, bill %+v", tc.p.ProviderId, calls, b)
		}
	}
	paidOut := decimal.RequireFromString("770.00")
	st.checkStep(t, "payouts", map[string]ledgerWant{"pw-paid": {"0", "0"}, "pw-frozen": {"300.00", "0"}, "pw-dealing": {"0", "0"}}, paidOut)

	// The platform books the next bill and the answer is lost: the
	// workflow queries out_bill_no before submitting again and finds it paid.
	p.LoseAnswers(1)
	st.wechatSetup(t, "pw-lost", "oUpF8uMuAJO_M2pxb1Q9zNjW0011")
	st.settle(t, "pw-lost", cyc, "CNY", "410.00")
	lost := st.waitStatus(t, "pw-lost", cyc, "paid", waitLong)
	lostNo, err := wechatpay.OutBillNo(lost.PayoutId)
	if err != nil {
		t.Fatal(err)
	}
	if calls, b := p.Transfers(lostNo); calls != 1 || b == nil || b.Queries == 0 {
		t.Errorf("pw-lost at the platform: %d transfer calls (want 1), bill %+v (want queried)", calls, b)
	}
	paidOut = paidOut.Add(decimal.RequireFromString("410.00"))
	st.checkStep(t, "lost answer", map[string]ledgerWant{"pw-lost": {"0", "0"}, "pw-frozen": {"300.00", "0"}}, paidOut)
	st.checkFunds(t, "CNY", paidOut)
	// The platform's transfer notifications (paid, frozen, lost) reached
	// the route and were acknowledged.
	testkit.Eventually(t, waitLong, func() bool {
		n := 0
		for _, x := range p.Notices() {
			if strings.Contains(string(x.Body), wechatpay.EventTransferFinished) && x.Accepted() {
				n++
			}
		}
		return n >= 3
	})

	// A renter tops up 100.00 with a Native order, through REST.
	const renter = "r-wechat"
	wallet := "renter:" + renter + ":wallet"
	before := railNotifications(t, "wechatpay", "topup")
	var top [2]topUp
	for i := range top {
		code, resp := st.renterPost(t, renter, "/v1/renters/"+renter+"/top-ups", `{"rail":"wechatpay","amount":"100.00","currency":"CNY","idempotency_key":"k-1"}`)
		if err := json.Unmarshal([]byte(resp), &top[i]); code != http.StatusOK || err != nil {
			t.Fatalf("POST top-ups: %d %s %v", code, resp, err)
		}
	}
	if top[0].TopUpID == "" || top[0] != top[1] || top[0].Rail != "wechatpay" || !strings.HasPrefix(top[0].PayURL, "weixin://wxpay/bizpayurl?pr=") {
		t.Fatalf("top-up answers %+v", top)
	}
	n, err := p.Pay(top[0].PayURL)
	if err != nil || !n.Accepted() {
		t.Fatalf("payment notification: %v %+v", err, n)
	}
	for _, tc := range []struct {
		name, sub, body string
		want            int
		wantIn          string
	}{
		{"another renter's", "r-other", `{"rail":"wechatpay","amount":"1.00","currency":"CNY","idempotency_key":"k"}`, http.StatusForbidden, ""},
		{"a rail not configured", renter, `{"rail":"alipay","amount":"1.00","currency":"CNY","idempotency_key":"k"}`, http.StatusBadRequest, `"rail"`},
		{"not CNY", renter, `{"rail":"wechatpay","amount":"1.00","currency":"USD","idempotency_key":"k"}`, http.StatusBadRequest, `"currency"`},
		{"nothing to pay", renter, `{"rail":"wechatpay","amount":"0","currency":"CNY","idempotency_key":"k"}`, http.StatusBadRequest, `"amount"`},
		{"the key again with another amount", renter, `{"rail":"wechatpay","amount":"50.00","currency":"CNY","idempotency_key":"k-1"}`, http.StatusConflict, ""},
	} {
		if code, body := st.renterPost(t, tc.sub, "/v1/renters/"+renter+"/top-ups", tc.body); code != tc.want || !strings.Contains(body, tc.wantIn) {
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
		st.checkStep(t, step, map[string]ledgerWant{"pw-frozen": {"300.00", "0"}}, paidOut)
	}
	checkWallet("top-up")

	// WeChat Pay's own retry (same notification id, signed anew): a duplicate, acknowledged.
	if dup, err := p.Renotify(top[0].TopUpID, ""); err != nil || !dup.Accepted() {
		t.Errorf("retried notification: %v %+v", err, dup)
	}
	// The same notification again as it was (same nonce and signature): a replay, refused.
	if again := p.Resend(n); again.Status != http.StatusBadRequest || !strings.Contains(again.Answer, `"FAIL"`) {
		t.Errorf("replayed notification answered %d %s", again.Status, again.Answer)
	}
	// Forged: the sealed resource changed under the platform's signature
	// of the original, and the original signed by a key that is not the platform's.
	var env map[string]any
	if err := json.Unmarshal(n.Body, &env); err != nil {
		t.Fatal(err)
	}
	res := env["resource"].(map[string]any)
	ct := res["ciphertext"].(string)
	res["ciphertext"] = "A" + ct[1:]
	changed, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if f := p.Send(n.URL, n.Header, changed); f.Status != http.StatusBadRequest {
		t.Errorf("notification with a changed resource answered %d %s", f.Status, f.Answer)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	fh, err := fakewechatpay.SignHeadersWith(other, p.Serial, time.Now(), n.Body)
	if err != nil {
		t.Fatal(err)
	}
	if f := p.Send(n.URL, fh, n.Body); f.Status != http.StatusBadRequest {
		t.Errorf("notification signed by another key answered %d %s", f.Status, f.Answer)
	}
	checkWallet("duplicate, replay, forged")

	// One deposit, under the payment's transaction_id.
	txID, ok := p.TransactionID(top[0].TopUpID)
	if !ok {
		t.Fatal("the platform has no payment")
	}
	txs, err := st.ledger.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{Account: wallet})
	if err != nil {
		t.Fatal(err)
	}
	if len(txs.Transactions) != 1 || txs.Transactions[0].Metadata["external_ref"] != "wechatpay:"+txID {
		t.Errorf("wallet transactions: %v", txs.Transactions)
	}
	after := railNotifications(t, "wechatpay", "topup")
	for outcome, want := range map[string]float64{"accepted": 1, "replay": 1, "duplicate": 1, "forged": 2} {
		if got := after[outcome] - before[outcome]; got != want {
			t.Errorf("gpubill_rail_notifications_total{rail=wechatpay,kind=topup,outcome=%s} +%v, want +%v", outcome, got, want)
		}
	}
	st.checkFunds(t, "CNY", paidOut)
	// The top-up reusing its key with another amount is refused by gpubill
	// (its order kept), before the platform is asked.
	if r := p.Refused(); len(r) != 0 {
		t.Errorf("the platform refused requests: %v, want none", r)
	}

	// Finance refunds 30.00 of the payment in the merchant platform, then
	// the other 70.00: WeChat Pay notifies each refund on its own
	// (REFUND.SUCCESS, that refund's amount). Each is recorded under its
	// refund_id with the payment's refunded total so far and counted
	// refunded (it was acknowledged as ignored, and the renter kept the
	// credit); WeChat Pay's retry of one (signed anew) is a duplicate; an
	// abnormal refund is acknowledged and not recorded. Nothing is posted:
	// the wallet still holds 100.00 for finance to take back.
	before = railNotifications(t, "wechatpay", "topup")
	refundOK := func(outTradeNo string, fen int64) wechatpay.Refund {
		t.Helper()
		r, n, err := p.Refund(outTradeNo, fen, wechatpay.RefundSuccess)
		if err != nil || !n.Accepted() {
			t.Fatalf("refund of %d fen: %v %+v", fen, err, n)
		}
		return r
	}
	r1 := refundOK(top[0].TopUpID, 3000)
	if again, err := p.RenotifyRefund(r1.RefundID); err != nil || !again.Accepted() {
		t.Errorf("WeChat Pay's retry of the refund: %v %+v", err, again)
	}
	if _, ab, err := p.Refund(top[0].TopUpID, 500, wechatpay.RefundAbnormal); err != nil || !ab.Accepted() {
		t.Errorf("abnormal refund: %v %+v", err, ab)
	}
	r2 := refundOK(top[0].TopUpID, 7000)
	var refunds string
	if err := st.d.Pool.QueryRow(ctx, `select coalesce(string_agg(refunded_total::numeric(20, 2)::text || ' ' || coalesce(refund_id, '-') || ' ' || renter_id,
		',' order by refunded_total), '') from payout.rail_refunds where rail = 'wechatpay' and payment_id = $1`, txID).Scan(&refunds); err != nil ||
		refunds != "30.00 "+r1.RefundID+" "+renter+",100.00 "+r2.RefundID+" "+renter {
		t.Errorf("refunds recorded %q (%v), want 30.00 under %s and 100.00 under %s", refunds, err, r1.RefundID, r2.RefundID)
	}
	checkWallet("refunds")

	// A payment whose notification never came, refunded in full: the
	// refund deposits the payment first (as its notification would have,
	// to the renter who opened the order) and records the refund; the
	// payment's notification coming later is a duplicate.
	code, resp := st.renterPost(t, renter, "/v1/renters/"+renter+"/top-ups", `{"rail":"wechatpay","amount":"50.00","currency":"CNY","idempotency_key":"k-2"}`)
	var second topUp
	if err := json.Unmarshal([]byte(resp), &second); code != http.StatusOK || err != nil {
		t.Fatalf("POST top-ups: %d %s %v", code, resp, err)
	}
	if _, err := p.PayUnnotified(second.PayURL); err != nil {
		t.Fatal(err)
	}
	r3 := refundOK(second.TopUpID, 5000)
	if late, err := p.Renotify(second.TopUpID, ""); err != nil || !late.Accepted() {
		t.Errorf("the payment's notification after its refund: %v %+v", err, late)
	}
	st.mu.Lock()
	st.deposits["CNY"] = st.deposits["CNY"].Add(decimal.RequireFromString("50.00"))
	st.mu.Unlock()
	if got := st.balance(t, wallet, "CNY"); !got.Equal(decimal.RequireFromString("150.00")) {
		t.Errorf("wallet after a refund deposited its payment: %s, want 150.00 (nothing of a refund is posted)", got)
	}
	if err := st.d.Pool.QueryRow(ctx, `select coalesce(string_agg(refunded_total::numeric(20, 2)::text || ' ' || refund_id, ','), '')
		from payout.rail_refunds where rail = 'wechatpay' and payment_id = $1`, r3.TransactionID).Scan(&refunds); err != nil ||
		refunds != "50.00 "+r3.RefundID {
		t.Errorf("refund of the payment never notified: %q (%v)", refunds, err)
	}
	txs, err = st.ledger.ListTransactions(ctx, &ledgerv1.ListTransactionsRequest{Account: wallet})
	if err != nil {
		t.Fatal(err)
	}
	if len(txs.Transactions) != 2 {
		t.Errorf("wallet transactions after the refunds: %v, want the two deposits only", txs.Transactions)
	}
	after = railNotifications(t, "wechatpay", "topup")
	for outcome, want := range map[string]float64{"refunded": 3, "duplicate": 2, "ignored": 1, "accepted": 0, "replay": 0} {
		if got := after[outcome] - before[outcome]; got != want {
			t.Errorf("refunds: gpubill_rail_notifications_total{rail=wechatpay,kind=topup,outcome=%s} +%v, want +%v", outcome, got, want)
		}
	}
	st.checkFunds(t, "CNY", paidOut)
}

// A payout failed by the platform's own balance (NOT_ENOUGH) is retried
// to the same method once finance has topped the merchant account up: the
// retry waited for a method change the provider had no reason to make,
// and the money stayed in available for good.
func TestRetryAfterThePlatformsFundsRanShort(t *testing.T) {
	t.Parallel()
	st, p := wechatStack(t)
	const cyc = "cyc-20260101"
	st.wechatSetup(t, "pw-short", "oUpF8uMuAJO_M2pxb1Q9zNjW0021")
	p.RejectNext(http.StatusForbidden, "NOT_ENOUGH", "the merchant's balance does not cover the transfer")
	st.settle(t, "pw-short", cyc, "CNY", "120.00")
	failed := st.waitStatus(t, "pw-short", cyc, "failed", waitLong)
	if failed.FailureCode != "insufficient_funds" {
		t.Fatalf("pw-short failed %s %q; want insufficient_funds", failed.FailureCode, failed.FailureMessage)
	}
	if _, err := st.s.API().RetryPayout(fin, &payoutv1.RetryPayoutRequest{PayoutId: failed.PayoutId, Reason: "merchant account topped up"}); err != nil {
		t.Fatalf("retry of a payout the platform's funds failed: %v", err)
	}
	if paid := st.waitStatus(t, "pw-short", cyc, "paid", waitLong); paid.Attempt != 2 {
		t.Errorf("pw-short paid at attempt %d, want 2", paid.Attempt)
	}
}

// The merchant's own WeChat Pay account may not pay (PAYER_ACCOUNT_ABNORMAL:
// a restriction the platform lifts at the merchant platform): the failure
// is the platform's, not the payee's, and finance retries it to the same
// method. Classed transaction_forbidden, the payee's, :retry answered
// "the payout method has not changed since it failed", the money in
// available for good.
func TestRetryAfterThePlatformsAccountWasRestricted(t *testing.T) {
	t.Parallel()
	st, p := wechatStack(t)
	const cyc = "cyc-20260101"
	st.wechatSetup(t, "pw-restricted", "oUpF8uMuAJO_M2pxb1Q9zNjW0022")
	p.RejectNext(http.StatusForbidden, "PAYER_ACCOUNT_ABNORMAL", "商户账户付款受限")
	st.settle(t, "pw-restricted", cyc, "CNY", "120.00")
	failed := st.waitStatus(t, "pw-restricted", cyc, "failed", waitLong)
	if failed.FailureCode != "platform_account_refused" || !strings.Contains(failed.FailureMessage, "platform") {
		t.Errorf("pw-restricted failed %s %q; want platform_account_refused naming the platform", failed.FailureCode, failed.FailureMessage)
	}
	if _, err := st.s.API().RetryPayout(fin, &payoutv1.RetryPayoutRequest{PayoutId: failed.PayoutId, Reason: "merchant account restriction lifted"}); err != nil {
		t.Fatalf("retry of a payout the platform's own account failed: %v", err)
	}
	if paid := st.waitStatus(t, "pw-restricted", cyc, "paid", waitLong); paid.Attempt != 2 {
		t.Errorf("pw-restricted paid at attempt %d, want 2", paid.Attempt)
	}
}
