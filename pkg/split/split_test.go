package split

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
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
	rule := mustRule(t, RuleSetDefault)
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

// Above int64's 9.22 × 10^18 minor units: 10 ETH splits as 1000 CNY does.
func TestComputeBigAmounts(t *testing.T) {
	tests := []struct {
		cur, gross, tier, profile string
		commission, tax, net      string
	}{
		{"ETH", "10", TierStandard, ProfileIndividual, "2.5", "1.5", "6"},
		{"ETH", "10.000000000000000001", TierPro, ProfileIndividual, "2", "1.6", "6.400000000000000001"},
		{"ETH", "1000000", TierPartner, ProfileEnterprise, "150000", "0", "850000"},
		{"USDC", "100000000000000.000001", TierStandard, ProfileIndividual, "25000000000000", "15000000000000", "60000000000000.000001"},
	}
	rule := mustRule(t, RuleSetDefault)
	for _, tt := range tests {
		rate, err := DefaultCommission().Rate(tt.tier)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Compute(money.MustLookup(tt.cur), dec(tt.gross), rate, rule, tt.profile)
		if err != nil {
			t.Errorf("%s %s: %v", tt.gross, tt.cur, err)
			continue
		}
		if !r.Commission.Equal(dec(tt.commission)) || !r.Tax.Equal(dec(tt.tax)) || !r.Net.Equal(dec(tt.net)) {
			t.Errorf("%s %s %s %s: got %s/%s/%s want %s/%s/%s", tt.gross, tt.cur, tt.tier, tt.profile,
				r.Commission, r.Tax, r.Net, tt.commission, tt.tax, tt.net)
		}
	}
}

// drawGrossUnits draws a gross in minor units with a number of digits uniform
// in 1..40, so amounts above int64 (19 digits; 9.22 ETH) are drawn as often as
// small ones.
func drawGrossUnits(t *rapid.T) *big.Int {
	const digitsMax = 40
	n := rapid.IntRange(1, digitsMax).Draw(t, "gross_digits")
	digits := rapid.SliceOfN(rapid.IntRange(0, 9), n, n).Draw(t, "gross")
	u := new(big.Int)
	for _, x := range digits {
		u.Mul(u, big.NewInt(10)).Add(u, big.NewInt(int64(x)))
	}
	return u
}

// withinOneUnit reports whether part (a decimal in minor units) is its exact
// share rounded down or up.
func withinOneUnit(cur money.Currency, part decimal.Decimal, exact *big.Rat) bool {
	scaled := new(big.Rat).Mul(exact, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(cur.MinorUnits)), nil)))
	floor := new(big.Int).Div(scaled.Num(), scaled.Denom())
	ceil := new(big.Int).Set(floor)
	if !scaled.IsInt() {
		ceil.Add(ceil, big.NewInt(1))
	}
	pu := part.Shift(cur.MinorUnits).BigInt()
	return part.Equal(cur.Round(part)) && pu.Cmp(floor) >= 0 && pu.Cmp(ceil) <= 0
}

// Across every currency's range, the flat rule's split is proportional: the
// commission within one minor unit of gross × rate, the tax within one of
// 20 % of (gross − gross × rate) for individuals (0 for enterprises), the net
// within one of the rest, and the three sum to gross. The exact shares are
// computed here with big.Rat from the inputs, so commission and tax swapped,
// or a part off by more than rounding, fail.
func TestSplitProportionalAcrossTheRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cur := money.MustLookup(rapid.SampledFrom(money.Codes()).Draw(t, "cur"))
		units := drawGrossUnits(t)
		gross := decimal.NewFromBigInt(units, -cur.MinorUnits)
		tier := rapid.SampledFrom([]string{TierStandard, TierPro, TierPartner}).Draw(t, "tier")
		profile := rapid.SampledFrom([]string{ProfileIndividual, ProfileEnterprise}).Draw(t, "profile")
		rateStr := map[string]string{TierStandard: "1/4", TierPro: "1/5", TierPartner: "3/20"}[tier]
		rate := mustRate(t, tier)
		rule := mustRule(t, RuleSetFlat20)
		r, err := Compute(cur, gross, rate, rule, profile)
		if err != nil {
			t.Fatal(err)
		}
		g := gross.Rat()
		rateRat, _ := new(big.Rat).SetString(rateStr)
		commission := new(big.Rat).Mul(g, rateRat)
		tax := new(big.Rat)
		if profile == ProfileIndividual {
			tax.Mul(new(big.Rat).Sub(g, commission), big.NewRat(1, 5))
		}
		net := new(big.Rat).Sub(new(big.Rat).Sub(g, commission), tax)
		for _, p := range []struct {
			name  string
			got   decimal.Decimal
			exact *big.Rat
		}{{"commission", r.Commission, commission}, {"tax", r.Tax, tax}, {"net", r.Net, net}} {
			if !withinOneUnit(cur, p.got, p.exact) {
				t.Fatalf("%s %s %s: %s = %s, exact share %s", gross, cur.Code, tier, p.name, p.got, p.exact.FloatString(int(cur.MinorUnits)+3))
			}
		}
		if !r.Commission.Add(r.Tax).Add(r.Net).Equal(gross) {
			t.Fatalf("parts %s + %s + %s do not sum to %s", r.Commission, r.Tax, r.Net, gross)
		}
	})
}

