package split

import (
	"strings"
	"testing"
)

// The default configuration is DefaultCommission, with its version; a
// configuration names its version by content (rate order and trailing zeros
// do not matter, a changed rate does); a bad one is refused naming why.
func TestParseCommission(t *testing.T) {
	def, err := ParseCommission(CommissionRatesDefault, CommissionBoundsDefault)
	if err != nil {
		t.Fatal(err)
	}
	if def.Version() != DefaultCommission().Version() {
		t.Fatalf("default config version %s, DefaultCommission %s", def.Version(), DefaultCommission().Version())
	}
	same, err := ParseCommission(" partner=0.150, standard=0.25 ,pro=0.2", "0.15 - 0.250")
	if err != nil || same.Version() != def.Version() {
		t.Fatalf("reordered default: %v, version %s, want %s", err, same.Version(), def.Version())
	}
	other, err := ParseCommission("standard=0.22,pro=0.20,partner=0.15", CommissionBoundsDefault)
	if err != nil || other.Version() == def.Version() || !strings.HasPrefix(other.Version(), "cc-") {
		t.Fatalf("changed rate: %v, version %s (default %s)", err, other.Version(), def.Version())
	}
	for _, tt := range []struct{ give, bounds, want string }{
		{"standard=0.30,pro=0.20,partner=0.15", "0.15-0.25", "outside platform bounds"},
		{"standard=0.25,pro=0.20", "0.15-0.25", "no rate for tier partner"},
		{"standard=0.25,pro=0.20,partner=0.15,gold=0.1", "0.15-0.25", "want tier=rate"},
		{"standard=0.25,standard=0.20,partner=0.15", "0.15-0.25", "twice"},
		{"standard=x,pro=0.20,partner=0.15", "0.15-0.25", "not a decimal"},
		{CommissionRatesDefault, "0.25", "want min-max"},
	} {
		if _, err := ParseCommission(tt.give, tt.bounds); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseCommission(%q, %q) = %v, want an error with %q", tt.give, tt.bounds, err, tt.want)
		}
	}
}
