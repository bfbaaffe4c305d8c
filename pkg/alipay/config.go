package alipay

import (
	"fmt"
	"os"
	"strings"
)

// Settings (environment) of the rail; the keys are read from files.
const (
	EnvAppID          = "GPUBILL_ALIPAY_APP_ID"
	EnvPrivateKeyFile = "GPUBILL_ALIPAY_PRIVATE_KEY_FILE" // the app's private key (PEM or the key tool's base64)
	EnvPublicKeyFile  = "GPUBILL_ALIPAY_PUBLIC_KEY_FILE"  // Alipay's public key (the platform's, not the app's)
	EnvGatewayURL     = "GPUBILL_ALIPAY_GATEWAY_URL"
	EnvNotifyURL      = "GPUBILL_ALIPAY_NOTIFY_URL"
	EnvSellerID       = "GPUBILL_ALIPAY_SELLER_ID"
	EnvPayerName      = "GPUBILL_ALIPAY_PAYER_NAME"
)

var envAll = []string{EnvAppID, EnvPrivateKeyFile, EnvPublicKeyFile, EnvGatewayURL, EnvNotifyURL, EnvSellerID, EnvPayerName}

// ConfigFromEnv reads the rail's settings: on (true) when any is set, and
// then every required one must be, and the key files must read and parse
// as RSA keys of 2048 bits or more; an error names the setting.
func ConfigFromEnv() (Config, bool, error) {
	on := false
	for _, e := range envAll {
		if strings.TrimSpace(os.Getenv(e)) != "" {
			on = true
		}
	}
	if !on {
		return Config{}, false, nil
	}
	c := Config{AppID: strings.TrimSpace(os.Getenv(EnvAppID)), GatewayURL: strings.TrimSpace(os.Getenv(EnvGatewayURL)),
		NotifyURL: strings.TrimSpace(os.Getenv(EnvNotifyURL)), SellerID: strings.TrimSpace(os.Getenv(EnvSellerID)),
		PayerShowName: strings.TrimSpace(os.Getenv(EnvPayerName))}
	if f := strings.TrimSpace(os.Getenv(EnvPrivateKeyFile)); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return c, true, fmt.Errorf("%s: %w", EnvPrivateKeyFile, err)
		}
		if c.PrivateKey, err = ParsePrivateKey(b); err != nil {
			return c, true, fmt.Errorf("%s %s: %w", EnvPrivateKeyFile, f, err)
		}
	}
	if f := strings.TrimSpace(os.Getenv(EnvPublicKeyFile)); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return c, true, fmt.Errorf("%s: %w", EnvPublicKeyFile, err)
		}
		if c.PlatformKey, err = ParsePublicKey(b); err != nil {
			return c, true, fmt.Errorf("%s %s: %w", EnvPublicKeyFile, f, err)
		}
	}
	if c.PrivateKey != nil && c.PlatformKey != nil && c.PrivateKey.PublicKey.Equal(c.PlatformKey) {
		return c, true, fmt.Errorf("%s holds the app's own public key: it must be Alipay's (the platform's) public key", EnvPublicKeyFile)
	}
	return c, true, c.Check()
}
