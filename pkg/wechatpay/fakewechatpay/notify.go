package fakewechatpay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/wechatpay"
)

// Pay is a user paying the order behind codeURL (a Native order's code):
// the order is paid once (a second payment is refused), and its
// TRANSACTION.SUCCESS notification is posted to the order's notify_url.
func (p *Platform) Pay(codeURL string) (Notice, error) {
	o, err := p.PayUnnotified(codeURL)
	if err != nil {
		return Notice{}, err
	}
	return p.Renotify(o, "")
}

// PayUnnotified pays the order behind codeURL as Pay does, and posts no
// notification (one that never reached the merchant): Renotify posts it.
// It returns the order's out_trade_no.
func (p *Platform) PayUnnotified(codeURL string) (string, error) {
	p.mu.Lock()
	var o *Order
	for _, x := range p.orders {
		if x.CodeURL == codeURL {
			o = x
		}
	}
	switch {
	case o == nil:
		p.mu.Unlock()
		return "", fmt.Errorf("no order has code_url %s", codeURL)
	case o.TransactionID != "":
		p.mu.Unlock()
		return "", fmt.Errorf("order %s: ORDERPAID", o.Req.OutTradeNo)
	}
	if o.Req.TimeExpire != "" {
		if exp, err := time.Parse(time.RFC3339, o.Req.TimeExpire); err == nil && p.Now().After(exp) {
			p.mu.Unlock()
			return "", fmt.Errorf("order %s: ORDER_CLOSED", o.Req.OutTradeNo)
		}
	}
	p.seq++
	o.TransactionID = fmt.Sprintf("4200002026%018d", p.seq)
	p.mu.Unlock()
	return o.Req.OutTradeNo, nil
}

// Renotify posts a paid order's TRANSACTION.SUCCESS notification again, as
// WeChat Pay does when it got no acknowledgement: the same notification
// id and resource, newly signed (a new timestamp and nonce). id "" : a new
// notification id.
func (p *Platform) Renotify(outTradeNo, id string) (Notice, error) {
	p.mu.Lock()
	o, ok := p.orders[outTradeNo]
	p.mu.Unlock()
	if !ok || o.TransactionID == "" {
		return Notice{}, fmt.Errorf("no paid order %s", outTradeNo)
	}
	t := wechatpay.Transaction{MchID: p.MchID, AppID: p.AppID, OutTradeNo: outTradeNo, TransactionID: o.TransactionID, TradeType: "NATIVE",
		TradeState: wechatpay.TradeSuccess, Attach: o.Req.Attach, SuccessTime: p.Now().In(wechatpay.Beijing).Format(time.RFC3339)}
	t.Payer.OpenID = "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"
	t.Amount.Total, t.Amount.PayerTotal, t.Amount.Currency, t.Amount.PayerCurrency = o.Req.Amount.Total, o.Req.Amount.Total, wechatpay.Currency, wechatpay.Currency
	if id == "" {
		id = "EV-" + wechatpay.NewNonce()[:20]
	}
	body, err := p.Envelope(id, wechatpay.EventTransactionSuccess, "transaction", "支付成功", t)
	if err != nil {
		return Notice{}, err
	}
	return p.Post(o.Req.NotifyURL, body)
}

// refundEvents is each refund status's event type.
var refundEvents = map[string]string{wechatpay.RefundSuccess: wechatpay.EventRefundSuccess,
	wechatpay.RefundAbnormal: wechatpay.EventRefundAbnormal, wechatpay.RefundClosed: wechatpay.EventRefundClosed}

// Refund is the merchant refunding fen of a paid order in the merchant
// platform: the refund gets an out_refund_no and a refund_id of its own
// and ends in status (wechatpay.RefundSuccess, RefundAbnormal or
// RefundClosed), and its REFUND.<status> notification is posted to the
// order's notify_url (WeChat Pay posts it to the refund request's
// notify_url; a refund made here has none), carrying that refund's amount (amount.refund) and
// the order's (amount.total), as WeChat Pay notifies each refund on its
// own. Successful refunds never add up to more than the order's total
// (WeChat Pay refuses the refund).
func (p *Platform) Refund(outTradeNo string, fen int64, status string) (wechatpay.Refund, Notice, error) {
	if _, ok := refundEvents[status]; !ok {
		return wechatpay.Refund{}, Notice{}, fmt.Errorf("refund status %q", status)
	}
	p.mu.Lock()
	o, ok := p.orders[outTradeNo]
	if !ok || o.TransactionID == "" {
		p.mu.Unlock()
		return wechatpay.Refund{}, Notice{}, fmt.Errorf("no paid order %s", outTradeNo)
	}
	refunded := int64(0)
	for _, r := range p.refunds {
		if r.OutTradeNo == outTradeNo && r.RefundStatus == wechatpay.RefundSuccess {
			refunded += r.Amount.Refund
		}
	}
	if fen <= 0 || refunded+fen > o.Req.Amount.Total {
		p.mu.Unlock()
		return wechatpay.Refund{}, Notice{}, fmt.Errorf("refund of %d fen of order %s (%d of %d refunded): 申请退款金额超过订单可退金额",
			fen, outTradeNo, refunded, o.Req.Amount.Total)
	}
	p.seq++
	r := &refund{Refund: wechatpay.Refund{MchID: p.MchID, OutTradeNo: outTradeNo, TransactionID: o.TransactionID,
		OutRefundNo: fmt.Sprintf("RF%018d", p.seq), RefundID: fmt.Sprintf("5030220262%018d", p.seq), RefundStatus: status},
		notifyURL: o.Req.NotifyURL, eventID: "EV-" + wechatpay.NewNonce()[:20]}
	if status == wechatpay.RefundSuccess {
		r.SuccessTime = p.Now().In(wechatpay.Beijing).Format(time.RFC3339)
	}
	r.Amount.Total, r.Amount.Refund, r.Amount.PayerTotal, r.Amount.PayerRefund = o.Req.Amount.Total, fen, o.Req.Amount.Total, fen
	p.refunds[r.RefundID] = r
	p.mu.Unlock()
	n, err := p.RenotifyRefund(r.RefundID)
	return r.Refund, n, err
}

