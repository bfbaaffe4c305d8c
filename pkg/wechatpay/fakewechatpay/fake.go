// Package fakewechatpay is a local WeChat Pay API v3 platform for tests. It
// checks requests as strictly as the real one: the Authorization header
// (scheme WECHATPAY2-SHA256-RSA2048, the merchant's mchid and certificate
// serial, a timestamp within 5 minutes, a nonce never used before, the
// signature over method, path, timestamp, nonce and body with the
// merchant's public key), Accept and Content-Type application/json, each
// API's required fields (appid, out_bill_no of letters and digits, the
// transfer scene and its report items, amounts in fen, an encrypted
// user_name from 2 000 yuan); it keeps one transfer bill per out_bill_no
// and one order per out_trade_no (the same number with other content is
// INVALID_REQUEST), signs every answer with its platform key (Wechatpay-*
// headers), and posts notifications (TRANSACTION.SUCCESS,
// MCHTRANSFER.BILL.FINISHED, and REFUND.SUCCESS / ABNORMAL / CLOSED for a
// refund a test makes, one notification per refund with its own amount)
// with the resource sealed AEAD_AES_256_GCM under the APIv3 key and the
// headers signed. A payee's fate is its
// openid's last four characters — 0002 ACCOUNT_FROZEN, 0004
// OPENID_INVALID, 0005 processing until queried once, anything else
// SUCCESS — or Freeze; RejectNext answers the next transfer with an
// error code, LoseAnswers books transfers and loses their answers.
package fakewechatpay

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"mime"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpubill/gpubill/pkg/wechatpay"
)

// Platform is the fake WeChat Pay.
type Platform struct {
	URL    string          // the API base (GPUBILL_WECHATPAY_BASE_URL)
	Key    *rsa.PrivateKey // the platform's key
	Cert   []byte          // its certificate, PEM (GPUBILL_WECHATPAY_PLATFORM_CERT_FILE)
	Serial string          // the certificate's serial, as Wechatpay-Serial names it
	MchID  string
	AppID  string
	// Now is the platform's clock (tests move it to make stale messages).
	Now func() time.Time

	srv            *httptest.Server
	merchantKey    *rsa.PublicKey
	merchantSerial string
	apiV3Key       []byte
	httpClient     *http.Client

	mu         sync.Mutex
	nonces     map[string]bool
	bills      map[string]*Bill // by out_bill_no
	transfers  map[string]int   // transfer calls per out_bill_no
	orders     map[string]*Order
	refunds    map[string]*refund // by refund_id
	frozen     map[string]bool
	refused    []string
	loseNext   int
	rejectNext *apiErr // the next transfer's or Native order's answer, when set
	seq        int
	notified   []Notice
}

// Bill is a transfer bill.
type Bill struct {
	wechatpay.TransferBill
	UserName  string // decrypted
	NotifyURL string
	Queries   int
}

// Order is a Native order, paid or not.
type Order struct {
	Req           wechatpay.NativeRequest
	CodeURL       string
	TransactionID string // "" : not paid
}

// refund is a refund of a paid order, made in the merchant platform.
type refund struct {
	wechatpay.Refund
	notifyURL, eventID string
}

// Notice is one notification the platform posted and how it was answered.
type Notice struct {
	URL    string
	Header http.Header
	Body   []byte
	Status int
	Answer string
	Err    error
}

// Accepted reports whether the merchant acknowledged the notification
// (HTTP 200 or 204), as WeChat Pay judges it.
func (n Notice) Accepted() bool {
	return n.Err == nil && (n.Status == http.StatusOK || n.Status == http.StatusNoContent)
}

