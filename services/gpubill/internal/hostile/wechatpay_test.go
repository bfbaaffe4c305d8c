package hostile

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/wechatpay"
	"github.com/gpubill/gpubill/pkg/wechatpay/fakewechatpay"
)

// wechatSerial is the platform certificate's serial the stack trusts
// (configureWeChatPay).
var wechatSerial string

// configureWeChatPay turns the WeChat Pay rail on for the stack with a
// merchant key, a platform certificate and an APIv3 key generated into
// dir (the API host, never reached by these tests, is a closed port).
func configureWeChatPay(dir string) error {
	mk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(mk)
	if err != nil {
		return err
	}
	p, err := fakewechatpay.New("1900000109", "wxd678efh567hg6787", &mk.PublicKey, "5157F09EFDC096DE15EBE81A47057A7232F1B8E1", []byte("0123456789abcdefghijklmnopqrstuv"))
	if err != nil {
		return err
	}
	p.Close() // only its certificate is used
	wechatSerial = p.Serial
	keyFile, certFile, v3File := filepath.Join(dir, "apiclient_key.pem"), filepath.Join(dir, "wechatpay_platform.pem"), filepath.Join(dir, "apiv3.key")
	for f, b := range map[string][]byte{keyFile: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), certFile: p.Cert,
		v3File: []byte("0123456789abcdefghijklmnopqrstuv")} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return err
		}
	}
	for k, v := range map[string]string{wechatpay.EnvMchID: "1900000109", wechatpay.EnvAppID: "wxd678efh567hg6787", wechatpay.EnvMerchantKeyFile: keyFile,
		wechatpay.EnvMerchantSerial: "5157F09EFDC096DE15EBE81A47057A7232F1B8E1", wechatpay.EnvPlatformCertFile: certFile, wechatpay.EnvAPIv3KeyFile: v3File,
		wechatpay.EnvBaseURL: "http://127.0.0.1:1", wechatpay.EnvNotifyURL: "http://127.0.0.1:1/v1/rails/wechatpay/notify"} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return nil
}

func postRaw(t *testing.T, path string, h http.Header, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
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

// The rails' notification routes (no token: the rail's signature
// authenticates) refuse whatever is not a notification the rail signed —
// no body, not JSON, NUL bytes and invalid UTF-8, a body over the limit, a
// well-formed envelope with no, a garbage or a stale signature — with the
// rail's own refusal (WeChat Pay: 400 {"code":"FAIL"}; Alipay: "fail"),
// no internals in the answer, and a logged refusal; over the server's body
// limit 413; GET is no route.
func TestRailNotificationsRefuseHostileInput(t *testing.T) {
	envelope := []byte(`{"id":"EV-1","create_time":"2026-12-01T20:00:00+08:00","event_type":"TRANSACTION.SUCCESS","resource_type":"encrypt-resource",` +
		`"resource":{"original_type":"transaction","algorithm":"AEAD_AES_256_GCM","ciphertext":"AAAAAAAAAAAAAAAAAAAAAAAAAAAA","associated_data":"transaction","nonce":"123456789012"}}`)
	signed := func(at time.Time, sig string) http.Header {
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set(wechatpay.HeaderSerial, wechatSerial)
		h.Set(wechatpay.HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
		h.Set(wechatpay.HeaderNonce, wechatpay.NewNonce())
		h.Set(wechatpay.HeaderSignature, sig)
		return h
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := fakewechatpay.SignHeadersWith(other, wechatSerial, time.Now(), envelope)
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string][]byte{"no body": nil, "not JSON": []byte("not json"), "NUL and invalid UTF-8": []byte("{\"id\":\"\x00\xff\xfe\"}"),
		"over the route's 64 KiB": bytes.Repeat([]byte("a"), 100<<10), "an envelope": envelope}
	headers := map[string]http.Header{"unsigned": {"Content-Type": {"application/json"}}, "garbage signature": signed(time.Now(), "%%%"),
		"stale": signed(time.Now().Add(-time.Hour), "c2ln"), "another key": forged}
	leaks := []string{"wechatpay:", "alipay:", "verify", "decrypt", "sql", "pgx", "panic", "goroutine", "127.0.0.1"}
	for bn, body := range bodies {
		for hn, h := range headers {
			code, ans := postRaw(t, "/v1/rails/wechatpay/notify", h, body)
			var a struct{ Code, Message string }
			if code != http.StatusBadRequest || json.Unmarshal([]byte(ans), &a) != nil || a.Code != "FAIL" {
				t.Errorf("wechatpay, %s, %s: %d %.200s", bn, hn, code, ans)
			}
			for _, l := range leaks {
				if strings.Contains(strings.ToLower(ans), l) {
					t.Errorf("wechatpay, %s, %s: the answer tells %q: %.200s", bn, hn, l, ans)
				}
			}
		}
		code, ans := postRaw(t, "/v1/rails/alipay/notify", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, body)
		if code != http.StatusOK || ans != "fail" {
			t.Errorf("alipay, %s: %d %.200s", bn, code, ans)
		}
	}
	// Over the server's body limit (1 MiB): 413 before the route reads it.
	for _, path := range []string{"/v1/rails/wechatpay/notify", "/v1/rails/alipay/notify"} {
		if code, ans := postRaw(t, path, signed(time.Now(), "c2ln"), bytes.Repeat([]byte("a"), 2<<20)); code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s, 2 MiB: %d %.200s", path, code, ans)
		}
	}
	for _, path := range []string{"/v1/rails/wechatpay/notify", "/v1/rails/alipay/notify"} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		if err := resp.Body.Close(); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusNotFound { // the route is POST only: GET falls to the REST gateway
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}
	if len(logs.lines("WeChat Pay notification refused")) == 0 || len(logs.lines("Alipay notification refused")) == 0 {
		t.Error("the refusals were not logged")
	}
}
