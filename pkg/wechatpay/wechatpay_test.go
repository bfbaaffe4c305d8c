package wechatpay_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/wechatpay"
	"github.com/gpubill/gpubill/pkg/wechatpay/fakewechatpay"
)

const (
	mchID          = "1900000109"
	appID          = "wxd678efh567hg6787"
	merchantSerial = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"
)

var apiV3Key = []byte("0123456789abcdefghijklmnopqrstuv")

func key(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// platform is a fake WeChat Pay and a client of the merchant it knows.
func platform(t *testing.T) (*fakewechatpay.Platform, *wechatpay.Client, *rsa.PrivateKey) {
	t.Helper()
	mk := key(t)
	p, err := fakewechatpay.New(mchID, appID, &mk.PublicKey, merchantSerial, apiV3Key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	pk, serial, err := wechatpay.ParsePlatformCert(p.Cert, time.Now())
	if err != nil || serial != p.Serial {
		t.Fatalf("platform cert: %v serial %s want %s", err, serial, p.Serial)
	}
	cfg := wechatpay.Config{MchID: mchID, AppID: appID, MerchantKey: mk, MerchantSerial: merchantSerial, PlatformKey: pk, PlatformSerial: serial,
		APIv3Key: apiV3Key, NotifyURL: "http://127.0.0.1:1/v1/rails/wechatpay/notify", BaseURL: p.URL}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	return p, &wechatpay.Client{Cfg: cfg, Clock: clock.System{}}, mk
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// The request signature is SHA256withRSA (PKCS #1 v1.5, deterministic)
// over METHOD\nURL\ntimestamp\nnonce\nbody\n: Sign's output equals what
// openssl computes over the same message with the same key, and an answer
// signed by openssl over timestamp\nnonce\nbody\n verifies.
func TestSignMatchesOpenSSL(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	dir := t.TempDir()
	k := key(t)
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writePEM(t, dir, "apiclient_key.pem", "PRIVATE KEY", der)
	body := []byte(`{"appid":"wxd678efh567hg6787","out_bill_no":"plfk2020042013","transfer_amount":400000}`)
	msg := wechatpay.RequestMessage("POST", "/v3/fund-app/mch-transfer/transfer-bills", "1554208460", "593BEC0C930BF1AFEB40B4A08C8FB242", body)
	if want := "POST\n/v3/fund-app/mch-transfer/transfer-bills\n1554208460\n593BEC0C930BF1AFEB40B4A08C8FB242\n" + string(body) + "\n"; string(msg) != want {
		t.Fatalf("message %q", msg)
	}
	openssl := func(msg []byte) string {
		t.Helper()
		mf := filepath.Join(dir, "msg")
		if err := os.WriteFile(mf, msg, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sh", "-c", "openssl dgst -sha256 -sign "+keyFile+" "+mf+" | openssl base64 -A").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	ours, err := wechatpay.Sign(k, msg)
	if err != nil {
		t.Fatal(err)
	}
	if theirs := openssl(msg); ours != theirs {
		t.Errorf("Sign %s\nopenssl %s", ours, theirs)
	}
	// An answer signed by openssl verifies; changed, it does not.
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	ans := []byte(`{"out_bill_no":"plfk2020042013","state":"ACCEPTED"}`)
	sig := openssl(wechatpay.ResponseMessage(ts, "NONCE0123456789", ans))
	c := &wechatpay.Client{Cfg: wechatpay.Config{PlatformKey: &k.PublicKey, PlatformSerial: "SERIAL1"}, Clock: clock.System{}}
	h := http.Header{}
	h.Set(wechatpay.HeaderSerial, "SERIAL1")
	h.Set(wechatpay.HeaderTimestamp, ts)
	h.Set(wechatpay.HeaderNonce, "NONCE0123456789")
	h.Set(wechatpay.HeaderSignature, sig)
	if err := c.VerifySigned(h, ans); err != nil {
		t.Errorf("openssl's signature: %v", err)
	}
	if err := c.VerifySigned(h, []byte(strings.Replace(string(ans), "ACCEPTED", "SUCCESS", 1))); !errors.Is(err, wechatpay.ErrBadSignature) {
		t.Errorf("changed body: %v", err)
	}
	h2 := h.Clone()
	h2.Set(wechatpay.HeaderSerial, "SERIAL2")
	if err := c.VerifySigned(h2, ans); !errors.Is(err, wechatpay.ErrBadSignature) {
		t.Errorf("another serial: %v", err)
	}
	c.Clock = clock.NewManual(time.Now().Add(wechatpay.SkewMax + time.Minute))
	if err := c.VerifySigned(h, ans); !errors.Is(err, wechatpay.ErrStale) {
		t.Errorf("6 minutes old: %v", err)
	}
}

// AEAD_AES_256_GCM as WeChat Pay seals a resource: a vector computed with
// Python's cryptography (AESGCM(key).encrypt(nonce, plaintext, aad)), not
// with this package.
func TestDecryptKnownVector(t *testing.T) {
	t.Parallel()
	const ct = "c7gxMNcIvGZHqwa+5X6ELbF7o5VWJvwqBs9JrRaCcVBtUFByhMqOAFX6/99hPMtPXFZhj4g9T79bZxqU9whX9sKt2xbP4SaSOE2QLv9MFb6FLC1P0QswXWj2"
	const want = `{"transaction_id":"4200000000000000000000000001","amount":{"total":10000}}`
	pt, err := wechatpay.Decrypt(apiV3Key, "transaction", "46f2a7b1c3d9", ct)
	if err != nil || string(pt) != want {
		t.Fatalf("Decrypt: %q %v", pt, err)
	}
	for name, args := range map[string][3]string{
		"other associated data": {"mch_payment", "46f2a7b1c3d9", ct},
		"other nonce":           {"transaction", "46f2a7b1c3d8", ct},
		"changed ciphertext":    {"transaction", "46f2a7b1c3d9", "d" + ct[1:]},
	} {
		if _, err := wechatpay.Decrypt(apiV3Key, args[0], args[1], args[2]); !errors.Is(err, wechatpay.ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
	again, err := wechatpay.Encrypt(apiV3Key, "transaction", "46f2a7b1c3d9", []byte(want))
	if err != nil || again != ct {
		t.Errorf("Encrypt %s %v", again, err)
	}
	if _, err := wechatpay.Decrypt([]byte("short"), "", "46f2a7b1c3d9", ct); err == nil {
		t.Error("a key of 5 bytes decrypted")
	}
}

func TestAuthorizationHeader(t *testing.T) {
	t.Parallel()
	h := wechatpay.Authorization("1900009191", "593BEC0C930BF1AFEB40B4A08C8FB242", "c2ln", "1554208460", "1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C")
	want := `WECHATPAY2-SHA256-RSA2048 mchid="1900009191",nonce_str="593BEC0C930BF1AFEB40B4A08C8FB242",signature="c2ln",timestamp="1554208460",serial_no="1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C"`
	if h != want {
		t.Fatalf("%s\nwant %s", h, want)
	}
	f, err := wechatpay.ParseAuthorization(h)
	if err != nil || f["mchid"] != "1900009191" || f["serial_no"] != "1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C" || f["signature"] != "c2ln" {
		t.Errorf("parsed %v %v", f, err)
	}
	for _, bad := range []string{"", "Bearer x", strings.Replace(h, `mchid="1900009191",`, "", 1), strings.Replace(h, `"c2ln"`, "c2ln", 1)} {
		if _, err := wechatpay.ParseAuthorization(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// out_bill_no is at most 32 letters and digits: a reference's number and
// back, for first and later attempts.
func TestOutBillNo(t *testing.T) {
	t.Parallel()
	for _, ref := range []string{"po_019ad6a1-7c2b-7f00-8e3a-0123456789ab", "po_019ad6a1-7c2b-7f00-8e3a-0123456789ab-2",
		"po_ffffffff-ffff-7fff-bfff-ffffffffffff-1234567", "po_00000000-0000-7000-8000-000000000000", "ref123"} {
		no, err := wechatpay.OutBillNo(ref)
		if err != nil || len(no) > 32 {
			t.Errorf("%s: %q %v", ref, no, err)
			continue
		}
		back, err := wechatpay.Reference(no)
		if err != nil || back != ref {
			t.Errorf("%s → %s → %s %v", ref, no, back, err)
		}
	}
	for _, ref := range []string{"po_x", "po_019ad6a1-7c2b-7f00-8e3a-0123456789ab-1", "po_019ad6a1-7c2b-7f00-8e3a-0123456789ab-02", "Pabc", "has space", ""} {
		if no, err := wechatpay.OutBillNo(ref); err == nil {
			t.Errorf("%q: %q", ref, no)
		}
	}
	for _, no := range []string{"P0000000000000000000000N1", "Pzzzzzzzzzzzzzzzzzzzzzz", "P123", "a-b"} {
		if ref, err := wechatpay.Reference(no); err == nil {
			t.Errorf("%q → %q", no, ref)
		}
	}
}

// The client against the fake: a transfer is taken once per out_bill_no
// (the same number again answers the same bill, with another amount
// INVALID_REQUEST), queried by it, NOT_FOUND for a number never sent; an
// answer lost is unknown, not a failure; a request signed with another key
// is refused by the platform, and an answer signed by another key is not
// believed.
func TestClientAgainstFake(t *testing.T) {
	t.Parallel()
	p, c, _ := platform(t)
	ctx := context.Background()
	req := wechatpay.TransferRequest{AppID: appID, OutBillNo: "Pabc", TransferSceneID: wechatpay.TransferSceneID, OpenID: "oUpF8uMuAJO_M2pxb1Q9zNjW0001",
		TransferAmount: 62000, TransferRemark: "gpubill payout",
		ReportInfos: []wechatpay.SceneReportInfo{{InfoType: "岗位类型", InfoContent: "GPU"}, {InfoType: "报酬说明", InfoContent: "x"}}}
	res, err := c.Transfer(ctx, req)
	if err != nil || res.State != wechatpay.StateAccepted || res.OutBillNo != "Pabc" {
		t.Fatalf("transfer: %+v %v", res, err)
	}
	again, err := c.Transfer(ctx, req)
	if err != nil || again.TransferBillNo != res.TransferBillNo || again.State != wechatpay.StateSuccess {
		t.Errorf("same out_bill_no again: %+v %v", again, err)
	}
	req2 := req
	req2.TransferAmount++
	if _, err := c.Transfer(ctx, req2); !wechatpay.IsCode(err, wechatpay.CodeInvalidRequest) || errors.Is(err, wechatpay.ErrUnavailable) {
		t.Errorf("another amount: %v", err)
	}
	if calls, b := p.Transfers("Pabc"); calls != 3 || b == nil || b.TransferAmount != 62000 {
		t.Errorf("platform: %d calls, %+v", calls, b)
	}
	bill, err := c.QueryTransfer(ctx, "Pabc")
	if err != nil || bill.State != wechatpay.StateSuccess || bill.TransferAmount != 62000 || bill.MchID != mchID {
		t.Errorf("query: %+v %v", bill, err)
	}
	if _, err := c.QueryTransfer(ctx, "Pnone"); !wechatpay.IsCode(err, wechatpay.CodeNotFound) {
		t.Errorf("query of a number never sent: %v", err)
	}
	// Missing report items, 2 000 yuan without the payee's name: refused.
	bad := req
	bad.OutBillNo, bad.ReportInfos = "Pbad1", nil
	if _, err := c.Transfer(ctx, bad); !wechatpay.IsCode(err, wechatpay.CodeParamError) {
		t.Errorf("no report infos: %v", err)
	}
	bad = req
	bad.OutBillNo, bad.TransferAmount = "Pbad2", wechatpay.UserNameMinFen
	if _, err := c.Transfer(ctx, bad); !wechatpay.IsCode(err, wechatpay.CodeParamError) {
		t.Errorf("2000 yuan without user_name: %v", err)
	}
	if bad.UserName, err = wechatpay.EncryptSensitive(c.Cfg.PlatformKey, "王芳"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Transfer(ctx, bad); err != nil {
		t.Errorf("2000 yuan with an encrypted user_name: %v", err)
	}
	if _, b := p.Transfers("Pbad2"); b == nil || b.UserName != "王芳" {
		t.Errorf("platform's bill %+v", b)
	}
	// The answer lost after the platform booked the bill.
	p.LoseAnswers(1)
	lost := req
	lost.OutBillNo = "Plost"
	if _, err := c.Transfer(ctx, lost); !errors.Is(err, wechatpay.ErrUnavailable) {
		t.Errorf("lost answer: %v", err)
	}
	if calls, b := p.Transfers("Plost"); calls != 1 || b == nil {
		t.Errorf("lost: %d calls %+v", calls, b)
	}
	// Signed with a key the platform does not know.
	forger := *c
	forger.Cfg.MerchantKey = key(t)
	if _, err := forger.QueryTransfer(ctx, "Pabc"); !wechatpay.IsCode(err, wechatpay.CodeSignError) {
		t.Errorf("request signed with another key: %v", err)
	}
	// Answers verified with a key that is not the platform's.
	doubt := *c
	doubt.Cfg.PlatformKey = &key(t).PublicKey
	if _, err := doubt.QueryTransfer(ctx, "Pabc"); !errors.Is(err, wechatpay.ErrUnavailable) || !errors.Is(err, wechatpay.ErrBadSignature) {
		t.Errorf("answer not the platform's: %v", err)
	}
	// A Native order: the same out_trade_no answers the same code.
	code, err := c.NativeOrder(ctx, "r-1", decimal.RequireFromString("100.00"), "tu0123456789", time.Now().Add(time.Hour))
	if err != nil || !strings.HasPrefix(code, "weixin://wxpay/bizpayurl?pr=") {
		t.Fatalf("native: %q %v", code, err)
	}
	if code2, err := c.NativeOrder(ctx, "r-1", decimal.RequireFromString("100.00"), "tu0123456789", time.Now().Add(time.Hour)); err != nil || code2 != code {
		t.Errorf("same order again: %q %v", code2, err)
	}
	if _, err := c.NativeOrder(ctx, "r-1", decimal.RequireFromString("100.001"), "tu0123456780", time.Now().Add(time.Hour)); err == nil {
		t.Error("an amount below the fen ordered")
	}
	if r := p.Refused(); len(r) != 4 {
		t.Errorf("refused %v, want INVALID_REQUEST, 2 PARAM_ERROR, SIGN_ERROR, and none for the rest", r)
	}
}

// A notification opens only as the platform signed and sealed it.
func TestOpenNotification(t *testing.T) {
	t.Parallel()
	p, c, _ := platform(t)
	body, err := p.Envelope("EV-1", wechatpay.EventTransactionSuccess, "transaction", "支付成功", map[string]any{"transaction_id": "42", "attach": "r-1"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.SignHeaders(body)
	if err != nil {
		t.Fatal(err)
	}
	n, pt, err := c.OpenNotification(h, body)
	if err != nil || n.ID != "EV-1" || !strings.Contains(string(pt), `"attach":"r-1"`) {
		t.Fatalf("open: %+v %s %v", n, pt, err)
	}
	// Sealed under another APIv3 key, properly signed: the resource does not open.
	other, err := fakewechatpay.New(mchID, appID, &c.Cfg.MerchantKey.PublicKey, merchantSerial, []byte("vutsrqponmlkjihgfedcba9876543210"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ob, err := other.Envelope("EV-2", wechatpay.EventTransactionSuccess, "transaction", "", map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	oh, err := p.SignHeaders(ob)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.OpenNotification(oh, ob); !errors.Is(err, wechatpay.ErrBadSignature) {
		t.Errorf("resource under another key: %v", err)
	}
	// Signed by another platform (its own serial, or ours with its key).
	fh, err := fakewechatpay.SignHeadersWith(other.Key, p.Serial, time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.OpenNotification(fh, body); !errors.Is(err, wechatpay.ErrBadSignature) {
		t.Errorf("signed with another key: %v", err)
	}
	sh, err := fakewechatpay.SignHeadersWith(p.Key, p.Serial, time.Now().Add(-10*time.Minute), body)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.OpenNotification(sh, body); !errors.Is(err, wechatpay.ErrStale) {
		t.Errorf("10 minutes old: %v", err)
	}
}

// Settings from files: all or nothing, each refusal naming the setting.
func TestConfigFromEnv(t *testing.T) {
	dir := t.TempDir()
	mk := key(t)
	der, err := x509.MarshalPKCS8PrivateKey(mk)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writePEM(t, dir, "apiclient_key.pem", "PRIVATE KEY", der)
	p, err := fakewechatpay.New(mchID, appID, &mk.PublicKey, merchantSerial, apiV3Key)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	certFile := filepath.Join(dir, "platform.pem")
	v3File := filepath.Join(dir, "apiv3.key")
	pubDer, err := x509.MarshalPKIXPublicKey(&p.Key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubFile := writePEM(t, dir, "pub_key.pem", "PUBLIC KEY", pubDer)
	for f, b := range map[string][]byte{certFile: p.Cert, v3File: append(apiV3Key, '\n')} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	full := map[string]string{wechatpay.EnvMchID: mchID, wechatpay.EnvAppID: appID, wechatpay.EnvMerchantKeyFile: keyFile,
		wechatpay.EnvMerchantSerial: merchantSerial, wechatpay.EnvPlatformCertFile: certFile, wechatpay.EnvAPIv3KeyFile: v3File,
		wechatpay.EnvNotifyURL: "https://pay.example.com/v1/rails/wechatpay/notify"}
	set := func(m map[string]string) {
		for _, k := range []string{wechatpay.EnvMchID, wechatpay.EnvAppID, wechatpay.EnvMerchantKeyFile, wechatpay.EnvMerchantSerial,
			wechatpay.EnvPlatformCertFile, wechatpay.EnvPlatformPublicKeyFile, wechatpay.EnvPlatformPublicKeyID, wechatpay.EnvAPIv3KeyFile,
			wechatpay.EnvNotifyURL, wechatpay.EnvBaseURL} {
			t.Setenv(k, m[k])
		}
	}
	set(nil)
	if _, on, err := wechatpay.ConfigFromEnv(time.Now()); on || err != nil {
		t.Fatalf("nothing set: on %v %v", on, err)
	}
	set(full)
	c, on, err := wechatpay.ConfigFromEnv(time.Now())
	if !on || err != nil || c.PlatformSerial != p.Serial || string(c.APIv3Key) != string(apiV3Key) || !c.MerchantKey.Equal(mk) {
		t.Fatalf("full: on %v %v %+v", on, err, c.PlatformSerial)
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range full {
			m[a] = b
		}
		m[k] = v
		return m
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("0123"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"no mchid":                 {with(wechatpay.EnvMchID, ""), wechatpay.EnvMchID},
		"no APIv3 key":             {with(wechatpay.EnvAPIv3KeyFile, ""), wechatpay.EnvAPIv3KeyFile},
		"short APIv3 key":          {with(wechatpay.EnvAPIv3KeyFile, short), "32"},
		"no platform key":          {with(wechatpay.EnvPlatformCertFile, ""), wechatpay.EnvPlatformCertFile},
		"key file missing":         {with(wechatpay.EnvMerchantKeyFile, filepath.Join(dir, "nope")), wechatpay.EnvMerchantKeyFile},
		"cert is not a cert":       {with(wechatpay.EnvPlatformCertFile, keyFile), wechatpay.EnvPlatformCertFile},
		"public key without id":    {with(wechatpay.EnvPlatformPublicKeyFile, pubFile), wechatpay.EnvPlatformCertFile},
		"notify url with query":    {with(wechatpay.EnvNotifyURL, "https://x.example/n?a=1"), wechatpay.EnvNotifyURL},
		"plain http to WeChat Pay": {with(wechatpay.EnvNotifyURL, "http://x.example/n"), "https addresses only"},
		// A URL's credentials stay out of the error (logs, crash reports).
		"notify url with a token":  {with(wechatpay.EnvNotifyURL, "https://x.example/n?token=q-s3cret"), wechatpay.EnvNotifyURL + " https://x.example/"},
		"plain http with userinfo": {with(wechatpay.EnvNotifyURL, "http://u:pw-s3cret@x.example/n"), "https addresses only"},
		"base url with userinfo":   {with(wechatpay.EnvBaseURL, "ftp://u:pw-s3cret@api.example"), wechatpay.EnvBaseURL + " ftp://xxxxx:xxxxx@api.example"},
	} {
		set(tc.env)
		if _, on, err := wechatpay.ConfigFromEnv(time.Now()); !on || err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: on %v err %v, want it naming %s and no credential", name, on, err, tc.want)
		}
	}
	pubMode := with(wechatpay.EnvPlatformCertFile, "")
	pubMode[wechatpay.EnvPlatformPublicKeyFile], pubMode[wechatpay.EnvPlatformPublicKeyID] = pubFile, "PUB_KEY_ID_0119000001"
	set(pubMode)
	if c, _, err := wechatpay.ConfigFromEnv(time.Now()); err != nil || c.PlatformSerial != "PUB_KEY_ID_0119000001" {
		t.Errorf("public-key mode: %v %q", err, c.PlatformSerial)
	}
	set(full)
	if _, _, err := wechatpay.ConfigFromEnv(time.Now().Add(48 * time.Hour)); err == nil || !strings.Contains(err.Error(), "not now") {
		t.Errorf("an expired platform certificate: %v", err)
	}
}
