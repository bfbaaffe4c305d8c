package ledger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/ledger"
)

// GPUBILL_RUNWAY_WARN is a positive duration: 0 was taken as unset (the
// default's 2h, silently) and a negative one refused as not positive.
func TestRunwayWarnFromEnv(t *testing.T) {
	for _, tt := range []struct {
		give string
		want time.Duration
		ok   bool
	}{
		{"", 0, true}, // unset: lease control's default
		{"30m", 30 * time.Minute, true},
		{"0", 0, false},
		{"0s", 0, false},
		{"-1h", 0, false},
		{"soon", 0, false},
	} {
		t.Setenv("GPUBILL_RUNWAY_WARN", tt.give)
		c, err := ledger.LeaseControlConfigFromEnv()
		if (err == nil) != tt.ok || (err == nil && c.RunwayWarn != tt.want) {
			t.Errorf("GPUBILL_RUNWAY_WARN=%q: %v, %v; want %v, ok %v", tt.give, c.RunwayWarn, err, tt.want, tt.ok)
		}
	}
}

// A bad GPUBILL_LEASE_CONTROL_URL was quoted whole in start-up's error,
// with the token in its userinfo or query string: the error goes to logs
// and crash reports. It names the setting and what is wrong, and none of
// the URL's credentials.
func TestLeaseControlURLErrorHidesCredentials(t *testing.T) {
	t.Setenv("GPUBILL_LEASE_CONTROL_SECRET", strings.Repeat("k", 32))
	t.Setenv("GPUBILL_RUNWAY_WARN", "")
	for _, tt := range []struct {
		give, secret, want string
	}{
		{"ftp://scheduler:pw-s3cret@sched.example/hook", "pw-s3cret", "sched.example"},
		{"ftp://tok-s3cret@sched.example/hook", "tok-s3cret", "sched.example"},
		{"https:///hook?token=q-s3cret", "q-s3cret", "GPUBILL_LEASE_CONTROL_URL"},
		{"htps://sched.example/hook/p-s3cret?sig=q-s3cret#f-s3cret", "s3cret", "htps://sched.example"},
		{"scheduler:pw-s3cret@sched.example", "pw-s3cret", "GPUBILL_LEASE_CONTROL_URL"},
		{"https://sched.example:bad/?token=q-s3cret", "q-s3cret", "GPUBILL_LEASE_CONTROL_URL"},
	} {
		t.Setenv("GPUBILL_LEASE_CONTROL_URL", tt.give)
		_, err := ledger.LeaseControlConfigFromEnv()
		if err == nil || strings.Contains(err.Error(), tt.secret) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("GPUBILL_LEASE_CONTROL_URL=%q: %v; want an error naming %q without %q", tt.give, err, tt.want, tt.secret)
		}
	}
}
