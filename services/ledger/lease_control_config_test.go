package ledger_test

import (
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
