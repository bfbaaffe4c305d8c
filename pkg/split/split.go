// Package split holds the money rules shared by the earnings calculator
// (pricing's quotes) and real settlement, so a quote and a statement can never
// disagree: commission by provider tier within the platform's bounds, the tax
// withholding rule sets, and the split gross → commission + tax + net that
// always sums back to gross exactly in minor units.
package split

import (
	"errors"
	"fmt"
	"sort"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// Provider tiers.
const (
	TierStandard = "standard"
	TierPro      = "pro"
	TierPartner  = "partner"
)

// Tax profiles.
const (
	ProfileIndividual = "individual"
	ProfileEnterprise = "enterprise"
)

// ErrRateOutOfBounds is returned for a commission rate outside the platform's bounds.
var ErrRateOutOfBounds = errors.New("commission rate outside platform bounds")

// CommissionPolicy is the commission rate per tier and the bounds every rate must keep.
type CommissionPolicy struct {
	Rates map[string]decimal.Decimal
	Min   decimal.Decimal
	Max   decimal.Decimal
}

// DefaultCommission: standard 25 %, pro 20 %, partner 15 %, bounds 15–25 %.
func DefaultCommission() CommissionPolicy {
	return CommissionPolicy{
		Rates: map[string]decimal.Decimal{
			TierStandard: decimal.RequireFromString("0.25"),
			TierPro:      decimal.RequireFromString("0.20"),
			TierPartner:  decimal.RequireFromString("0.15"),
		},
		Min: decimal.RequireFromString("0.15"),
		Max: decimal.RequireFromString("0.25"),
	}
}

// Validate refuses a policy with a rate outside [Min, Max].
func (p CommissionPolicy) Validate() error {
	if p.Min.IsNegative() || p.Max.GreaterThan(decimal.NewFromInt(1)) || p.Min.GreaterThan(p.Max) {
		return fmt.Errorf("commission bounds %s–%s are not a range within 0–1", p.Min, p.Max)
	}
	tiers := make([]string, 0, len(p.Rates))
	for t := range p.Rates {
		tiers = append(tiers, t)
	}
	sort.Strings(tiers)
	for _, t := range tiers {
		if err := p.checkRate(p.Rates[t]); err != nil {
			return fmt.Errorf("tier %s: %w", t, err)
		}
	}
	return nil
}

func (p CommissionPolicy) checkRate(r decimal.Decimal) error {
	if r.LessThan(p.Min) || r.GreaterThan(p.Max) {
		return fmt.Errorf("%w: %s not in %s–%s", ErrRateOutOfBounds, r, p.Min, p.Max)
	}
	return nil
}

// Rate returns the commission rate for a tier.
func (p CommissionPolicy) Rate(tier string) (decimal.Decimal, error) {
	r, ok := p.Rates[tier]
	if !ok {
		return decimal.Decimal{}, fmt.Errorf("unknown provider tier %q (want standard, pro or partner)", tier)
	}
	if err := p.checkRate(r); err != nil {
		return decimal.Decimal{}, err
	}
	return r, nil
}

// TaxRule computes the exact (unrounded) tax withheld on a taxable base
// (gross − commission) for a tax profile. Rule sets are data: the tax service
// keeps versioned, effective-dated rows naming a RuleSet and its version.
type TaxRule interface {
	RuleSet() string
	Withhold(profile string, base decimal.Decimal) (decimal.Decimal, error)
}

// Rule set names.
const (
	RuleSetFlat20    = "flat20"
	RuleSetCNLabour  = "cn_labour"
	RuleSetDefault   = RuleSetFlat20
	cnDeductionFixed = 800
	cnDeductionLimit = 4000
)

// Flat is the default rule: individuals Rate (20 %) of the base, enterprises 0 %.
type Flat struct{ Rate decimal.Decimal }

// RuleSet implements TaxRule.
func (Flat) RuleSet() string { return RuleSetFlat20 }

// Withhold implements TaxRule.
func (f Flat) Withhold(profile string, base decimal.Decimal) (decimal.Decimal, error) {
	switch profile {
	case ProfileEnterprise:
		return decimal.Zero, nil
	case ProfileIndividual, "":
		if base.IsNegative() {
			return decimal.Zero, nil
		}
		return base.Mul(f.Rate), nil
	}
	return decimal.Decimal{}, fmt.Errorf("unknown tax profile %q (want individual or enterprise)", profile)
}

// ErrRuleCurrency is a rule set whose amounts are of another currency than
// the payment's (cn_labour's thresholds are yuan).
var ErrRuleCurrency = errors.New("the rule set's thresholds are in another currency")

// currencyBound is a TaxRule whose thresholds are amounts of one currency.
type currencyBound interface{ Currency() string }

// CheckCurrency refuses (ErrRuleCurrency) to apply rule to a payment of a
// taxpayer of profile in cur when the rule's thresholds are amounts of
// another currency and the profile is taxed (an enterprise's 0 % is so in
// any currency).
func CheckCurrency(rule TaxRule, cur money.Currency, profile string) error {
	if b, ok := rule.(currencyBound); ok && b.Currency() != cur.Code && profile != ProfileEnterprise {
		return fmt.Errorf("%w: %s's thresholds are %s amounts, the payment is in %s", ErrRuleCurrency, rule.RuleSet(), b.Currency(), cur.Code)
	}
	return nil
}

// CNLabour is China's labour-remuneration withholding, per payment: a ¥800
// deduction when the payment is at most ¥4 000, else a 20 % deduction; then
// 20 % up to ¥20 000 of taxable income, 30 % less ¥2 000 up to ¥50 000, 40 %
// less ¥7 000 above. Enterprises file themselves (0 %).
type CNLabour struct{}

// RuleSet implements TaxRule.
func (CNLabour) RuleSet() string { return RuleSetCNLabour }

// Currency is the currency of CNLabour's thresholds: Compute refuses an
// individual's payment in another (ErrRuleCurrency).
func (CNLabour) Currency() string { return "CNY" }

// Withhold implements TaxRule.
func (CNLabour) Withhold(profile string, base decimal.Decimal) (decimal.Decimal, error) {
	switch profile {
	case ProfileEnterprise:
		return decimal.Zero, nil
	case ProfileIndividual, "":
	default:
		return decimal.Decimal{}, fmt.Errorf("unknown tax profile %q (want individual or enterprise)", profile)
	}
	if !base.IsPositive() {
		return decimal.Zero, nil
	}
	var taxable decimal.Decimal
	if base.LessThanOrEqual(decimal.NewFromInt(cnDeductionLimit)) {
		taxable = base.Sub(decimal.NewFromInt(cnDeductionFixed))
		if taxable.IsNegative() {
			return decimal.Zero, nil
		}
	} else {
		taxable = base.Mul(decimal.RequireFromString("0.8"))
	}
	var rate, quick decimal.Decimal
	switch {
	case taxable.LessThanOrEqual(decimal.NewFromInt(20000)):
		rate, quick = decimal.RequireFromString("0.20"), decimal.Zero
	case taxable.LessThanOrEqual(decimal.NewFromInt(50000)):
		rate, quick = decimal.RequireFromString("0.30"), decimal.NewFromInt(2000)
	default:
		rate, quick = decimal.RequireFromString("0.40"), decimal.NewFromInt(7000)
	}
	return taxable.Mul(rate).Sub(quick), nil
}

// RuleFor returns the rule of a named rule set.
func RuleFor(ruleSet string) (TaxRule, error) {
	switch ruleSet {
	case RuleSetFlat20, "":
		return Flat{Rate: decimal.RequireFromString("0.20")}, nil
	case RuleSetCNLabour:
		return CNLabour{}, nil
	}
	return nil, fmt.Errorf("unknown tax rule set %q (want %s or %s)", ruleSet, RuleSetFlat20, RuleSetCNLabour)
}

// Result is one split of a gross amount.
type Result struct {
	Currency       string
	Gross          decimal.Decimal
	CommissionRate decimal.Decimal
	Commission     decimal.Decimal
	TaxBase        decimal.Decimal // gross − commission
	Tax            decimal.Decimal
	Net            decimal.Decimal
}

// Compute splits gross (in cur's minor units) into commission, tax and net.
// The commission is gross × rate in minor units: the first part of a
// largest-remainder allocation of gross to the exact shares (commission =
// gross × rate; tax = rule(gross − commission); net the rest). The tax is
// then the rule applied to the taxable base the withholding certificate
// prints, gross less that commission, rounded in the currency; the net is
// what is left, so the three parts sum to gross exactly. Allocated with
// the other two parts instead, the tax was the rule on the exact base: a
// minor unit off the rule on the certificate's base in 3–4 % of cn_labour's
// payments over ¥4 000, so a provider or auditor recomputing it from the
// certificate got another fen.
func Compute(cur money.Currency, gross, rate decimal.Decimal, rule TaxRule, profile string) (Result, error) {
	if gross.IsNegative() {
		return Result{}, fmt.Errorf("gross %s is negative", gross)
	}
	if !gross.Equal(cur.Round(gross)) {
		return Result{}, fmt.Errorf("gross %s is not in %s minor units", gross, cur.Code)
	}
	r := Result{Currency: cur.Code, Gross: gross, CommissionRate: rate}
	if gross.IsZero() {
		return r, nil
	}
	if err := CheckCurrency(rule, cur, profile); err != nil {
		return Result{}, err
	}
	commissionExact := gross.Mul(rate)
	taxExact, err := rule.Withhold(profile, gross.Sub(commissionExact))
	if err != nil {
		return Result{}, err
	}
	netExact := gross.Sub(commissionExact).Sub(taxExact)
	if netExact.IsNegative() {
		return Result{}, fmt.Errorf("tax %s exceeds the base %s", taxExact, gross.Sub(commissionExact))
	}
	// The commission as it always was (quotes and recorded withholdings
	// keep their commission); only the tax is taken on its rounded base.
	parts, err := cur.Allocate(gross, []decimal.Decimal{commissionExact, taxExact, netExact})
	if err != nil {
		return Result{}, err
	}
	r.Commission = parts[0]
	r.TaxBase = gross.Sub(r.Commission)
	tax, err := rule.Withhold(profile, r.TaxBase)
	if err != nil {
		return Result{}, err
	}
	r.Tax = cur.Round(tax)
	r.Net = r.TaxBase.Sub(r.Tax)
	if r.Tax.IsNegative() || r.Net.IsNegative() {
		return Result{}, fmt.Errorf("tax %s of the base %s leaves a net of %s", r.Tax, r.TaxBase, r.Net)
	}
	if !r.Commission.Add(r.Tax).Add(r.Net).Equal(gross) {
		return Result{}, fmt.Errorf("split %s+%s+%s != %s", r.Commission, r.Tax, r.Net, gross)
	}
	return r, nil
}
