package wechatpay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	wp "github.com/gpubill/gpubill/pkg/wechatpay"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/wechatpay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// logged keeps the records logged at WARN and above.
type logged struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logged) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }

// at lists the records of level lv whose message starts with msg, each as
// its attributes by key.
func (l *logged) at(lv slog.Level, msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.recs {
		if r.Level != lv || !strings.HasPrefix(r.Message, msg) {
			continue
		}
		m := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	return out
}

const refundedMsg = "renter top-up refunded at the rail"

// WeChat Pay's refund notifications, signed and sealed by the platform,
// through the route into payout's real store: a REFUND.SUCCESS is recorded
// in payout.rail_refunds under its refund_id with the payment's refunded
// total so far, counted refunded and logged at ERROR naming the payment,
// renter, total and refunded_since_last (it was acknowledged as ignored,
// and the renter kept the credit, nobody told). WeChat Pay notifies each
// refund with its own amount: a second refund of the same amount is a new
// one. Its retry (signed anew) is a duplicate; its refund_id with other
// content is refused as a replay; REFUND.ABNORMAL / CLOSED are acknowledged,
// logged as warnings and not recorded. A refund of a payment whose
// notification never came deposits it first, to the renter who opened the
// order; one of a payment deposited before orders were kept (payout/0011)
// goes to the deposit's renter; one of an order gpubill never opened, of a
// payment it never deposited, is refused.
func TestRefundNotifications(t *testing.T) {
	t.Parallel()
	p, rail := platform(t)
	c := rail.C
	pool, _ := testkit.NewPool(t)
	ctx := context.Background()
	if err := pg.Migrate(ctx, pool, postgres.Schema, migrations.For(postgres.Schema)); err != nil {
		t.Fatal(err)
	}
	store := &postgres.Store{Pool: pool}
	logs := &logged{}
	log := slog.New(logs)
	dep := &deposits{byRef: map[string]string{}}
	var mu sync.Mutex
	counted := map[string]int{}
	var last string
	n := &wechatpay.Notifications{C: c, TopUps: &app.TopUps{Ledger: dep, Store: store, Clock: clock.System{}, Log: log}, Orders: store,
		Count: func(_, kind, o string) { mu.Lock(); counted[kind+"/"+o]++; last = o; mu.Unlock() },
		Clock: clock.System{}, Log: log}
	srv := httptest.NewServer(n)
	t.Cleanup(srv.Close)
	c.Cfg.NotifyURL = srv.URL + wechatpay.NotifyPath
	orders := &app.TopUpOrders{Rails: map[string]app.Checkout{wechatpay.Name: wechatpay.Checkout{C: c, Log: log}}, Orders: store, Clock: clock.System{}}
	open := func(key, amount string) app.TopUpOrder {
		t.Helper()
		o, err := orders.Create(ctx, app.TopUpOrderInput{RenterID: "r-1", Rail: wechatpay.Name, Amount: amount, Currency: "CNY", IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	paidOrder := open("k-1", "100.00")
	if paid, err := p.Pay(paidOrder.PayURL); err != nil || !paid.Accepted() {
		t.Fatalf("payment notification: %v %+v", err, paid)
	}
	txID := transactionOf(t, p, paidOrder.ID)
	quiet := open("k-2", "50.00")
	if _, err := p.PayUnnotified(quiet.PayURL); err != nil {
		t.Fatal(err)
	}
	var refunds []wp.Refund
	refund := func(outTradeNo string, fen int64, status string) func() (fakeNotice, error) {
		return func() (fakeNotice, error) {
			r, got, err := p.Refund(outTradeNo, fen, status)
			refunds = append(refunds, r)
			return fakeNotice{got.Status, got.Answer}, err
		}
	}
	post := func(event string, res any) func() (fakeNotice, error) {
		return func() (fakeNotice, error) {
			body, err := p.Envelope("EV-"+wp.NewNonce()[:8], event, "refund", "", res)
			if err != nil {
				return fakeNotice{}, err
			}
			got, err := p.Post(c.Cfg.NotifyURL, body)
			return fakeNotice{got.Status, got.Answer}, err
		}
	}
	// changed is the first refund's resource under its refund_id with
	// another amount; another(f) a refund of its own, changed by f.
	changed := func() (fakeNotice, error) {
		r := refunds[0]
		r.Amount.Refund = 4000
		return post(wp.EventRefundSuccess, r)()
	}
	another := func(f func(*wp.Refund)) func() (fakeNotice, error) {
		return func() (fakeNotice, error) {
			r := refunds[0]
			r.RefundID, r.OutRefundNo = "50302202600000000000099", "RF99"
			f(&r)
			return post(wp.EventRefundSuccess, r)()
		}
	}
	for _, tc := range []struct {
		name    string
		give    func() (fakeNotice, error)
		want    int
		outcome string
	}{
		{"refunded 30.00", refund(paidOrder.ID, 3000, wp.RefundSuccess), http.StatusOK, app.NotifyRefunded},
		{"WeChat Pay's retry of it", func() (fakeNotice, error) {
			got, err := p.RenotifyRefund(refunds[0].RefundID)
			return fakeNotice{got.Status, got.Answer}, err
		}, http.StatusOK, app.NotifyDuplicate},
		{"its refund_id with another amount", changed, http.StatusBadRequest, app.NotifyReplay},
		{"another 30.00, a refund of its own", refund(paidOrder.ID, 3000, wp.RefundSuccess), http.StatusOK, app.NotifyRefunded},
		{"abnormal", refund(paidOrder.ID, 1000, wp.RefundAbnormal), http.StatusOK, "ignored"},
		{"closed", refund(paidOrder.ID, 1000, wp.RefundClosed), http.StatusOK, "ignored"},
		{"SUCCESS event of an abnormal refund", another(func(r *wp.Refund) { r.RefundStatus = wp.RefundAbnormal }), http.StatusBadRequest, app.NotifyMalformed},
		{"another merchant's", another(func(r *wp.Refund) { r.MchID = "1900000999" }), http.StatusBadRequest, app.NotifyRejected},
		{"more than the payment", another(func(r *wp.Refund) { r.Amount.Refund = r.Amount.Total + 1 }), http.StatusBadRequest, app.NotifyMalformed},
		{"an order gpubill never opened, a payment it never deposited", another(func(r *wp.Refund) {
			r.OutTradeNo, r.TransactionID = "tuNOTOURS0001", "4200000000209999999999999999"
		}), http.StatusBadRequest, app.NotifyRejected},
		{"another amount than the order's", another(func(r *wp.Refund) { r.Amount.Total = 20000 }), http.StatusBadRequest, app.NotifyRejected},
		{"a payment never notified, refunded in full", refund(quiet.ID, 5000, wp.RefundSuccess), http.StatusOK, app.NotifyRefunded},
		{"its payment notified after the refund", func() (fakeNotice, error) {
			got, err := p.Renotify(quiet.ID, "")
			return fakeNotice{got.Status, got.Answer}, err
		}, http.StatusOK, app.NotifyDuplicate},
		// Deposited before orders were kept (payout/0011): no order, its
		// deposit names the renter.
		{"a payment deposited before orders were kept", func() (fakeNotice, error) {
			if _, err := pool.Exec(ctx, `insert into payout.rail_topups (rail, payment_id, renter_id, currency, amount, ledger_transaction_id, first_at, last_at)
				values ('wechatpay', '4200000000202611300000000001', 'r-2', 'CNY', 80.00, 'tx-old', now(), now())`); err != nil {
				return fakeNotice{}, err
			}
			return another(func(r *wp.Refund) {
				r.OutTradeNo, r.TransactionID = "tuBEFOREORDERS01", "4200000000202611300000000001"
				r.RefundID, r.OutRefundNo = "50302202600000000000077", "RF77"
				r.Amount.Total, r.Amount.Refund = 8000, 2000
			})()
		}, http.StatusOK, app.NotifyRefunded},
	} {
		got, err := tc.give()
		mu.Lock()
		o := last
		mu.Unlock()
		if err != nil || got.status != tc.want || o != tc.outcome {
			t.Errorf("%s: answered %d %s (%s) %v, want %d (%s)", tc.name, got.status, got.answer, o, err, tc.want, tc.outcome)
		}
	}
	quietTx := transactionOf(t, p, quiet.ID)
	r1, r2, r5 := refunds[0].RefundID, refunds[1].RefundID, refunds[4].RefundID
	var rows string
	if err := pool.QueryRow(ctx, `select coalesce(string_agg(payment_id || ' ' || refunded_total::numeric(20, 2)::text || ' ' || refund_id || ' ' || renter_id,
		',' order by payment_id, refunded_total), '') from payout.rail_refunds where rail = 'wechatpay'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("4200000000202611300000000001 20.00 50302202600000000000077 r-2,%s 30.00 %s r-1,%s 60.00 %s r-1,%s 50.00 %s r-1",
		txID, r1, txID, r2, quietTx, r5); rows != want {
		t.Errorf("payout.rail_refunds:\n got %s\nwant %s", rows, want)
	}
	// One ERROR per refund recorded, naming what finance takes back.
	errs := logs.at(slog.LevelError, refundedMsg)
	want := []map[string]string{
		{"payment_id": txID, "renter_id": "r-1", "refund_id": r1, "refunded_total": "30", "refunded_since_last": "30"},
		{"payment_id": txID, "renter_id": "r-1", "refund_id": r2, "refunded_total": "60", "refunded_since_last": "30"},
		{"payment_id": quietTx, "renter_id": "r-1", "refund_id": r5, "refunded_total": "50", "refunded_since_last": "50"},
		{"payment_id": "4200000000202611300000000001", "renter_id": "r-2", "refund_id": "50302202600000000000077", "refunded_total": "20", "refunded_since_last": "20"},
	}
	if len(errs) != len(want) {
		t.Fatalf("%d ERROR records %q, want %d: %v", len(errs), refundedMsg, len(want), errs)
	}
	for i, w := range want {
		for k, v := range w {
			if errs[i][k] != v {
				t.Errorf("ERROR %d: %s = %q, want %q (all: %v)", i, k, errs[i][k], v, errs[i])
			}
		}
		if errs[i]["external_ref"] != "wechatpay:"+w["payment_id"] || errs[i]["ledger_transaction_id"] == "" {
			t.Errorf("ERROR %d names no deposit to reverse: %v", i, errs[i])
		}
	}
	if warns := logs.at(slog.LevelWarn, "WeChat Pay refund of a renter's top-up did not go through"); len(warns) != 2 {
		t.Errorf("%d warnings of refunds that did not go through, want 2 (abnormal, closed)", len(warns))
	}
	// The payment never notified was deposited by its refund, once, to
	// the renter who opened the order.
	if len(dep.byRef) != 3 || dep.byRef["wechatpay:"+txID] != "r-1 100.00 CNY" || dep.byRef["wechatpay:"+quietTx] != "r-1 50.00 CNY" ||
		dep.byRef["wechatpay:4200000000202611300000000001"] != "r-2 80.00 CNY" {
		t.Errorf("deposits %v", dep.byRef)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, w := range map[string]int{"topup/accepted": 1, "topup/refunded": 4, "topup/duplicate": 2, "topup/replay": 1, "topup/ignored": 2,
		"topup/malformed": 2, "topup/rejected": 3} {
		if counted[k] != w {
			t.Errorf("counted %s = %d, want %d (all: %v)", k, counted[k], w, counted)
		}
	}
}

// fakeNotice is how the route answered a notification.
type fakeNotice struct {
	status int
	answer string
}