// New starts a platform for merchant mchID (API certificate serial
// merchantSerial, public key merchantKey) and its app appID, with APIv3
// key apiV3Key; it makes its own key and certificate.
func New(mchID, appID string, merchantKey *rsa.PublicKey, merchantSerial string, apiV3Key []byte) (*Platform, error) {
	if len(apiV3Key) != wechatpay.APIv3KeyLen {
		return nil, fmt.Errorf("APIv3 key of %d bytes", len(apiV3Key))
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 159))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: "Tenpay.com Root CA (fake)", Organization: []string{"fakewechatpay"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, err
	}
	p := &Platform{Key: k, Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Serial: fmt.Sprintf("%X", sn),
		MchID: mchID, AppID: appID, Now: time.Now, merchantKey: merchantKey, merchantSerial: merchantSerial, apiV3Key: apiV3Key,
		httpClient: &http.Client{Timeout: 10 * time.Second}, nonces: map[string]bool{}, bills: map[string]*Bill{},
		transfers: map[string]int{}, orders: map[string]*Order{}, refunds: map[string]*refund{}, frozen: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+wechatpay.PathTransferBills, p.transfer)
	mux.HandleFunc("GET "+wechatpay.PathTransferByOut+"{out_bill_no}", p.query)
	mux.HandleFunc("POST "+wechatpay.PathNative, p.native)
	p.srv = httptest.NewServer(mux)
	p.URL = p.srv.URL
	return p, nil
}

// Close stops the platform.
func (p *Platform) Close() { p.srv.Close() }

// Freeze makes transfers to openid fail ACCOUNT_FROZEN.
func (p *Platform) Freeze(openid string) { p.mu.Lock(); p.frozen[openid] = true; p.mu.Unlock() }

// LoseAnswers makes the next n transfer requests be booked but answered
// with an unsigned 504, as when the connection drops after WeChat Pay took
// the bill.
func (p *Platform) LoseAnswers(n int) { p.mu.Lock(); p.loseNext = n; p.mu.Unlock() }

// RejectNext answers the next transfer or Native order request with HTTP
// status and code (e.g. 403 NOT_ENOUGH), booking nothing.
func (p *Platform) RejectNext(status int, code, message string) {
	p.mu.Lock()
	p.rejectNext = &apiErr{status, code, message}
	p.mu.Unlock()
}

// Transfers is how many transfer calls named outBillNo, and its bill.
func (p *Platform) Transfers(outBillNo string) (int, *Bill) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.bills[outBillNo]; ok {
		c := *b
		return p.transfers[outBillNo], &c
	}
	return p.transfers[outBillNo], nil
}

// Refused lists the protocol violations answered with an error.
func (p *Platform) Refused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

type apiErr struct {
	status        int
	code, message string
}

