package domain

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// The split by a given commission: tax by the rule on gross − commission,
// rounded in the currency (half away from zero, DESIGN §3: one rounding
// function per currency), net the rest; expected values worked by hand.
// 100.01 at 20 % is 20.002 exactly: rounded, never raised to 20.01. The
// production rules (flat 20 %, cn_labour) never land on a half cent in
// CNY, so a flat 25 % rule pins the tie: 0.10 × 25 % = 0.025 is 0.03 half
// away from zero (0.02 half to even, or truncated).
func TestSplitByCommission(t *testing.T) {
	cny, err := money.Lookup("CNY")
	if err != nil {
		t.Fatal(err)
	}
	type give struct{ gross, commission, rate string }
	for _, tt := range []struct {
		give             give
		wantTax, wantNet string
		wantTaxable      string
	}{
		{give: give{"100.00", "15.00", "0.20"}, wantTax: "17.00", wantNet: "68.00", wantTaxable: "85.00"},
		{give: give{"0.05", "0.02", "0.20"}, wantTax: "0.01", wantNet: "0.02", wantTaxable: "0.03"},
		{give: give{"10.00", "10.00", "0.20"}, wantTax: "0", wantNet: "0", wantTaxable: "0"},
		{give: give{"100.01", "0.00", "0.20"}, wantTax: "20.00", wantNet: "80.01", wantTaxable: "100.01"},
		{give: give{"0.10", "0.00", "0.25"}, wantTax: "0.03", wantNet: "0.07", wantTaxable: "0.10"},
	} {
		w := Withholding{Gross: d(tt.give.gross), TaxProfile: split.ProfileIndividual}
		if err := w.SplitByCommission(cny, d(tt.give.commission), split.Flat{Rate: d(tt.give.rate)}); err != nil {
			t.Fatal(err)
		}
		if !w.Tax.Equal(d(tt.wantTax)) || !w.Net.Equal(d(tt.wantNet)) || !w.TaxableBase.Equal(d(tt.wantTaxable)) {
			t.Errorf("%v: tax %s net %s taxable %s, want %s %s %s", tt.give, w.Tax, w.Net, w.TaxableBase, tt.wantTax, tt.wantNet, tt.wantTaxable)
		}
		if err := w.Check(); err != nil {
			t.Errorf("%v: %v", tt.give, err)
		}
	}
}

// Check refuses parts that do not make gross, and a negative net.
func TestWithholdingCheck(t *testing.T) {
	for _, w := range []Withholding{
		{Gross: d("10"), Commission: d("1"), Tax: d("1"), Net: d("7.99")},
		{Gross: d("10"), Commission: d("8"), Tax: d("3"), Net: d("-1")},
	} {
		if err := w.Check(); err == nil {
			t.Errorf("%+v passed the check", w)
		}
	}
}

// The taxpayer: the request's, else the provider's, else individual / CN.
func TestTaxpayer(t *testing.T) {
	known := &Profile{TaxProfile: split.ProfileEnterprise, Jurisdiction: "hk"}
	for _, tt := range []struct {
		profile, jurisdiction string
		known                 *Profile
		want                  [2]string
	}{
		{"", "", nil, [2]string{split.ProfileIndividual, DefaultJurisdiction}},
		{"", "", known, [2]string{split.ProfileEnterprise, "HK"}},
		{split.ProfileIndividual, "sg", known, [2]string{split.ProfileIndividual, "SG"}},
	} {
		p, j := Taxpayer(tt.profile, tt.jurisdiction, tt.known)
		if [2]string{p, j} != tt.want {
			t.Errorf("Taxpayer(%q, %q, %v) = %s %s, want %v", tt.profile, tt.jurisdiction, tt.known, p, j, tt.want)
		}
	}
}

// A remittance moves tax:withheld:{j} to bank:client.
func TestRemittanceLegs(t *testing.T) {
	dr, cr := Remittance{Jurisdiction: "CN"}.Legs()
	if dr != "tax:withheld:CN" || cr != "bank:client" {
		t.Errorf("legs %s / %s", dr, cr)
	}
}

// A jurisdiction's levels: itself, then each it belongs to.
func TestJurisdictionLevels(t *testing.T) {
	for give, want := range map[string]string{"CN": "CN", "CN-BJ": "CN-BJ CN", "CN-BJ-HD": "CN-BJ-HD CN-BJ CN", "US_CA": "US_CA", "": ""} {
		if got := strings.Join(JurisdictionLevels(give), " "); got != want {
			t.Errorf("JurisdictionLevels(%q) = %q, want %q", give, got, want)
		}
	}
}
