package config

import (
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
