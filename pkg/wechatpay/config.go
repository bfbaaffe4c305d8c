package wechatpay

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Settings (environment) of the rail; keys and certificates are read from files.
const (
	EnvMchID                 = "GPUBILL_WECHATPAY_MCHID"
	EnvAppID                 = "GPUBILL_WECHATPAY_APPID"
	EnvMerchantKeyFile       = "GPUBILL_WECHATPAY_MERCHANT_KEY_FILE" // apiclient_key.pem
	EnvMerchantSerial        = "GPUBILL_WECHATPAY_MERCHANT_SERIAL"
	EnvPlatformCertFile      = "GPUBILL_WECHATPAY_PLATFORM_CERT_FILE"       // the platform certificate (PEM)
	EnvPlatformPublicKeyFile = "GPUBILL_WECHATPAY_PLATFORM_PUBLIC_KEY_FILE" // or the platform public key (pub_key.pem) …
	EnvPlatformPublicKeyID   = "GPUBILL_WECHATPAY_PLATFORM_PUBLIC_KEY_ID"   // … and its id (PUB_KEY_ID_…)
	EnvAPIv3KeyFile          = "GPUBILL_WECHATPAY_APIV3_KEY_FILE"
	EnvNotifyURL             = "GPUBILL_WECHATPAY_NOTIFY_URL"
	EnvBaseURL               = "GPUBILL_WECHATPAY_BASE_URL"
)

var envAll = []string{EnvMchID, EnvAppID, EnvMerchantKeyFile, EnvMerchantSerial, EnvPlatformCertFile, EnvPlatformPublicKeyFile,
	EnvPlatformPublicKeyID, EnvAPIv3KeyFile, EnvNotifyURL, EnvBaseURL}

// ConfigFromEnv reads the rail's settings: on (true) when any is set, and
// then every required one must be and every file must read and parse (the
// merchant key, the platform certificate or public key with its id, a
// 32-byte APIv3 key); an error names the setting.
func ConfigFromEnv(now time.Time) (Config, bool, error) {
	env := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
	on := false
	for _, e := range envAll {
		if env(e) != "" {
			on = true
		}
	}
	if !on {
		return Config{}, false, nil
	}
	c := Config{MchID: env(EnvMchID), AppID: env(EnvAppID), MerchantSerial: strings.ToUpper(env(EnvMerchantSerial)),
		NotifyURL: env(EnvNotifyURL), BaseURL: env(EnvBaseURL)}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(env(name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return b, nil
	}
	if env(EnvMerchantKeyFile) != "" {
		b, err := read(EnvMerchantKeyFile)
		if err != nil {
			return c, true, err
		}
		if c.MerchantKey, err = ParsePrivateKey(b); err != nil {
			return c, true, fmt.Errorf("%s %s: %w", EnvMerchantKeyFile, env(EnvMerchantKeyFile), err)
		}
	}
	switch cert, pub := env(EnvPlatformCertFile), env(EnvPlatformPublicKeyFile); {
	case cert != "" && pub != "":
		return c, true, fmt.Errorf("%s and %s are both set: configure one platform key", EnvPlatformCertFile, EnvPlatformPublicKeyFile)
	case cert != "":
		b, err := read(EnvPlatformCertFile)
		if err != nil {
			return c, true, err
		}
		if c.PlatformKey, c.PlatformSerial, err = ParsePlatformCert(b, now); err != nil {
			return c, true, fmt.Errorf("%s %s: %w", EnvPlatformCertFile, cert, err)
		}
	case pub != "":
		if env(EnvPlatformPublicKeyID) == "" {
			return c, true, fmt.Errorf("%s needs %s (the key's id, PUB_KEY_ID_…)", EnvPlatformPublicKeyFile, EnvPlatformPublicKeyID)
		}
		b, err := read(EnvPlatformPublicKeyFile)
		if err != nil {
			return c, true, err
		}
		if c.PlatformKey, err = ParsePublicKey(b); err != nil {
			return c, true, fmt.Errorf("%s %s: %w", EnvPlatformPublicKeyFile, pub, err)
		}
		c.PlatformSerial = env(EnvPlatformPublicKeyID)
	}
	if env(EnvAPIv3KeyFile) != "" {
		b, err := read(EnvAPIv3KeyFile)
		if err != nil {
			return c, true, err
		}
		c.APIv3Key = []byte(strings.TrimSpace(string(b)))
	}
	return c, true, c.Check()
}
