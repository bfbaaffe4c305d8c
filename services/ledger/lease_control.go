package ledger

import (
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// leaseSecretLenMin is the shortest HMAC key the lease control webhook takes.
const leaseSecretLenMin = 32

// LeaseControlConfig is lease control's configuration (environment, DESIGN
// §10 style).
type LeaseControlConfig struct {
	// URL is the marketplace scheduler's webhook for warn, stop and resume
	// requests (GPUBILL_LEASE_CONTROL_URL); "" = events only.
	URL string
	// Secret signs each webhook (GPUBILL_LEASE_CONTROL_SECRET, at least 32
	// bytes; required with URL).
	Secret string
	// RunwayWarn is the runway under which a renter is warned
	// (GPUBILL_RUNWAY_WARN, default 2h).
	RunwayWarn time.Duration
}

// LeaseControlConfigFromEnv reads LeaseControlConfig from the environment.
func LeaseControlConfigFromEnv() (LeaseControlConfig, error) {
	c := LeaseControlConfig{URL: os.Getenv("GPUBILL_LEASE_CONTROL_URL"), Secret: os.Getenv("GPUBILL_LEASE_CONTROL_SECRET")}
	if v := os.Getenv("GPUBILL_RUNWAY_WARN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("GPUBILL_RUNWAY_WARN: %w", err)
		}
		if d <= 0 { // 0 was taken as unset: the default's 2h, silently
			return c, fmt.Errorf("GPUBILL_RUNWAY_WARN %s: want a positive duration", v)
		}
		c.RunwayWarn = d
	}
	return c, c.Check()
}

// Check refuses a configuration lease control cannot act on.
func (c LeaseControlConfig) Check() error {
	if c.RunwayWarn < 0 {
		return fmt.Errorf("GPUBILL_RUNWAY_WARN %s: want a positive duration", c.RunwayWarn)
	}
	if c.URL == "" {
		return nil
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Not c.URL: a scheduler's webhook may carry its token (userinfo,
		// query) and this error reaches logs and crash reports.
		return fmt.Errorf("GPUBILL_LEASE_CONTROL_URL %s: want an http(s) URL with a host", apperr.RedactURL(c.URL))
	}
	if len(c.Secret) < leaseSecretLenMin {
		return fmt.Errorf("GPUBILL_LEASE_CONTROL_SECRET: at least %d bytes with GPUBILL_LEASE_CONTROL_URL", leaseSecretLenMin)
	}
	return nil
}