// answer writes a signed answer (status, JSON body) with the Wechatpay-* headers.
func (p *Platform) answer(w http.ResponseWriter, status int, obj any) {
	b, err := json.Marshal(obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h, err := p.SignHeaders(b)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client sees a short answer as unverifiable
}

func (p *Platform) fail(w http.ResponseWriter, e apiErr) {
	p.mu.Lock()
	p.refused = append(p.refused, e.code+": "+e.message)
	p.mu.Unlock()
	p.answer(w, e.status, map[string]string{"code": e.code, "message": e.message})
}

// SignHeaders are the platform's signature headers of body, signed now.
func (p *Platform) SignHeaders(body []byte) (http.Header, error) {
	return SignHeadersWith(p.Key, p.Serial, p.Now(), body)
}

// SignHeadersWith signs body as the platform does, with any key and serial
// (a forger's).
func SignHeadersWith(key *rsa.PrivateKey, serial string, at time.Time, body []byte) (http.Header, error) {
	ts, nonce := strconv.FormatInt(at.Unix(), 10), wechatpay.NewNonce()
	sig, err := wechatpay.Sign(key, wechatpay.ResponseMessage(ts, nonce, body))
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(wechatpay.HeaderSerial, serial)
	h.Set(wechatpay.HeaderTimestamp, ts)
	h.Set(wechatpay.HeaderNonce, nonce)
	h.Set(wechatpay.HeaderSignature, sig)
	h.Set(wechatpay.HeaderSigType, wechatpay.AuthScheme)
	h.Set(wechatpay.HeaderRequestID, "08"+wechatpay.NewNonce())
	return h, nil
}

// authenticate checks a request's headers and signature; body is read.
func (p *Platform) authenticate(r *http.Request) ([]byte, *apiErr) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, &apiErr{http.StatusBadRequest, wechatpay.CodeParamError, "body unreadable"}
	}
	if r.Header.Get("Accept") != "application/json" {
		return nil, &apiErr{http.StatusBadRequest, wechatpay.CodeParamError, "Accept must be application/json"}
	}
	if r.Method == http.MethodPost {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			return nil, &apiErr{http.StatusBadRequest, wechatpay.CodeParamError, "Content-Type must be application/json"}
		}
	}
	a, err := wechatpay.ParseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		return nil, &apiErr{http.StatusUnauthorized, wechatpay.CodeSignError, err.Error()}
	}
	switch {
	case a["mchid"] != p.MchID:
		return nil, &apiErr{http.StatusUnauthorized, wechatpay.CodeSignError, "mchid " + a["mchid"] + " unknown"}
	case a["serial_no"] != p.merchantSerial:
		return nil, &apiErr{http.StatusUnauthorized, wechatpay.CodeSignError, "serial_no " + a["serial_no"] + " is not the merchant's certificate"}
	case len(a["nonce_str"]) < 16 || len(a["nonce_str"]) > 32:
		return nil, &apiErr{http.StatusUnauthorized, wechatpay.CodeSignError, "nonce_str length"}
	}
	if err := wechatpay.CheckTimestamp(a["timestamp"], p.Now()); err != nil {
		return nil, &apiErr{http.StatusUnauthorized, wechatpay.CodeSignError, err.Error()}
	}
	if err := wechatpay.Verify(p.merchantKey, wechatpay.RequestMessage(r.Method, r.URL.RequestURI(), a["timestamp"], a["nonce_str"], body), a["signature"]); err != nil {
		return nil, &apiErr{http.StatusUnauthorized, wechatpay.CodeSignError, "signature does not verify with the merchant's certificate"}
	}
	p.mu.Lock()
	seen := p.nonces[a["nonce_str"]]
	p.nonces[a["nonce_str"]] = true
	p.mu.Unlock()
	if seen {
		return nil, &apiErr{http.StatusUnauthorized, wechatpay.CodeSignError, "nonce_str used before: a replayed request"}
	}
	return body, nil
}

var (
	outNoRE    = regexp.MustCompile(`^[A-Za-z0-9]{1,32}$`)
	tradeNoRE  = regexp.MustCompile(`^[A-Za-z0-9_*|-]{6,32}$`)
	openidRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)
	transferLo = int64(10) // 0.10 yuan
)

