// Package alipay speaks the Alipay open platform's gateway protocol with
// the standard library only: requests signed RSA2
// (SHA256withRSA over the sorted key=value string) with the app's private
// key, answers verified with the platform's public key over the
// *_response object as sent, asynchronous payment notifications verified
// likewise; the single transfer (alipay.fund.trans.uni.transfer) and its
// query (alipay.fund.trans.common.query), and the computer-website payment
// order (alipay.trade.page.pay). payout's Alipay rail is built on it;
// fakealipay is a local gateway for tests.
package alipay

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
)

// ErrUnavailable is an unknown outcome: the call may or may not have been
// acted on (transport failure, an answer that is not the gateway's, code
// 20000). Query before calling again.
var ErrUnavailable = errors.New("alipay: unavailable, outcome unknown")

// Config is the rail's settings (GPUBILL_ALIPAY_*).
type Config struct {
	AppID       string          // the open platform app (GPUBILL_ALIPAY_APP_ID)
	PrivateKey  *rsa.PrivateKey // the app's private key (GPUBILL_ALIPAY_PRIVATE_KEY_FILE)
	PlatformKey *rsa.PublicKey  // Alipay's public key (GPUBILL_ALIPAY_PUBLIC_KEY_FILE)
	GatewayURL  string          // GPUBILL_ALIPAY_GATEWAY_URL, default GatewayProduction
	// NotifyURL is where Alipay posts top-up payment notifications: the
	// public address of POST /v1/payment-notifications/alipay
	// (GPUBILL_ALIPAY_NOTIFY_URL); "" : top-ups through Alipay are not
	// offered.
	NotifyURL string
	// SellerID is the merchant's Alipay user id (2088…): a notification
	// naming another seller is refused (GPUBILL_ALIPAY_SELLER_ID; "" : not
	// checked).
	SellerID string
	// PayerShowName is shown to payees as the payer (optional).
	PayerShowName string
	HTTP          *http.Client // nil: a client with CallTimeout
}

// Gateways.
const (
	GatewayProduction = "https://openapi.alipay.com/gateway.do"
	GatewaySandbox    = "https://openapi-sandbox.dl.alipaydev.com/gateway.do"
)

// Protocol constants of the open platform.
const (
	TimeLayout    = "2006-01-02 15:04:05" // timestamp, notify_time, gmt_payment: Beijing time
	CodeSuccess   = "10000"
	CodeBusiness  = "40004" // a business failure: sub_code says which
	codeUnavail   = "20000" // service unavailable: the outcome is unknown
	errorResponse = "error_response"
	// CallTimeout bounds one gateway call; the workflow's activity retries.
	CallTimeout  = 20 * time.Second
	bodyBytesMax = 1 << 20
)

// Beijing is the time zone of the platform's timestamps (China Standard
// Time has no daylight saving: a fixed zone needs no tzdata).
var Beijing = time.FixedZone("CST", 8*3600)

// Check refuses a configuration the rail cannot work with.
func (c Config) Check() error {
	var missing []string
	if strings.TrimSpace(c.AppID) == "" {
		missing = append(missing, "GPUBILL_ALIPAY_APP_ID")
	}
	if c.PrivateKey == nil {
		missing = append(missing, "GPUBILL_ALIPAY_PRIVATE_KEY_FILE")
	}
	if c.PlatformKey == nil {
		missing = append(missing, "GPUBILL_ALIPAY_PUBLIC_KEY_FILE")
	}
	if len(missing) > 0 {
		return fmt.Errorf("alipay rail: %s required", strings.Join(missing, ", "))
	}
	for _, u := range []struct{ name, v string }{{"GPUBILL_ALIPAY_GATEWAY_URL", c.gateway()}, {"GPUBILL_ALIPAY_NOTIFY_URL", c.NotifyURL}} {
		if u.v == "" {
			continue
		}
		p, err := url.Parse(u.v)
		if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			return fmt.Errorf("alipay rail: %s %s: want an http(s) URL", u.name, apperr.RedactURL(u.v))
		}
	}
	return nil
}

func (c Config) gateway() string {
	if c.GatewayURL == "" {
		return GatewayProduction
	}
	return c.GatewayURL
}

// Client calls the open platform's gateway.
type Client struct {
	Cfg   Config
	Clock clock.Clock
}

// Common is the part of every answer: code 10000 is success; a business
// failure is code 40004 with sub_code.
type Common struct {
	Code    string `json:"code"`
	Msg     string `json:"msg"`
	SubCode string `json:"sub_code"`
	SubMsg  string `json:"sub_msg"`
}

