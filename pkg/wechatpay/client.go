// Package wechatpay speaks WeChat Pay's API v3 with the standard library
// only (issue 17): requests signed WECHATPAY2-SHA256-RSA2048 with the
// merchant's API key, every answer verified with the platform certificate
// (or public key) over its Wechatpay-Timestamp, -Nonce and body, stale
// answers refused; notifications verified likewise and their resource
// opened with AEAD_AES_256_GCM under the APIv3 key; the merchant transfer
// to a user's openid (transfer-bills) and its query by out_bill_no, and
// the Native payment order (code_url). payout's WeChat Pay rail is built on
// it; fakewechatpay is a local platform for tests.
package wechatpay

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
	"strconv"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
)

// ErrUnavailable is an unknown outcome: the call may or may not have been
// acted on (transport failure, a 5xx, an answer that does not verify,
// SYSTEM_ERROR). Query before calling again, under the same out_bill_no.
var ErrUnavailable = errors.New("wechatpay: unavailable, outcome unknown")

// Config is the rail's settings (GPUBILL_WECHATPAY_*).
type Config struct {
	MchID          string          // the merchant number (GPUBILL_WECHATPAY_MCHID)
	AppID          string          // the AppID the payees' openids and the orders belong to (GPUBILL_WECHATPAY_APPID)
	MerchantKey    *rsa.PrivateKey // apiclient_key.pem (GPUBILL_WECHATPAY_MERCHANT_KEY_FILE)
	MerchantSerial string          // the merchant API certificate's serial (GPUBILL_WECHATPAY_MERCHANT_SERIAL)
	// PlatformKey verifies the platform's answers and notifications: the
	// platform certificate's key (GPUBILL_WECHATPAY_PLATFORM_CERT_FILE) or
	// the platform public key (GPUBILL_WECHATPAY_PLATFORM_PUBLIC_KEY_FILE);
	// PlatformSerial is what Wechatpay-Serial must name: the certificate's
	// serial or the public key's id (GPUBILL_WECHATPAY_PLATFORM_PUBLIC_KEY_ID,
	// PUB_KEY_ID_…).
	PlatformKey    *rsa.PublicKey
	PlatformSerial string
	APIv3Key       []byte // 32 bytes (GPUBILL_WECHATPAY_APIV3_KEY_FILE)
	// NotifyURL is where WeChat Pay posts payment and transfer
	// notifications: the public https address of POST
	// /v1/rails/wechatpay/notify (GPUBILL_WECHATPAY_NOTIFY_URL); "" :
	// top-ups through WeChat Pay are not offered and transfers are
	// followed by query only.
	NotifyURL string
	BaseURL   string       // GPUBILL_WECHATPAY_BASE_URL, default BaseProduction
	HTTP      *http.Client // nil: a client with CallTimeout
}

// API hosts.
const (
	BaseProduction = "https://api.mch.weixin.qq.com"
	BaseBackup     = "https://api2.mch.weixin.qq.com"
)

// Call limits.
const (
	CallTimeout  = 20 * time.Second
	bodyBytesMax = 1 << 20
	userAgent    = "gpubill-wechatpay/1 (Go)"
)

// Check refuses a configuration the rail cannot work with, naming the settings.
func (c Config) Check() error {
	var missing []string
	for _, f := range []struct {
		name string
		ok   bool
	}{{EnvMchID, strings.TrimSpace(c.MchID) != ""}, {EnvAppID, strings.TrimSpace(c.AppID) != ""},
		{EnvMerchantKeyFile, c.MerchantKey != nil}, {EnvMerchantSerial, strings.TrimSpace(c.MerchantSerial) != ""},
		{EnvPlatformCertFile + " or " + EnvPlatformPublicKeyFile, c.PlatformKey != nil && c.PlatformSerial != ""},
		{EnvAPIv3KeyFile, len(c.APIv3Key) > 0}} {
		if !f.ok {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("wechatpay rail: %s required", strings.Join(missing, ", "))
	}
	if len(c.APIv3Key) != APIv3KeyLen {
		return fmt.Errorf("wechatpay rail: %s: the APIv3 key is %d bytes, want %d", EnvAPIv3KeyFile, len(c.APIv3Key), APIv3KeyLen)
	}
	if c.MerchantKey.PublicKey.Equal(c.PlatformKey) {
		return fmt.Errorf("wechatpay rail: the platform key is the merchant's own public key: it must be WeChat Pay's")
	}
	for _, u := range []struct{ name, v string }{{EnvBaseURL, c.base()}, {EnvNotifyURL, c.NotifyURL}} {
		if u.v == "" {
			continue
		}
		p, err := url.Parse(u.v)
		if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" || p.RawQuery != "" {
			return fmt.Errorf("wechatpay rail: %s %s: want an http(s) URL without a query", u.name, apperr.RedactURL(u.v))
		}
	}
	if b := c.base(); (b == BaseProduction || b == BaseBackup) && c.NotifyURL != "" && !strings.HasPrefix(c.NotifyURL, "https://") {
		return fmt.Errorf("wechatpay rail: %s %s: WeChat Pay posts notifications to https addresses only", EnvNotifyURL, apperr.RedactURL(c.NotifyURL))
	}
	return nil
}

func (c Config) base() string {
	if c.BaseURL == "" {
		return BaseProduction
	}
	return strings.TrimSuffix(c.BaseURL, "/")
}