func (p *Platform) transfer(w http.ResponseWriter, r *http.Request) {
	body, e := p.authenticate(r)
	if e != nil {
		p.fail(w, *e)
		return
	}
	var q wechatpay.TransferRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		p.fail(w, apiErr{http.StatusBadRequest, wechatpay.CodeParamError, "body: " + err.Error()})
		return
	}
	if e := p.checkTransfer(r, &q); e != nil {
		p.fail(w, *e)
		return
	}
	p.mu.Lock()
	if rj := p.rejectNext; rj != nil {
		p.rejectNext = nil
		p.mu.Unlock()
		p.fail(w, *rj)
		return
	}
	p.transfers[q.OutBillNo]++
	b, seen := p.bills[q.OutBillNo]
	if seen && (b.OpenID != q.OpenID || b.TransferAmount != q.TransferAmount || b.AppID != q.AppID) {
		p.mu.Unlock()
		p.fail(w, apiErr{http.StatusBadRequest, wechatpay.CodeInvalidRequest, "商户单号重复，但请求参数与原单不一致"})
		return
	}
	var notify *Bill
	if !seen {
		p.seq++
		now := p.Now().In(wechatpay.Beijing).Format(time.RFC3339)
		b = &Bill{TransferBill: wechatpay.TransferBill{MchID: p.MchID, OutBillNo: q.OutBillNo, TransferBillNo: fmt.Sprintf("1330000%025d", p.seq),
			AppID: q.AppID, State: wechatpay.StateSuccess, TransferAmount: q.TransferAmount, TransferRemark: q.TransferRemark, OpenID: q.OpenID,
			CreateTime: now, UpdateTime: now}, UserName: q.UserName, NotifyURL: q.NotifyURL}
		switch {
		case p.frozen[q.OpenID] || strings.HasSuffix(q.OpenID, "0002"):
			b.State, b.FailReason = wechatpay.StateFail, "ACCOUNT_FROZEN"
		case strings.HasSuffix(q.OpenID, "0004"):
			b.State, b.FailReason = wechatpay.StateFail, "OPENID_INVALID"
		case strings.HasSuffix(q.OpenID, "0005"):
			b.State = wechatpay.StateProcessing
		}
		p.bills[q.OutBillNo] = b
		if b.State != wechatpay.StateProcessing && b.NotifyURL != "" {
			c := *b
			notify = &c
		}
	}
	// The create answer reports the bill taken (ACCEPTED) the first time;
	// the same out_bill_no again answers the bill as it is.
	res := wechatpay.TransferResult{OutBillNo: b.OutBillNo, TransferBillNo: b.TransferBillNo, CreateTime: b.CreateTime, State: wechatpay.StateAccepted}
	if seen {
		res.State, res.FailReason = b.State, b.FailReason
	}
	lose := p.loseNext > 0
	if lose {
		p.loseNext--
	}
	p.mu.Unlock()
	if notify != nil {
		go p.notifyBill(notify)
	}
	if lose {
		http.Error(w, "upstream timed out", http.StatusGatewayTimeout)
		return
	}
	p.answer(w, http.StatusOK, res)
}

func (p *Platform) checkTransfer(r *http.Request, q *wechatpay.TransferRequest) *apiErr {
	param := func(msg string) *apiErr { return &apiErr{http.StatusBadRequest, wechatpay.CodeParamError, msg} }
	switch {
	case q.AppID != p.AppID:
		return param("appid " + q.AppID + " is not bound to the merchant")
	case !outNoRE.MatchString(q.OutBillNo):
		return param("out_bill_no " + q.OutBillNo + ": letters and digits, at most 32")
	case q.TransferSceneID != wechatpay.TransferSceneID:
		return param("transfer_scene_id " + q.TransferSceneID + " not granted")
	case !openidRE.MatchString(q.OpenID):
		return param("openid " + q.OpenID)
	case q.TransferAmount < transferLo:
		return param(fmt.Sprintf("transfer_amount %d: at least %d fen", q.TransferAmount, transferLo))
	case q.TransferRemark == "" || len([]rune(q.TransferRemark)) > 32:
		return param("transfer_remark: 1 to 32 characters")
	case q.NotifyURL != "" && !strings.HasPrefix(q.NotifyURL, "https://") && !strings.HasPrefix(q.NotifyURL, "http://") || strings.Contains(q.NotifyURL, "?"):
		return param("notify_url " + q.NotifyURL)
	}
	types := map[string]bool{}
	for _, ri := range q.ReportInfos {
		if ri.InfoContent == "" {
			return param("transfer_scene_report_infos: empty info_content of " + ri.InfoType)
		}
		types[ri.InfoType] = true
	}
	if !types["岗位类型"] || !types["报酬说明"] || len(types) != 2 {
		return param("transfer_scene_report_infos: scene 1005 wants 岗位类型 and 报酬说明")
	}
	if q.TransferAmount >= wechatpay.UserNameMinFen && q.UserName == "" {
		return param("user_name is required from 2000 yuan")
	}
	if q.UserName != "" {
		if r.Header.Get(wechatpay.HeaderSerial) != p.Serial {
			return param("Wechatpay-Serial must name the platform key user_name is encrypted with")
		}
		name, err := wechatpay.DecryptSensitive(p.Key, q.UserName)
		if err != nil {
			return param("user_name does not decrypt with the platform key")
		}
		q.UserName = name
	}
	return nil
}

