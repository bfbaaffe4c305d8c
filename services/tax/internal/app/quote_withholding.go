package app

import (
	"context"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// QuoteRequest asks how settlement would split a gross amount.
type QuoteRequest struct {
	Currency, Gross, CommissionRate string
	TaxProfile, Jurisdiction        string // "" = individual / DefaultJurisdiction
	UsageEnd                        time.Time
	ProviderID                      string // optional: its own rule set selection applies
}

// QuoteWithholding splits gross with the commission rate given and the
// withholding rule settlement would apply to this usage: the rule selected
// for the provider when one is named, else for the jurisdiction or one
// holding it (CN's in CN-BJ), else the default (ruleFor), in force at the
// end of the cycle
// the usage accrues to, which is when ComputeWithholding picks its rule for
// a cycle closed at its end (one closed early takes the rule in force at
// its close, which a quote cannot foresee).
// Nothing is recorded; the answer is a Withholding without ids.
func (a *App) QuoteWithholding(ctx context.Context, r QuoteRequest) (domain.Withholding, error) {
	var v apperr.Validator
	cur, err := money.Lookup(r.Currency)
	v.Check(err == nil, "currency", "%v", err)
	profile, jurisdiction := domain.Taxpayer(r.TaxProfile, r.Jurisdiction, nil)
	if err := ids.CheckJurisdiction(jurisdiction); err != nil {
		v.Add("jurisdiction", "%v", err)
	}
	v.Check(profile == split.ProfileIndividual || profile == split.ProfileEnterprise, "tax_profile", "%q is not one of individual, enterprise", r.TaxProfile)
	rate, rerr := money.ParseDecimal(r.CommissionRate)
	v.Check(rerr == nil && !rate.IsNegative() && rate.LessThanOrEqual(decimal.NewFromInt(1)), "commission_rate", "want a decimal fraction in 0..1")
	v.Check(!r.UsageEnd.IsZero(), "usage_end", "required")
	if r.ProviderID != "" {
		if err := ids.CheckPartyID(r.ProviderID); err != nil {
			v.Add("provider_id", "%v", err)
		}
	}
	if err := v.Err(); err != nil {
		return domain.Withholding{}, err
	}
	gross, err := cur.Parse(r.Gross)
	if err != nil || gross.IsNegative() {
		return domain.Withholding{}, apperr.Invalid("gross", "want a non-negative amount in %s minor units", cur.Code)
	}
	cy := a.Calendar.ForUsageEnd(r.UsageEnd)
	// As the provider's settlement would (ComputeWithholding): its own
	// selection first. Without it a quote applied the jurisdiction's, 150.00
	// of tax on a gross the statement then withheld 0.00 from.
	version, err := a.ruleFor(ctx, "", r.ProviderID, jurisdiction, cur, profile, cy.End.Add(-1))
	if err != nil {
		return domain.Withholding{}, err
	}
	if err := checkRuleJurisdiction(version, jurisdiction); err != nil {
		return domain.Withholding{}, err
	}
	rule, err := split.RuleFor(version.RuleSet)
	if err != nil {
		return domain.Withholding{}, err
	}
	w := domain.Withholding{CycleID: cy.ID, Currency: cur.Code, Gross: gross, TaxProfile: profile, Jurisdiction: jurisdiction,
		RuleSet: version.RuleSet, RuleVersion: version.Version}
	if err := w.SplitByRate(cur, rate, rule); err != nil {
		return domain.Withholding{}, splitFault(cur.Code, "gross", err)
	}
	return w, w.Check()
}
