package fakealipay

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/alipay"
)

// Pay is the buyer paying a page-pay order: the URL the app made
// (alipay.Client.PagePayURL) is checked like any request (common
// parameters, signature, biz_content's out_trade_no, total_amount,
// subject, product_code FAST_INSTANT_TRADE_PAY, a notify_url), the trade
// is made (one per out_trade_no: paying it again is refused), and its
// TRADE_SUCCESS notification is sent to notify_url, signed with the
// platform key.
func (g *Gateway) Pay(payURL string) (Notice, error) {
	u, err := url.Parse(payURL)
	if err != nil {
		return Notice{}, err
	}
	if u.Scheme+"://"+u.Host+u.Path != g.URL {
		return Notice{}, fmt.Errorf("pay url %s is not this gateway", payURL)
	}
	params := u.Query()
	if e := g.checkCommon(params); e != nil {
		return Notice{}, fmt.Errorf("page pay refused: %s %s", e.sub, e.subMsg)
	}
	if params.Get("method") != alipay.MethodPagePay {
		return Notice{}, fmt.Errorf("method %s, want %s", params.Get("method"), alipay.MethodPagePay)
	}
	var b alipay.PagePayBiz
	if err := json.Unmarshal([]byte(params.Get("biz_content")), &b); err != nil {
		return Notice{}, err
	}
	switch {
	case !outNoRE.MatchString(b.OutTradeNo):
		return Notice{}, fmt.Errorf("out_trade_no %q", b.OutTradeNo)
	case !amountRE.MatchString(b.TotalAmount) || decimal.RequireFromString(b.TotalAmount).LessThan(decimal.RequireFromString("0.01")):
		return Notice{}, fmt.Errorf("total_amount %q", b.TotalAmount)
	case b.Subject == "" || b.ProductCode != alipay.ProductPagePay:
		return Notice{}, fmt.Errorf("subject %q product_code %q", b.Subject, b.ProductCode)
	case params.Get("notify_url") == "":
		return Notice{}, errors.New("no notify_url")
	}
	g.mu.Lock()
	if _, paid := g.trades[b.OutTradeNo]; paid {
		g.mu.Unlock()
		return Notice{}, fmt.Errorf("out_trade_no %s: TRADE_HAS_SUCCESS", b.OutTradeNo)
	}
	g.seq++
	t := &Trade{OutTradeNo: b.OutTradeNo, TradeNo: fmt.Sprintf("202612012200147%013d", g.seq), Amount: b.TotalAmount,
		NotifyURL: params.Get("notify_url"), Passback: b.PassbackParams, Status: alipay.TradeSuccess}
	g.trades[b.OutTradeNo] = t
	g.mu.Unlock()
	return g.Notify(b.OutTradeNo, alipay.TradeSuccess)
}

// Notify sends a trade's notification with status (a new notify_id each
// time, as Alipay does for a new status: TRADE_FINISHED after the refund
// period).
func (g *Gateway) Notify(outTradeNo, status string) (Notice, error) {
	g.mu.Lock()
	t, ok := g.trades[outTradeNo]
	g.mu.Unlock()
	if !ok {
		return Notice{}, fmt.Errorf("no trade %s", outTradeNo)
	}
	now := g.now().In(alipay.Beijing).Format(alipay.TimeLayout)
	f := url.Values{}
	f.Set("notify_time", now)
	f.Set("notify_type", "trade_status_sync")
	f.Set("notify_id", newNotifyID())
	f.Set("app_id", g.AppID)
	f.Set("charset", "utf-8")
	f.Set("version", "1.0")
	f.Set("sign_type", alipay.SignType)
	f.Set("trade_no", t.TradeNo)
	f.Set("out_trade_no", t.OutTradeNo)
	f.Set("buyer_id", "2088102177846880")
	f.Set("seller_id", g.SellerID)
	f.Set("trade_status", status)
	f.Set("total_amount", t.Amount)
	f.Set("receipt_amount", t.Amount)
	f.Set("buyer_pay_amount", t.Amount)
	f.Set("subject", "gpubill wallet top-up")
	f.Set("gmt_create", now)
	f.Set("gmt_payment", now)
	f.Set("passback_params", t.Passback)
	f.Set("fund_bill_list", `[{"amount":"`+t.Amount+`","fundChannel":"ALIPAYACCOUNT"}]`)
	if err := g.SignNotification(f); err != nil {
		return Notice{}, err
	}
	return g.Send(t.NotifyURL, f), nil
}

// SignNotification signs a notification's fields with the platform key
// (over every field but sign and sign_type).
func (g *Gateway) SignNotification(f url.Values) error {
	f.Del("sign")
	sig, err := alipay.Sign(g.PlatformKey, []byte(alipay.SignContent(f, "sign", "sign_type")))
	if err != nil {
		return err
	}
	f.Set("sign", sig)
	return nil
}

// Send posts a notification form to notifyURL, as Alipay does, and keeps
// what it was answered.
func (g *Gateway) Send(notifyURL string, f url.Values) Notice {
	n := Notice{Form: f}
	resp, err := g.httpClient.Post(notifyURL, "application/x-www-form-urlencoded; charset=utf-8", strings.NewReader(f.Encode()))
	if err != nil {
		n.Err = err
	} else {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		n.Answer = string(b)
		if err != nil {
			n.Err = err
		} else if resp.StatusCode != http.StatusOK {
			n.Err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
	}
	g.mu.Lock()
	g.Notified = append(g.Notified, n)
	g.mu.Unlock()
	return n
}

// Resend sends a notification again exactly as it was (same notify_id,
// same signature): what Alipay does when it got no "success", and what a
// replaying attacker does.
func (g *Gateway) Resend(n Notice, notifyURL string) Notice {
	f := url.Values{}
	for k, v := range n.Form {
		f[k] = append([]string(nil), v...)
	}
	return g.Send(notifyURL, f)
}

func newNotifyID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