// The China labour rule across the range: parts in minor units, never
// negative, summing to gross, the tax within one minor unit of what the
// rule withholds on the exact base and exactly the rule on the taxable base
// the certificate prints, rounded (the brackets themselves are checked in
// TestCNLabourBrackets).
func TestSplitCNLabourAcrossTheRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cur := money.MustLookup("CNY") // its thresholds are yuan (TestCNLabourIsYuanOnly)
		gross := decimal.NewFromBigInt(drawGrossUnits(t), -cur.MinorUnits)
		tier := rapid.SampledFrom([]string{TierStandard, TierPro, TierPartner}).Draw(t, "tier")
		rate := mustRate(t, tier)
		r, err := Compute(cur, gross, rate, CNLabour{}, ProfileIndividual)
		if err != nil {
			t.Fatal(err)
		}
		taxExact, err := CNLabour{}.Withhold(ProfileIndividual, gross.Sub(gross.Mul(rate)))
		if err != nil {
			t.Fatal(err)
		}
		if !withinOneUnit(cur, r.Tax, taxExact.Rat()) || !withinOneUnit(cur, r.Commission, gross.Mul(rate).Rat()) {
			t.Fatalf("%s %s: commission %s tax %s, exact %s and %s", gross, cur.Code, r.Commission, r.Tax, gross.Mul(rate), taxExact)
		}
		if want := cnLabourFen(gross.Sub(r.Commission).Rat()); r.Tax.Rat().Cmp(want) != 0 {
			t.Fatalf("%s %s: tax %s, the rule on the base %s is %s", gross, cur.Code, r.Tax, gross.Sub(r.Commission), want.FloatString(2))
		}
		for _, p := range []decimal.Decimal{r.Commission, r.Tax, r.Net} {
			if p.IsNegative() {
				t.Fatalf("negative part %s", p)
			}
		}
		if !r.Commission.Add(r.Tax).Add(r.Net).Equal(gross) {
			t.Fatalf("parts %s + %s + %s do not sum to %s", r.Commission, r.Tax, r.Net, gross)
		}
	})
}