func (p *Platform) query(w http.ResponseWriter, r *http.Request) {
	if _, e := p.authenticate(r); e != nil {
		p.fail(w, *e)
		return
	}
	no := r.PathValue("out_bill_no")
	p.mu.Lock()
	b, ok := p.bills[no]
	var out wechatpay.TransferBill
	if ok {
		b.Queries++
		out = b.TransferBill
		if b.State == wechatpay.StateProcessing { // settles after it was seen processing once
			b.State, b.UpdateTime = wechatpay.StateSuccess, p.Now().In(wechatpay.Beijing).Format(time.RFC3339)
		}
	}
	p.mu.Unlock()
	if !ok {
		p.answer(w, http.StatusNotFound, map[string]string{"code": wechatpay.CodeNotFound, "message": "记录不存在"})
		return
	}
	p.answer(w, http.StatusOK, out)
}

func (p *Platform) native(w http.ResponseWriter, r *http.Request) {
	body, e := p.authenticate(r)
	if e != nil {
		p.fail(w, *e)
		return
	}
	var q wechatpay.NativeRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		p.fail(w, apiErr{http.StatusBadRequest, wechatpay.CodeParamError, "body: " + err.Error()})
		return
	}
	p.mu.Lock()
	if rj := p.rejectNext; rj != nil {
		p.rejectNext = nil
		p.mu.Unlock()
		p.fail(w, *rj)
		return
	}
	p.mu.Unlock()
	param := func(msg string) { p.fail(w, apiErr{http.StatusBadRequest, wechatpay.CodeParamError, msg}) }
	switch {
	case q.AppID != p.AppID || q.MchID != p.MchID:
		param("appid and mchid do not match")
		return
	case q.Description == "" || !tradeNoRE.MatchString(q.OutTradeNo):
		param("description, out_trade_no (6 to 32) required")
		return
	case q.Amount.Total <= 0 || (q.Amount.Currency != "" && q.Amount.Currency != wechatpay.Currency):
		param("amount.total in fen, currency CNY")
		return
	case q.NotifyURL == "" || strings.Contains(q.NotifyURL, "?") || len(q.Attach) > 128:
		param("notify_url without a query, attach at most 128")
		return
	}
	if q.TimeExpire != "" {
		expires, err := time.Parse(time.RFC3339, q.TimeExpire)
		if err != nil {
			param("time_expire: RFC 3339")
			return
		}
		if !expires.After(p.Now()) {
			param("time_expire 已过期")
			return
		}
	}
	p.mu.Lock()
	o, seen := p.orders[q.OutTradeNo]
	if seen && (o.Req.Amount != q.Amount || o.Req.Attach != q.Attach || o.Req.NotifyURL != q.NotifyURL) {
		p.mu.Unlock()
		p.fail(w, apiErr{http.StatusBadRequest, wechatpay.CodeInvalidRequest, "商户订单号重复，但请求参数与原单不一致"})
		return
	}
	if seen && o.TransactionID != "" {
		p.mu.Unlock()
		p.fail(w, apiErr{http.StatusForbidden, wechatpay.CodeOrderPaid, "该订单已支付"})
		return
	}
	if !seen {
		o = &Order{Req: q, CodeURL: "weixin://wxpay/bizpayurl?pr=" + wechatpay.NewNonce()[:10]}
		p.orders[q.OutTradeNo] = o
	}
	code := o.CodeURL
	p.mu.Unlock()
	p.answer(w, http.StatusOK, wechatpay.NativeResult{CodeURL: code})
}
