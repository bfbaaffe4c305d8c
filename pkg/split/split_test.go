package split

import (
	"testing"

	"github.com/shopspring/decimal"
	"pgregory.net/rapid"

	"github.com/gpubill/gpubill/pkg/money"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestComputeDefault(t *testing.T) {
	tests := []struct {
		give                 string
		tier, profile        string
		commission, tax, net string
	}{
		{"1000.00", TierStandard, ProfileIndividual, "250.00", "150.00", "600.00"},
		{"1000.00", TierPro, ProfileIndividual, "200.00", "160.00", "640.00"},
		{"1000.00", TierPartner, ProfileEnterprise, "150.00", "0.00", "850.00"},
		{"0.01", TierStandard, ProfileIndividual, "0.00", "0.00", "0.01"},
		{"33.33", TierStandard, ProfileIndividual, "8.33", "5.00", "20.00"},
	}
	cur := money.MustLookup("CNY")
	rule, _ := RuleFor(RuleSetDefault)
	for _, tt := range tests {
		rate, err := DefaultCommission().Rate(tt.tier)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Compute(cur, dec(tt.give), rate, rule, tt.profile)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Commission.Equal(dec(tt.commission)) || !r.Tax.Equal(dec(tt.tax)) || !r.Net.Equal(dec(tt.net)) {
			t.Errorf("%s %s %s: got %s/%s/%s want %s/%s/%s", tt.give, tt.tier, tt.profile, r.Commission, r.Tax, r.Net, tt.commission, tt.tax, tt.net)
		}
	}
}

func TestCNLabourBrackets(t *testing.T) {
	tests := []struct{ give, want string }{
		{"800", "0"},
		{"3000", "440"},     // (3000-800)*20%
		{"4000", "640"},     // (4000-800)*20%
		{"10000", "1600"},   // 8000*20%
		{"30000", "5200"},   // 24000*30%-2000
		{"100000", "25000"}, // 80000*40%-7000
	}
	for _, tt := range tests {
		got, err := CNLabour{}.Withhold(ProfileIndividual, dec(tt.give))
		if err != nil || !got.Equal(dec(tt.want)) {
			t.Errorf("CNLabour(%s) = %s %v, want %s", tt.give, got, err, tt.want)
		}
	}
}

func TestBounds(t *testing.T) {
	p := DefaultCommission()
	p.Rates[TierPro] = dec("0.30")
	if err := p.Validate(); err == nil {
		t.Fatal("30 % accepted")
	}
	if _, err := p.Rate(TierPro); err == nil {
		t.Fatal("30 % rate returned")
	}
	if err := DefaultCommission().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSplitSumsToGross(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cur := money.MustLookup(rapid.SampledFrom([]string{"CNY", "JPY", "USDC"}).Draw(t, "cur"))
		gross := decimal.New(rapid.Int64Range(0, 1e12).Draw(t, "g"), -cur.MinorUnits)
		tier := rapid.SampledFrom([]string{TierStandard, TierPro, TierPartner}).Draw(t, "tier")
		rs := rapid.SampledFrom([]string{RuleSetFlat20, RuleSetCNLabour}).Draw(t, "rule")
		profile := rapid.SampledFrom([]string{ProfileIndividual, ProfileEnterprise}).Draw(t, "profile")
		rate, _ := DefaultCommission().Rate(tier)
		rule, _ := RuleFor(rs)
		r, err := Compute(cur, gross, rate, rule, profile)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Commission.Add(r.Tax).Add(r.Net).Equal(gross) {
			t.Fatalf("parts do not sum")
		}
		for _, p := range []decimal.Decimal{r.Commission, r.Tax, r.Net} {
			if p.IsNegative() || !p.Equal(cur.Round(p)) {
				t.Fatalf("bad part %s", p)
			}
		}
	})
}
