package domain

import (
	"strings"
	"testing"
)

// Check passes a split whose parts are none negative and make gross
// exactly, and refuses any other: a negative part the others make up for
// (3.00 + −1.00 + 8.00 = 10.00 moved a credit onto the wrong side of the
// ledger), parts a cent over or under gross, tax without a jurisdiction.
func TestSplitCheck(t *testing.T) {
	split := func(gross, commission, tax, net string) Split {
		return Split{Currency: "CNY", Gross: d(gross), Commission: d(commission), Tax: d(tax), Net: d(net), Jurisdiction: "CN"}
	}
	noJurisdiction := split("10.00", "2.50", "1.50", "6.00")
	noJurisdiction.Jurisdiction = ""
	for _, tt := range []struct {
		name    string
		give    Split
		wantErr string // "" passes
	}{
		{"exact", split("10.00", "2.50", "1.50", "6.00"), ""},
		{"all net", split("0.01", "0", "0", "0.01"), ""},
		{"negative tax", split("10.00", "3.00", "-1.00", "8.00"), "negative part"},
		{"negative commission", split("10.00", "-1.00", "3.00", "8.00"), "negative part"},
		{"negative net", split("10.00", "8.00", "3.00", "-1.00"), "negative part"},
		{"a cent over", split("10.00", "2.50", "1.50", "6.01"), "!= gross 10 CNY"},
		{"a cent under", split("10.00", "2.50", "1.49", "6.00"), "!= gross 10 CNY"},
		{"tax without a jurisdiction", noJurisdiction, "without a jurisdiction"},
	} {
		err := tt.give.Check()
		if tt.wantErr == "" && err != nil {
			t.Errorf("%s: %v, want it to pass", tt.name, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.wantErr)
		}
	}
}
