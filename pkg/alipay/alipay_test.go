package alipay_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/alipay"
	"github.com/gpubill/gpubill/pkg/alipay/fakealipay"
	"github.com/gpubill/gpubill/pkg/clock"
)

const appID = "2021000000000001"

func key(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// gateway is a fake open platform and a client of the app it knows.
func gateway(t *testing.T) (*fakealipay.Gateway, *alipay.Client) {
	t.Helper()
	appKey := key(t)
	g, err := fakealipay.New(appID, &appKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	cfg := alipay.Config{AppID: appID, PrivateKey: appKey, PlatformKey: &g.PlatformKey.PublicKey, GatewayURL: g.URL,
		NotifyURL: "http://127.0.0.1:1/v1/rails/alipay/notify", SellerID: g.SellerID}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	return g, &alipay.Client{Cfg: cfg, Clock: clock.System{}}
}

// A payment notification verifies only as the platform signed it: any
// field changed, another key, another sign_type or another app is refused.
// Page-pay takes an amount by its value: 10.000 is 10.00 yuan (its
// exponent of -3 was refused, a 500 for a top-up kept under its key); an
// amount of fen fractions, or none at all, is refused.
func TestPagePayURLAmount(t *testing.T) {
	t.Parallel()
	g, c := gateway(t)
	for _, tt := range []struct {
		give, want string // want "" = refused
	}{
		{"10.000", "10.00"},
		{"10.0000", "10.00"},
		{"10", "10.00"},
		{"0.5", "0.50"},
		{"10.001", ""},
		{"0", ""},
		{"-1.00", ""},
	} {
		payURL, _, err := c.PagePayURL("r-1", decimal.RequireFromString(tt.give), "")
		if tt.want == "" {
			if err == nil {
				t.Errorf("amount %s: %s, want refused", tt.give, payURL)
			}
			continue
		}
		if err != nil {
			t.Errorf("amount %s: %v", tt.give, err)
			continue
		}
		n, err := g.Pay(payURL)
		if err != nil || n.Form.Get("total_amount") != tt.want {
			t.Errorf("amount %s: paid %q, %v; want %s", tt.give, n.Form.Get("total_amount"), err, tt.want)
		}
	}
}

func TestVerifyNotification(t *testing.T) {
	t.Parallel()
	g, c := gateway(t)
	payURL, outTradeNo, err := c.PagePayURL("r-1", decimal.RequireFromString("100.00"), "")
	if err != nil {
		t.Fatal(err)
	}
	n, err := g.Pay(payURL) // the notify_url answers nothing: only the form matters here
	if err != nil {
		t.Fatal(err)
	}
	if n.Form.Get("out_trade_no") != outTradeNo || n.Form.Get("passback_params") != "r-1" {
		t.Fatalf("notification %v", n.Form)
	}
	if err := c.VerifyNotification(n.Form); err != nil {
		t.Fatalf("genuine notification: %v", err)
	}
	change := func(f func(url.Values)) url.Values {
		v := url.Values{}
		for k, x := range n.Form {
			v[k] = append([]string(nil), x...)
		}
		f(v)
		return v
	}
	other := key(t)
	for _, tc := range []struct {
		name string
		give url.Values
		want error
	}{
		{"amount raised", change(func(v url.Values) { v.Set("total_amount", "1000.00") }), alipay.ErrBadSignature},
		{"renter changed", change(func(v url.Values) { v.Set("passback_params", "r-2") }), alipay.ErrBadSignature},
		{"field added", change(func(v url.Values) { v.Set("extra", "x") }), alipay.ErrBadSignature},
		{"sign_type RSA", change(func(v url.Values) { v.Set("sign_type", "RSA") }), alipay.ErrBadSignature},
		{"signed by another key", change(func(v url.Values) {
			v.Del("sign")
			s, err := alipay.Sign(other, []byte(alipay.SignContent(v, "sign", "sign_type")))
			if err != nil {
				t.Fatal(err)
			}
			v.Set("sign", s)
		}), alipay.ErrBadSignature},
		{"no sign", change(func(v url.Values) { v.Del("sign") }), alipay.ErrBadSignature},
		{"another app", change(func(v url.Values) { v.Set("app_id", "2021000000000999"); resign(t, g, v) }), nil},
		{"another seller", change(func(v url.Values) { v.Set("seller_id", "2088999999999999"); resign(t, g, v) }), nil},
		{"no notify_id", change(func(v url.Values) { v.Del("notify_id"); resign(t, g, v) }), nil},
	} {
		err := c.VerifyNotification(tc.give)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || (tc.want == nil && errors.Is(err, alipay.ErrBadSignature)) {
			t.Errorf("%s: %v, want refused (%v)", tc.name, err, tc.want)
		}
	}
}

// The rail's settings: keys read from files as the open platform's tool
// writes them (bare base64) or as PEM; a partial configuration, an
// unreadable or short key, or the app's own public key given as the
// platform's are refused at start with the setting's name.
func TestConfigFromEnv(t *testing.T) {
	dir := t.TempDir()
	app, platform := key(t), key(t)
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pkcs8 := must(x509.MarshalPKCS8PrivateKey(app))
	pkix := must(x509.MarshalPKIXPublicKey(&platform.PublicKey))
	ownPKIX := must(x509.MarshalPKIXPublicKey(&app.PublicKey))
	smallPKIX := must(x509.MarshalPKIXPublicKey(&small.PublicKey))
	privBare := write("app_private.txt", []byte(base64.StdEncoding.EncodeToString(pkcs8)+"\n"))
	privPEM := write("app_private.pem", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(app)}))
	pubBare := write("alipay_public.txt", []byte(base64.StdEncoding.EncodeToString(pkix)))
	pubPEM := write("alipay_public.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix}))
	own := write("own_public.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ownPKIX}))
	short := write("short_public.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: smallPKIX}))
	for _, tc := range []struct {
		name    string
		give    map[string]string
		wantOn  bool
		wantErr string
	}{
		{"off", map[string]string{}, false, ""},
		{"bare base64 keys", map[string]string{alipay.EnvAppID: appID, alipay.EnvPrivateKeyFile: privBare, alipay.EnvPublicKeyFile: pubBare}, true, ""},
		{"PEM keys and every setting", map[string]string{alipay.EnvAppID: appID, alipay.EnvPrivateKeyFile: privPEM, alipay.EnvPublicKeyFile: pubPEM,
			alipay.EnvGatewayURL: alipay.GatewaySandbox, alipay.EnvNotifyURL: "https://billing.example.com/v1/rails/alipay/notify",
			alipay.EnvSellerID: "2088000000000001"}, true, ""},
		{"partial", map[string]string{alipay.EnvAppID: appID}, true, "GPUBILL_ALIPAY_PRIVATE_KEY_FILE, GPUBILL_ALIPAY_PUBLIC_KEY_FILE required"},
		{"missing file", map[string]string{alipay.EnvAppID: appID, alipay.EnvPrivateKeyFile: filepath.Join(dir, "nope"), alipay.EnvPublicKeyFile: pubPEM},
			true, "GPUBILL_ALIPAY_PRIVATE_KEY_FILE"},
		{"not a key", map[string]string{alipay.EnvAppID: appID, alipay.EnvPrivateKeyFile: pubPEM, alipay.EnvPublicKeyFile: pubPEM}, true,
			"GPUBILL_ALIPAY_PRIVATE_KEY_FILE"},
		{"the app's own public key", map[string]string{alipay.EnvAppID: appID, alipay.EnvPrivateKeyFile: privPEM, alipay.EnvPublicKeyFile: own}, true,
			"must be Alipay's"},
		{"short key", map[string]string{alipay.EnvAppID: appID, alipay.EnvPrivateKeyFile: privPEM, alipay.EnvPublicKeyFile: short}, true,
			"1024 bits"},
		{"bad gateway", map[string]string{alipay.EnvAppID: appID, alipay.EnvPrivateKeyFile: privPEM, alipay.EnvPublicKeyFile: pubPEM,
			alipay.EnvGatewayURL: "openapi.alipay.com"}, true, "GPUBILL_ALIPAY_GATEWAY_URL"},
		{"bad notify URL with its token", map[string]string{alipay.EnvAppID: appID, alipay.EnvPrivateKeyFile: privPEM, alipay.EnvPublicKeyFile: pubPEM,
			alipay.EnvNotifyURL: "ftp://u:pw-s3cret@billing.example/notify?token=q-s3cret"}, true, "GPUBILL_ALIPAY_NOTIFY_URL ftp://xxxxx:xxxxx@billing.example/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, e := range []string{alipay.EnvAppID, alipay.EnvPrivateKeyFile, alipay.EnvPublicKeyFile, alipay.EnvGatewayURL,
				alipay.EnvNotifyURL, alipay.EnvSellerID, alipay.EnvPayerName} {
				t.Setenv(e, tc.give[e])
			}
			c, on, err := alipay.ConfigFromEnv()
			if on != tc.wantOn {
				t.Errorf("on %v, want %v", on, tc.wantOn)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("err %v, want one with %q and no credential", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if on && (!c.PrivateKey.Equal(app) || !c.PlatformKey.Equal(&platform.PublicKey)) {
				t.Error("keys not read back as written")
			}
		})
	}
}

func resign(t *testing.T, g *fakealipay.Gateway, v url.Values) {
	t.Helper()
	if err := g.SignNotification(v); err != nil {
		t.Fatal(err)
	}
}
