package split

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/shopspring/decimal"
)

// Commission configuration defaults (GPUBILL_COMMISSION_RATES,
// GPUBILL_COMMISSION_BOUNDS): the DefaultCommission policy.
const (
	CommissionRatesDefault  = "standard=0.25,pro=0.20,partner=0.15"
	CommissionBoundsDefault = "0.15-0.25"
)

// ParseCommission reads a commission configuration: rates as
// "tier=rate,…" (every tier of standard, pro and partner, each once) and
// bounds as "min-max", and refuses a policy Validate refuses.
func ParseCommission(rates, bounds string) (CommissionPolicy, error) {
	p := CommissionPolicy{Rates: map[string]decimal.Decimal{}}
	lo, hi, ok := strings.Cut(strings.TrimSpace(bounds), "-")
	var err error
	if p.Min, err = decimal.NewFromString(strings.TrimSpace(lo)); !ok || err != nil {
		return CommissionPolicy{}, fmt.Errorf("commission bounds %q: want min-max, e.g. %s", bounds, CommissionBoundsDefault)
	}
	if p.Max, err = decimal.NewFromString(strings.TrimSpace(hi)); err != nil {
		return CommissionPolicy{}, fmt.Errorf("commission bounds %q: want min-max, e.g. %s", bounds, CommissionBoundsDefault)
	}
	for _, kv := range strings.Split(rates, ",") {
		tier, rate, ok := strings.Cut(strings.TrimSpace(kv), "=")
		tier = strings.TrimSpace(tier)
		if !ok || (tier != TierStandard && tier != TierPro && tier != TierPartner) {
			return CommissionPolicy{}, fmt.Errorf("commission rates %q: want tier=rate for standard, pro and partner, e.g. %s", rates, CommissionRatesDefault)
		}
		if _, dup := p.Rates[tier]; dup {
			return CommissionPolicy{}, fmt.Errorf("commission rates %q: tier %s twice", rates, tier)
		}
		d, err := decimal.NewFromString(strings.TrimSpace(rate))
		if err != nil {
			return CommissionPolicy{}, fmt.Errorf("commission rates %q: tier %s: %q is not a decimal", rates, tier, rate)
		}
		p.Rates[tier] = d
	}
	for _, t := range []string{TierStandard, TierPro, TierPartner} {
		if _, ok := p.Rates[t]; !ok {
			return CommissionPolicy{}, fmt.Errorf("commission rates %q: no rate for tier %s", rates, t)
		}
	}
	if err := p.Validate(); err != nil {
		return CommissionPolicy{}, err
	}
	return p, nil
}

// Version names the policy by its content: "cc-" and the first 12 hex
// digits of the SHA-256 of its rates and bounds in canonical form, so every
// process configured alike reports the same version, and a quote and a
// statement can be matched to the configuration that made them.
func (p CommissionPolicy) Version() string {
	tiers := make([]string, 0, len(p.Rates))
	for t := range p.Rates {
		tiers = append(tiers, t)
	}
	sort.Strings(tiers)
	var b strings.Builder
	fmt.Fprintf(&b, "bounds=%s-%s", p.Min.String(), p.Max.String())
	for _, t := range tiers {
		fmt.Fprintf(&b, ";%s=%s", t, p.Rates[t].String())
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "cc-" + hex.EncodeToString(sum[:6])
}