func (c Common) String() string {
	s := c.Code + " " + c.Msg
	if c.SubCode != "" {
		s += ", " + c.SubCode + " " + c.SubMsg
	}
	return s
}

// RequestParams are the signed parameters of a call to method: the common
// parameters, biz_content and extra (notify_url), and sign.
func (c *Client) RequestParams(method string, biz any, extra map[string]string) (url.Values, error) {
	bc, err := json.Marshal(biz)
	if err != nil {
		return nil, fmt.Errorf("alipay %s biz_content: %w", method, err)
	}
	v := url.Values{}
	v.Set("app_id", c.Cfg.AppID)
	v.Set("method", method)
	v.Set("format", "JSON")
	v.Set("charset", "utf-8")
	v.Set("sign_type", SignType)
	v.Set("timestamp", c.Clock.Now().In(Beijing).Format(TimeLayout))
	v.Set("version", "1.0")
	v.Set("biz_content", string(bc))
	for k, x := range extra {
		v.Set(k, x)
	}
	sig, err := Sign(c.Cfg.PrivateKey, []byte(SignContent(v, "sign")))
	if err != nil {
		return nil, err
	}
	v.Set("sign", sig)
	return v, nil
}

// Call posts a signed request and returns the verified *_response object
// and its common part. Transport failures, answers that are not the
// gateway's (5xx, no JSON) and code 20000 are ErrUnavailable: the
// outcome is unknown. An answer whose signature does not verify is an
// error, never taken as a result.
func (c *Client) Call(ctx context.Context, method string, biz any) (json.RawMessage, Common, error) {
	params, err := c.RequestParams(method, biz, nil)
	if err != nil {
		return nil, Common{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Cfg.gateway(), strings.NewReader(params.Encode()))
	if err != nil {
		return nil, Common{}, fmt.Errorf("alipay %s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded;charset=utf-8")
	hc := c.Cfg.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: CallTimeout}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, Common{}, fmt.Errorf("alipay %s: %v: %w", method, err, ErrUnavailable)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, bodyBytesMax))
	if err != nil {
		return nil, Common{}, fmt.Errorf("alipay %s: read answer: %v: %w", method, err, ErrUnavailable)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, Common{}, fmt.Errorf("alipay %s: HTTP %d: %w", method, resp.StatusCode, ErrUnavailable)
	}
	obj, sign, err := ResponseObject(body, method)
	if err != nil {
		return nil, Common{}, fmt.Errorf("alipay %s: %v: %w", method, err, ErrUnavailable)
	}
	var com Common
	if err := json.Unmarshal(obj, &com); err != nil {
		return nil, Common{}, fmt.Errorf("alipay %s: answer: %v: %w", method, err, ErrUnavailable)
	}
	if sign == "" {
		// The gateway signs every answer it processed; an unsigned one
		// (error_response of a request it refused) is not trusted as a result.
		return nil, com, fmt.Errorf("alipay %s: unsigned answer %s", method, com)
	}
	if err := Verify(c.Cfg.PlatformKey, obj, sign); err != nil {
		return nil, com, fmt.Errorf("alipay %s: answer %s: %w", method, com, err)
	}
	if com.Code == codeUnavail {
		return nil, com, fmt.Errorf("alipay %s: %s: %w", method, com, ErrUnavailable)
	}
	return obj, com, nil
}

// ResponseObject extracts from an answer the raw bytes of its
// "<method with _>_response" member (or "error_response") exactly as sent
// — what the platform signed — and the sign member.
func ResponseObject(body []byte, method string) (json.RawMessage, string, error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&top); err != nil {
		return nil, "", fmt.Errorf("answer not JSON: %w", err)
	}
	obj, ok := top[ResponseKey(method)]
	if !ok {
		if obj, ok = top[errorResponse]; !ok {
			return nil, "", fmt.Errorf("answer without %s", ResponseKey(method))
		}
	}
	var sign string
	if raw, ok := top["sign"]; ok {
		if err := json.Unmarshal(raw, &sign); err != nil {
			return nil, "", errors.New("answer's sign is not a string")
		}
	}
	return obj, sign, nil
}

// ResponseKey is the member of an answer holding method's response:
// alipay.fund.trans.uni.transfer → alipay_fund_trans_uni_transfer_response.
func ResponseKey(method string) string { return strings.ReplaceAll(method, ".", "_") + "_response" }
