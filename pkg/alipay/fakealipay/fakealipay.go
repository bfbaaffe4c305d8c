// Package fakealipay is a local Alipay open-platform gateway for tests. It
// checks requests as strictly as the real one: form-encoded POST, every
// common parameter (app_id of the registered app, format JSON, charset
// utf-8, sign_type RSA2, version 1.0, a timestamp within 10 minutes),
// the RSA2 signature with the app's public key, biz_content's required
// fields; it keeps one order per out_biz_no (the same out_biz_no answers
// the same order; with another payee or amount PAYMENT_INFO_INCONSISTENCY),
// signs every answer with its own platform key over the *_response object,
// and sends signed asynchronous payment notifications to a page-pay
// order's notify_url. A payee's fate is its identity's last four
// characters: 0002 PAYEE_ACCOUNT_STATUS_ERROR, 0004 PAYEE_NOT_EXIST, 0005
// DEALING until queried once, anything else SUCCESS.
package fakealipay

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/alipay"
)

// Gateway is the fake open platform.
type Gateway struct {
	URL         string          // the gateway endpoint (…/gateway.do)
	PlatformKey *rsa.PrivateKey // the platform's key: its public half is GPUBILL_ALIPAY_PUBLIC_KEY_FILE
	AppID       string
	SellerID    string

	srv    *httptest.Server
	appKey *rsa.PublicKey
	now    func() time.Time

	mu         sync.Mutex
	orders     map[string]*Order // by out_biz_no
	transfers  map[string]int    // uni.transfer calls per out_biz_no
	trades     map[string]*Trade // by out_trade_no
	refused    []string          // protocol violations answered with an error
	loseNext   int
	seq        int
	Notified   []Notice // every notification sent, in order
	httpClient *http.Client
}

// Order is a transfer order.
type Order struct {
	OutBizNo, OrderID, PayFundOrderID, Amount, Identity, IdentityType, Name string
	Status, ErrorCode, FailReason                                           string
	Queries                                                                 int
}

// Trade is a page-pay order the buyer paid.
type Trade struct {
	OutTradeNo, TradeNo, Amount, NotifyURL, Passback string
	Status                                           string
}

// Notice is one payment notification the gateway sent and the answer it got.
type Notice struct {
	Form   url.Values
	Answer string
	Err    error
}

// New starts a gateway for the app appID whose public key is appKey.
func New(appID string, appKey *rsa.PublicKey) (*Gateway, error) {
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	g := &Gateway{PlatformKey: pk, AppID: appID, SellerID: "2088000000000001", appKey: appKey, now: time.Now,
		orders: map[string]*Order{}, transfers: map[string]int{}, trades: map[string]*Trade{}, httpClient: &http.Client{Timeout: 10 * time.Second}}
	mux := http.NewServeMux()
	mux.HandleFunc("/gateway.do", g.serve)
	g.srv = httptest.NewServer(mux)
	g.URL = g.srv.URL + "/gateway.do"
	return g, nil
}

// Close stops the gateway.
func (g *Gateway) Close() { g.srv.Close() }

// LoseAnswers makes the next n transfer requests be booked but answered
// with a 504, as when the connection drops after Alipay took the order.
func (g *Gateway) LoseAnswers(n int) { g.mu.Lock(); g.loseNext = n; g.mu.Unlock() }

// Transfers is how many alipay.fund.trans.uni.transfer calls named
// out_biz_no; Orders how many orders exist for it (0 or 1).
func (g *Gateway) Transfers(outBizNo string) (calls int, order *Order) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if o, ok := g.orders[outBizNo]; ok {
		c := *o
		return g.transfers[outBizNo], &c
	}
	return g.transfers[outBizNo], nil
}

// Refused lists the protocol violations the gateway answered with an error.
func (g *Gateway) Refused() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.refused...)
}

var (
	outNoRE  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	amountRE = regexp.MustCompile(`^[0-9]{1,9}(\.[0-9]{1,2})?$`)
)

const skewMax = 10 * time.Minute

// gatewayError is an error_response: a request refused before any
// business processing (unsigned, as the client must then not trust it as
// a result).
type gatewayError struct{ code, msg, sub, subMsg string }

func (g *Gateway) refuse(w http.ResponseWriter, e gatewayError) {
	g.mu.Lock()
	g.refused = append(g.refused, e.sub+": "+e.subMsg)
	g.mu.Unlock()
	b, err := json.Marshal(map[string]map[string]string{"error_response": {"code": e.code, "msg": e.msg, "sub_code": e.sub, "sub_msg": e.subMsg}})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.Write(b)
}

