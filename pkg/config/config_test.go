package config

import (
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

func parse(t *testing.T, args ...string) Common {
	t.Helper()
	var cfg struct{ Common }
	p, err := kong.New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cfg.Common
}

// Tax periods are Asia/Shanghai months unless GPUBILL_TAX_TIMEZONE (or
// --tax-timezone) names another zone; an unknown zone is refused.
func TestTaxPeriods(t *testing.T) {
	tests := []struct {
		env, flag string
		want      string
	}{
		{"", "", "Asia/Shanghai"},
		{"UTC", "", "UTC"},
		{"UTC", "--tax-timezone=Europe/Berlin", "Europe/Berlin"},
	}
	for _, tt := range tests {
		t.Setenv("GPUBILL_TAX_TIMEZONE", tt.env)
		var args []string
		if tt.flag != "" {
			args = append(args, tt.flag)
		}
		cal, err := parse(t, args...).TaxPeriods()
		if err != nil || cal.Location().String() != tt.want {
			t.Errorf("env %q flag %q: zone %v, %v; want %s", tt.env, tt.flag, cal.Location(), err, tt.want)
		}
	}
	for _, give := range []string{"Mars/Olympus", "Local"} {
		_, err := Common{TaxTimezone: give}.TaxPeriods()
		if err == nil || !strings.Contains(err.Error(), "GPUBILL_TAX_TIMEZONE") || !strings.Contains(err.Error(), give) {
			t.Errorf("zone %q: %v, want an error naming GPUBILL_TAX_TIMEZONE and the zone", give, err)
		}
	}
}

// Stream limits default to 1 GiB and one replica, come from
// GPUBILL_STREAM_MAX_BYTES / GPUBILL_STREAM_REPLICAS or their flags, and
// out-of-range values are refused naming the variable.
func TestStreamLimits(t *testing.T) {
	for _, v := range []string{"GPUBILL_STREAM_MAX_BYTES", "GPUBILL_STREAM_REPLICAS"} {
		t.Setenv(v, "") // restored after the test
		if err := os.Unsetenv(v); err != nil {
			t.Fatal(err)
		}
	}
	lim, err := parse(t).StreamLimits()
	if err != nil || lim.MaxBytes != 1<<30 || lim.Replicas != 1 {
		t.Errorf("defaults: %+v, %v; want 1 GiB and 1 replica", lim, err)
	}
	t.Setenv("GPUBILL_STREAM_MAX_BYTES", "1048576")
	t.Setenv("GPUBILL_STREAM_REPLICAS", "3")
	if lim, err := parse(t).StreamLimits(); err != nil || lim.MaxBytes != 1<<20 || lim.Replicas != 3 {
		t.Errorf("from env: %+v, %v", lim, err)
	}
	if lim, err := parse(t, "--stream-max-bytes=2097152", "--stream-replicas=5").StreamLimits(); err != nil || lim.MaxBytes != 2<<20 || lim.Replicas != 5 {
		t.Errorf("from flags: %+v, %v", lim, err)
	}
	if lim, err := (Common{}).StreamLimits(); err != nil || lim.MaxBytes != 1<<30 || lim.Replicas != 1 {
		t.Errorf("zero Common: %+v, %v; want the defaults", lim, err)
	}
	for _, give := range []Common{{StreamMaxBytes: 1000, StreamReplicas: 1}, {StreamMaxBytes: 1 << 30, StreamReplicas: -1}, {StreamMaxBytes: 1 << 30, StreamReplicas: 7}} {
		if _, err := give.StreamLimits(); err == nil || !strings.Contains(err.Error(), "GPUBILL_STREAM_") {
			t.Errorf("%+v: %v, want an error naming the variable", give, err)
		}
	}
}

// A negative GPUBILL_CYCLE_GRACE is refused naming the variable (it closed
// each cycle before its end); 0 and the default are taken.
func TestCycleGrace(t *testing.T) {
	t.Setenv("GPUBILL_CYCLE_GRACE", "-48h")
	_, err := parse(t).Calendar()
	if err == nil || !strings.Contains(err.Error(), "GPUBILL_CYCLE_GRACE") {
		t.Fatalf("GPUBILL_CYCLE_GRACE=-48h: %v; want an error naming it", err)
	}
	for env, want := range map[string]string{"0s": "0s", "": "24h0m0s"} {
		t.Setenv("GPUBILL_CYCLE_GRACE", env)
		if env == "" {
			if err := os.Unsetenv("GPUBILL_CYCLE_GRACE"); err != nil {
				t.Fatal(err)
			}
		}
		cal, err := parse(t).Calendar()
		if err != nil || cal.Grace.String() != want {
			t.Errorf("GPUBILL_CYCLE_GRACE=%q: grace %v, %v; want %s", env, cal.Grace, err, want)
		}
	}
}

// GPUBILL_LATE_ARRIVAL_DAYS is 35 unless set; 0 or more than ten years is
// refused naming it.
func TestLateArrival(t *testing.T) {
	t.Setenv("GPUBILL_LATE_ARRIVAL_DAYS", "")
	if err := os.Unsetenv("GPUBILL_LATE_ARRIVAL_DAYS"); err != nil {
		t.Fatal(err)
	}
	if d, err := parse(t).LateArrival(); err != nil || d.Hours() != 35*24 {
		t.Fatalf("default: %v, %v; want 35 days", d, err)
	}
	t.Setenv("GPUBILL_LATE_ARRIVAL_DAYS", "7")
	if d, err := parse(t).LateArrival(); err != nil || d.Hours() != 7*24 {
		t.Fatalf("7: %v, %v; want 7 days", d, err)
	}
	if d, err := (Common{}).LateArrival(); err != nil || d.Hours() != 35*24 {
		t.Fatalf("a Common made in code: %v, %v; want 35 days", d, err)
	}
	for _, bad := range []string{"0", "-1", "3661", "7d", "1.5"} {
		if _, err := (Common{LateArrivalDays: bad}).LateArrival(); err == nil || !strings.Contains(err.Error(), "GPUBILL_LATE_ARRIVAL_DAYS") {
			t.Errorf("%q days: %v; want an error naming GPUBILL_LATE_ARRIVAL_DAYS", bad, err)
		}
	}
}