// RenotifyRefund posts a refund's notification again, as WeChat Pay does
// when it got no acknowledgement: the same notification id and resource,
// newly signed.
func (p *Platform) RenotifyRefund(refundID string) (Notice, error) {
	p.mu.Lock()
	r, ok := p.refunds[refundID]
	p.mu.Unlock()
	if !ok {
		return Notice{}, fmt.Errorf("no refund %s", refundID)
	}
	summary := map[string]string{wechatpay.RefundSuccess: "退款成功", wechatpay.RefundAbnormal: "退款异常", wechatpay.RefundClosed: "退款关闭"}[r.RefundStatus]
	body, err := p.Envelope(r.eventID, refundEvents[r.RefundStatus], "refund", summary, r.Refund)
	if err != nil {
		return Notice{}, err
	}
	return p.Post(r.notifyURL, body)
}

func (p *Platform) notifyBill(b *Bill) {
	body, err := p.Envelope("EV-"+wechatpay.NewNonce()[:20], wechatpay.EventTransferFinished, "mch_payment", "商家转账单据终态通知", b.TransferBill)
	if err == nil {
		_, err = p.Post(b.NotifyURL, body) // a sent one is kept in notified with its answer
	}
	if err != nil { // not sent: kept in notified with its error
		p.mu.Lock()
		p.notified = append(p.notified, Notice{URL: b.NotifyURL, Err: err})
		p.mu.Unlock()
	}
}

// Envelope is a notification body: resource (JSON) sealed under the APIv3
// key with a fresh 12-byte nonce and associated data originalType.
func (p *Platform) Envelope(id, eventType, originalType, summary string, resource any) ([]byte, error) {
	pt, err := json.Marshal(resource)
	if err != nil {
		return nil, err
	}
	nonce := wechatpay.NewNonce()[:12]
	ct, err := wechatpay.Encrypt(p.apiV3Key, originalType, nonce, pt)
	if err != nil {
		return nil, err
	}
	return json.Marshal(wechatpay.Notification{ID: id, CreateTime: p.Now().In(wechatpay.Beijing).Format(time.RFC3339), EventType: eventType,
		ResourceType: wechatpay.ResourceEncrypted, Summary: summary, Resource: wechatpay.Resource{OriginalType: originalType,
			Algorithm: wechatpay.Algorithm, Ciphertext: ct, AssociatedData: originalType, Nonce: nonce}})
}

// Post signs body with the platform key and posts it to url.
func (p *Platform) Post(url string, body []byte) (Notice, error) {
	h, err := p.SignHeaders(body)
	if err != nil {
		return Notice{}, err
	}
	return p.Send(url, h, body), nil
}

// Send posts a notification with the headers given (a replay's, a
// forger's) and keeps the answer.
func (p *Platform) Send(url string, h http.Header, body []byte) Notice {
	n := Notice{URL: url, Header: h.Clone(), Body: append([]byte(nil), body...)}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err == nil {
		for k, v := range h {
			req.Header[k] = v
		}
		req.Header.Set("Content-Type", "application/json")
		var resp *http.Response
		if resp, err = p.httpClient.Do(req); err == nil {
			b, rerr := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			n.Status, n.Answer, err = resp.StatusCode, strings.TrimSpace(string(b)), rerr
		}
	}
	n.Err = err
	p.mu.Lock()
	p.notified = append(p.notified, n)
	p.mu.Unlock()
	return n
}

// Resend posts a notification again exactly as it was sent (same headers,
// same signature): what a replaying attacker does.
func (p *Platform) Resend(n Notice) Notice { return p.Send(n.URL, n.Header, n.Body) }

// Notices are the notifications posted so far.
func (p *Platform) Notices() []Notice {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Notice(nil), p.notified...)
}

// TransactionID is the payment of a paid order.
func (p *Platform) TransactionID(outTradeNo string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.orders[outTradeNo]
	if !ok || o.TransactionID == "" {
		return "", false
	}
	return o.TransactionID, true
}