// answer writes {"<method>_response":{…},"sign":"…"}, signed over the
// response object's bytes exactly as written.
func (g *Gateway) answer(w http.ResponseWriter, method string, obj any) {
	raw, err := json.Marshal(obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	sig, err := alipay.Sign(g.PlatformKey, raw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	body := append([]byte(`{"`+alipay.ResponseKey(method)+`":`), raw...)
	w.Write(append(body, `,"sign":"`+sig+`"}`...))
}

// checkCommon verifies what every request must carry; params is the
// request's parameters (the form of a POST, the query of a page pay).
func (g *Gateway) checkCommon(params url.Values) *gatewayError {
	missing := func(p string) *gatewayError {
		return &gatewayError{"40001", "Missing Required Arguments", "isv.missing-" + strings.ReplaceAll(p, "_", "-"), "missing " + p}
	}
	for _, p := range []string{"app_id", "method", "charset", "sign_type", "sign", "timestamp", "version", "biz_content"} {
		if params.Get(p) == "" {
			return missing(p)
		}
	}
	switch {
	case params.Get("app_id") != g.AppID:
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-app-id", "unknown app_id " + params.Get("app_id")}
	case params.Get("format") != "" && !strings.EqualFold(params.Get("format"), "JSON"):
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-format", "format " + params.Get("format")}
	case !strings.EqualFold(params.Get("charset"), "utf-8"):
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-charset", "charset " + params.Get("charset")}
	case params.Get("sign_type") != alipay.SignType:
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-signature-type", "sign_type " + params.Get("sign_type")}
	case params.Get("version") != "1.0":
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-version", "version " + params.Get("version")}
	}
	ts, err := time.ParseInLocation(alipay.TimeLayout, params.Get("timestamp"), alipay.Beijing)
	if err != nil || ts.Sub(g.now()).Abs() > skewMax {
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-timestamp", "timestamp " + params.Get("timestamp")}
	}
	if err := alipay.Verify(g.appKey, []byte(alipay.SignContent(params, "sign")), params.Get("sign")); err != nil {
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-signature", "signature does not verify with the app's public key"}
	}
	if !json.Valid([]byte(params.Get("biz_content"))) {
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-biz-content", "biz_content is not JSON"}
	}
	return nil
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		g.refuse(w, gatewayError{"40002", "Invalid Arguments", "isv.invalid-content-type", "content type " + mt})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	params, err := url.ParseQuery(string(body))
	if err != nil {
		g.refuse(w, gatewayError{"40002", "Invalid Arguments", "isv.invalid-form", err.Error()})
		return
	}
	if e := g.checkCommon(params); e != nil {
		g.refuse(w, *e)
		return
	}
	method := params.Get("method")
	switch method {
	case alipay.MethodTransfer:
		g.transfer(w, params.Get("biz_content"))
	case alipay.MethodQuery:
		g.query(w, params.Get("biz_content"))
	default:
		g.refuse(w, gatewayError{"40002", "Invalid Arguments", "isv.invalid-method", "method " + method})
	}
}

type common struct {
	Code    string `json:"code"`
	Msg     string `json:"msg"`
	SubCode string `json:"sub_code,omitempty"`
	SubMsg  string `json:"sub_msg,omitempty"`
}

var ok = common{Code: "10000", Msg: "Success"}

func business(sub, msg string) common {
	return common{Code: "40004", Msg: "Business Failed", SubCode: sub, SubMsg: msg}
}

func (g *Gateway) transfer(w http.ResponseWriter, bc string) {
	var b alipay.TransferBiz
	if err := json.Unmarshal([]byte(bc), &b); err != nil {
		g.refuse(w, gatewayError{"40002", "Invalid Arguments", "isv.invalid-biz-content", err.Error()})
		return
	}
	if e := checkTransferBiz(b); e != nil {
		g.refuse(w, *e)
		return
	}
	out, lose := g.placeTransfer(b)
	if lose {
		http.Error(w, "upstream timed out", http.StatusGatewayTimeout)
		return
	}
	g.answer(w, alipay.MethodTransfer, out)
}

// checkTransferBiz is the gateway's refusal of a transfer's biz_content
// (a missing or invalid argument), nil if it is well-formed.
func checkTransferBiz(b alipay.TransferBiz) *gatewayError {
	for _, f := range []struct{ name, v string }{{"out_biz_no", b.OutBizNo}, {"trans_amount", b.TransAmount}, {"product_code", b.ProductCode},
		{"biz_scene", b.BizScene}, {"order_title", b.OrderTitle}, {"payee_info.identity", b.PayeeInfo.Identity}, {"payee_info.identity_type", b.PayeeInfo.IdentityType}} {
		if f.v == "" {
			return &gatewayError{"40001", "Missing Required Arguments", "isv.missing-" + f.name, "missing " + f.name}
		}
	}
	switch {
	case !outNoRE.MatchString(b.OutBizNo):
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-out-biz-no", "out_biz_no " + b.OutBizNo}
	case b.ProductCode != alipay.ProductTransfer || b.BizScene != alipay.SceneDirect:
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-product-code", b.ProductCode + "/" + b.BizScene}
	case b.PayeeInfo.IdentityType != alipay.IdentityUserID && b.PayeeInfo.IdentityType != alipay.IdentityLogonID:
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-identity-type", b.PayeeInfo.IdentityType}
	case b.PayeeInfo.IdentityType == alipay.IdentityLogonID && b.PayeeInfo.Name == "":
		return &gatewayError{"40001", "Missing Required Arguments", "isv.missing-payee-info.name", "name is required with ALIPAY_LOGON_ID"}
	case !amountRE.MatchString(b.TransAmount):
		return &gatewayError{"40002", "Invalid Arguments", "isv.invalid-trans-amount", "trans_amount " + b.TransAmount}
	}
	return nil
}

// placeTransfer books a well-formed transfer (or finds the order it
// repeats) and returns the answer; lose says the answer is to be lost on
// the way back (LoseNext).
func (g *Gateway) placeTransfer(b alipay.TransferBiz) (out any, lose bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.transfers[b.OutBizNo]++
	res, o := g.transferOrder(b)
	lose = g.loseNext > 0
	if lose {
		g.loseNext--
	}
	out = res
	if res.Code == "10000" {
		out = struct {
			common
			OutBizNo       string `json:"out_biz_no"`
			OrderID        string `json:"order_id"`
			PayFundOrderID string `json:"pay_fund_order_id"`
			Status         string `json:"status"`
			TransDate      string `json:"trans_date"`
		}{res, o.OutBizNo, o.OrderID, o.PayFundOrderID, o.Status, g.now().In(alipay.Beijing).Format(alipay.TimeLayout)}
	}
	return out, lose
}

// transferOrder answers a transfer with g.mu held: a repeat of an order
// with the same payee and amount gets the order's answer, with another one
// PAYMENT_INFO_INCONSISTENCY; a new order is placed, its outcome chosen by
// the payee identity's last digits.
func (g *Gateway) transferOrder(b alipay.TransferBiz) (common, *Order) {
	amount := decimal.RequireFromString(b.TransAmount)
	o, seen := g.orders[b.OutBizNo]
	switch {
	case seen && (o.Amount != amount.StringFixed(2) || o.Identity != b.PayeeInfo.Identity):
		return business("PAYMENT_INFO_INCONSISTENCY", "两次请求商户单号一样，但是收款人或金额不一致"), o
	case seen:
		return orderAnswer(o), o
	case amount.LessThan(decimal.RequireFromString("0.10")):
		return business("EXCEED_LIMIT_SM_MIN_AMOUNT", "单笔最低转账金额0.1元"), o
	}
	g.seq++
	o = &Order{OutBizNo: b.OutBizNo, OrderID: fmt.Sprintf("20261201110070000006%010d", g.seq), PayFundOrderID: fmt.Sprintf("20261201110070001506%010d", g.seq),
		Amount: amount.StringFixed(2), Identity: b.PayeeInfo.Identity, IdentityType: b.PayeeInfo.IdentityType, Name: b.PayeeInfo.Name, Status: "SUCCESS"}
	switch {
	case strings.HasSuffix(b.PayeeInfo.Identity, "0002"):
		o.Status, o.ErrorCode, o.FailReason = "FAIL", "PAYEE_ACCOUNT_STATUS_ERROR", "收款方账户状态异常"
	case strings.HasSuffix(b.PayeeInfo.Identity, "0004"):
		o.Status, o.ErrorCode, o.FailReason = "FAIL", "PAYEE_NOT_EXIST", "收款账号不存在"
	case strings.HasSuffix(b.PayeeInfo.Identity, "0005"):
		o.Status = "DEALING"
	}
	g.orders[b.OutBizNo] = o
	return orderAnswer(o), o
}

// orderAnswer is the transfer answer of an order: a failed one is a
// business failure with its error code.
func orderAnswer(o *Order) common {
	if o.Status == "FAIL" {
		return business(o.ErrorCode, o.FailReason)
	}
	return ok
}

func (g *Gateway) query(w http.ResponseWriter, bc string) {
	var b alipay.QueryBiz
	if err := json.Unmarshal([]byte(bc), &b); err != nil {
		g.refuse(w, gatewayError{"40002", "Invalid Arguments", "isv.invalid-biz-content", err.Error()})
		return
	}
	if b.OutBizNo == "" {
		g.refuse(w, gatewayError{"40001", "Missing Required Arguments", "isv.missing-out-biz-no", "out_biz_no or order_id required"})
		return
	}
	if b.ProductCode != alipay.ProductTransfer || b.BizScene != alipay.SceneDirect {
		g.refuse(w, gatewayError{"40002", "Invalid Arguments", "isv.invalid-product-code", b.ProductCode + "/" + b.BizScene})
		return
	}
	g.mu.Lock()
	o, seen := g.orders[b.OutBizNo]
	var out any
	if !seen {
		out = business("ORDER_NOT_EXIST", "转账订单不存在")
	} else {
		o.Queries++
		res := alipay.QueryResult{OrderID: o.OrderID, PayFundOrderID: o.PayFundOrderID, OutBizNo: o.OutBizNo, TransAmount: o.Amount,
			Status: o.Status, ErrorCode: o.ErrorCode, FailReason: o.FailReason}
		res.Code, res.Msg = ok.Code, ok.Msg
		if o.Status == "SUCCESS" {
			res.PayDate = g.now().In(alipay.Beijing).Format(alipay.TimeLayout)
		}
		if o.Status == "DEALING" { // settles after it was seen processing once
			o.Status = "SUCCESS"
		}
		out = res
	}
	g.mu.Unlock()
	g.answer(w, alipay.MethodQuery, out)
}