func mustRule(t interface{ Fatal(...any) }, set string) TaxRule {
	r, err := RuleFor(set)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustRate(t interface{ Fatal(...any) }, tier string) decimal.Decimal {
	r, err := DefaultCommission().Rate(tier)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// cn_labour's thresholds (¥800, ¥4 000, ¥20 000, ¥50 000) are yuan: an
// individual's payment in another currency is refused, not taxed as if its
// amount were yuan (JPY 100 000 of about ¥4 800 withheld JPY 17 000, 22.7 %
// of the base; 10 ETH nothing). An enterprise's 0 % holds in any currency.
func TestCNLabourIsYuanOnly(t *testing.T) {
	rate := mustRate(t, TierStandard)
	for _, code := range []string{"JPY", "USD", "ETH"} {
		cur := money.MustLookup(code)
		gross := cur.Round(decimal.NewFromInt(100000))
		if _, err := Compute(cur, gross, rate, CNLabour{}, ProfileIndividual); !errors.Is(err, ErrRuleCurrency) {
			t.Errorf("%s individual: %v, want ErrRuleCurrency", code, err)
		}
		if r, err := Compute(cur, gross, rate, CNLabour{}, ProfileEnterprise); err != nil || !r.Tax.IsZero() {
			t.Errorf("%s enterprise: %+v %v, want no tax", code, r, err)
		}
	}
	if r, err := Compute(money.MustLookup("CNY"), decimal.NewFromInt(4000), rate, CNLabour{}, ProfileIndividual); err != nil || !r.Tax.Equal(decimal.NewFromInt(440)) {
		t.Errorf("CNY 4000: %+v %v, want tax (3000 - 800) × 20 %% = 440", r, err)
	}
}

// cnLabourFen is cn_labour worked independently of CNLabour, on big.Rat:
// the tax on an income (the certificate's taxable base) rounded to the fen,
// half up. Income at most ¥4 000 less ¥800 (none below), above it 80 % of
// it; then 20 % to ¥20 000, 30 % less ¥2 000 to ¥50 000, 40 % less ¥7 000.
func cnLabourFen(income *big.Rat) *big.Rat {
	yuan := func(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }
	taxable := new(big.Rat).Mul(income, big.NewRat(4, 5))
	if income.Cmp(yuan(4000)) <= 0 {
		taxable.Sub(income, yuan(800))
	}
	if taxable.Sign() <= 0 {
		return new(big.Rat)
	}
	rate, quick := big.NewRat(1, 5), yuan(0)
	switch {
	case taxable.Cmp(yuan(50000)) > 0:
		rate, quick = big.NewRat(2, 5), yuan(7000)
	case taxable.Cmp(yuan(20000)) > 0:
		rate, quick = big.NewRat(3, 10), yuan(2000)
	}
	tax := new(big.Rat).Sub(new(big.Rat).Mul(taxable, rate), quick)
	fen := new(big.Rat).Add(new(big.Rat).Mul(tax, yuan(100)), big.NewRat(1, 2))
	return new(big.Rat).SetFrac(new(big.Int).Div(fen.Num(), fen.Denom()), big.NewInt(100))
}

// The tax withheld under cn_labour is the rule applied to the taxable base
// the withholding certificate prints (gross less the rounded commission),
// rounded to the fen: what a provider or auditor recomputes from the
// certificate. Taken on the exact commission and split by largest
// remainder, it was a fen off in 3–4 % of these payments (¥4 000–¥100 000,
// commission 15–25 %). The commission stays within a fen of gross × rate,
// and the parts sum to gross.
func TestCNLabourWithholdsTheRuleOnTheCertificatesBase(t *testing.T) {
	const (
		grossFromFen = 400000   // ¥4 000
		grossToFen   = 10000000 // ¥100 000: a base past ¥62 500 is in the 40 % bracket
		grossStepFen = 211      // prime: the commission's fraction of a fen takes every value
	)
	cur := money.MustLookup("CNY")
	var n, off int
	var firstOff []string
	for _, rate := range []string{"0.15", "0.18", "0.20", "0.22", "0.25"} {
		for u := int64(grossFromFen); u <= grossToFen; u += grossStepFen {
			gross := decimal.New(u, -2)
			r, err := Compute(cur, gross, dec(rate), CNLabour{}, ProfileIndividual)
			if err != nil {
				t.Fatalf("%s at %s: %v", gross, rate, err)
			}
			n++
			if !withinOneUnit(cur, r.Commission, gross.Mul(dec(rate)).Rat()) {
				t.Fatalf("%s at %s: commission %s, not within a fen of %s", gross, rate, r.Commission, gross.Mul(dec(rate)))
			}
			if !r.TaxBase.Equal(gross.Sub(r.Commission)) {
				t.Fatalf("%s at %s: taxable base %s, gross less commission %s", gross, rate, r.TaxBase, gross.Sub(r.Commission))
			}
			if r.Tax.IsNegative() || r.Net.IsNegative() || !r.Commission.Add(r.Tax).Add(r.Net).Equal(gross) {
				t.Fatalf("%s at %s: %s + %s + %s", gross, rate, r.Commission, r.Tax, r.Net)
			}
			if want := cnLabourFen(r.TaxBase.Rat()); r.Tax.Rat().Cmp(want) != 0 {
				off++
				if len(firstOff) < 5 {
					firstOff = append(firstOff, fmt.Sprintf("gross %s at %s: base %s, tax %s, the rule %s", cur.Format(gross), rate, cur.Format(r.TaxBase), cur.Format(r.Tax), want.FloatString(2)))
				}
			}
		}
	}
	if off > 0 {
		t.Errorf("%d of %d withholdings (%.2f %%) are not cn_labour on the certificate's base; first: %s",
			off, n, 100*float64(off)/float64(n), strings.Join(firstOff, "; "))
	}
}