// Client calls API v3.
type Client struct {
	Cfg   Config
	Clock clock.Clock
}

// APIError is an answer other than 2xx: WeChat Pay's {"code","message"}.
type APIError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	return fmt.Sprintf("HTTP %d %s %s", e.Status, e.Code, e.Message)
}

// Codes that leave the outcome of a call unknown.
const (
	CodeSystemError      = "SYSTEM_ERROR"
	CodeFrequencyLimited = "FREQUENCY_LIMITED"
	CodeNotFound         = "NOT_FOUND"
	CodeInvalidRequest   = "INVALID_REQUEST"
	CodeParamError       = "PARAM_ERROR"
	CodeSignError        = "SIGN_ERROR"
	CodeOrderPaid        = "ORDERPAID" // an order asked again once paid
	// Refusals of the merchant's own setup: gpubill's to fix, not a caller's.
	CodeNoAuth             = "NO_AUTH"               // the merchant lacks the product's permission
	CodeAppIDMchIDMismatch = "APPID_MCHID_NOT_MATCH" // app id not bound to the merchant
	CodeMchNotExists       = "MCH_NOT_EXISTS"
)

// Do makes a signed call (body nil for a GET) and decodes a verified 2xx
// answer into out (nil: none). A verified non-2xx answer is an *APIError
// (wrapping ErrUnavailable for a 5xx, SYSTEM_ERROR or FREQUENCY_LIMITED);
// a transport failure, an unsigned or unverifiable answer or one outside
// SkewMax is ErrUnavailable: never taken as a result.
func (c *Client) Do(ctx context.Context, method, pathQuery string, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return fmt.Errorf("wechatpay %s %s: body: %w", method, pathQuery, err)
		}
	}
	ts, nonce := strconv.FormatInt(c.Clock.Now().Unix(), 10), NewNonce()
	sig, err := Sign(c.Cfg.MerchantKey, RequestMessage(method, pathQuery, ts, nonce, raw))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Cfg.base()+pathQuery, rd)
	if err != nil {
		return fmt.Errorf("wechatpay %s %s: %w", method, pathQuery, err)
	}
	req.Header.Set("Authorization", Authorization(c.Cfg.MchID, nonce, sig, ts, c.Cfg.MerchantSerial))
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(HeaderSerial, c.Cfg.PlatformSerial)
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.Cfg.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: CallTimeout}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("wechatpay %s %s: %v: %w", method, pathQuery, err, ErrUnavailable)
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, bodyBytesMax))
	if err != nil {
		return fmt.Errorf("wechatpay %s %s: read answer: %v: %w", method, pathQuery, err, ErrUnavailable)
	}
	if err := c.VerifySigned(resp.Header, ans); err != nil {
		// An answer gpubill cannot attribute to the platform is no result
		// (a proxy's 502, a lost connection's 504, a forgery).
		return fmt.Errorf("wechatpay %s %s: HTTP %d answer: %w: %w", method, pathQuery, resp.StatusCode, err, ErrUnavailable)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &APIError{Status: resp.StatusCode}
		if err := json.Unmarshal(ans, e); err != nil || e.Code == "" {
			return fmt.Errorf("wechatpay %s %s: HTTP %d without an error code: %w", method, pathQuery, resp.StatusCode, ErrUnavailable)
		}
		if resp.StatusCode >= 500 || e.Code == CodeSystemError || e.Code == CodeFrequencyLimited {
			return fmt.Errorf("wechatpay %s %s: %w (%w)", method, pathQuery, e, ErrUnavailable)
		}
		return fmt.Errorf("wechatpay %s %s: %w", method, pathQuery, e)
	}
	if out == nil || len(ans) == 0 {
		return nil
	}
	if err := json.Unmarshal(ans, out); err != nil {
		return fmt.Errorf("wechatpay %s %s: answer: %v: %w", method, pathQuery, err, ErrUnavailable)
	}
	return nil
}

// VerifySigned checks an answer's or a notification's signature headers:
// Wechatpay-Serial names the configured platform key, the signature type
// (when sent) is ours, the timestamp is within SkewMax of now, and
// Wechatpay-Signature verifies over timestamp, nonce and body.
// ErrBadSignature or ErrStale.
func (c *Client) VerifySigned(h http.Header, body []byte) error {
	serial, ts, nonce, sig := h.Get(HeaderSerial), h.Get(HeaderTimestamp), h.Get(HeaderNonce), h.Get(HeaderSignature)
	if serial == "" || ts == "" || nonce == "" || sig == "" {
		return fmt.Errorf("%w: Wechatpay-Serial, -Timestamp, -Nonce and -Signature required", ErrBadSignature)
	}
	if serial != c.Cfg.PlatformSerial {
		return fmt.Errorf("%w: Wechatpay-Serial %q is not the configured platform key %q", ErrBadSignature, serial, c.Cfg.PlatformSerial)
	}
	if st := h.Get(HeaderSigType); st != "" && st != AuthScheme {
		return fmt.Errorf("%w: signature type %q", ErrBadSignature, st)
	}
	if err := Verify(c.Cfg.PlatformKey, ResponseMessage(ts, nonce, body), sig); err != nil {
		return err
	}
	return CheckTimestamp(ts, c.Clock.Now())
}

// IsCode reports whether err is an *APIError with code.
func IsCode(err error, code string) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == code
}
