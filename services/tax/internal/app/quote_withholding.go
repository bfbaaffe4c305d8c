package app

import (
	"context"
	"fmt"
	"strings"
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
	TaxProfile, Jurisdiction        string // "" = the named provider's (read model), else individual / DefaultJurisdiction
	UsageEnd                        time.Time
	ProviderID                      string // optional: its own profile, jurisdiction and rule set selection apply
}

// QuoteWithholding splits gross with the commission rate given and the
// withholding rule settlement would apply to this usage: the rule selected
// for the provider when one is named, else for the jurisdiction or one
// holding it (CN's in CN-BJ), else the default (ruleFor), in force at the
// end of the cycle
// the usage accrues to, which is when ComputeWithholding picks its rule for
// a cycle closed at its end (one closed early takes the rule in force at
// its close, which a quote cannot foresee).
// A provider named is quoted as its settlement withholds it: by its own
// tax profile and jurisdiction on record (quotedTaxpayer).
// Nothing is recorded; the answer is a Withholding without ids, and
// whether its taxpayer is the named provider's record (onRecord).
func (a *App) QuoteWithholding(ctx context.Context, r QuoteRequest) (w domain.Withholding, onRecord bool, err error) {
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
		return domain.Withholding{}, false, err
	}
	gross, err := parseGross(cur, r.Gross)
	if err != nil {
		return domain.Withholding{}, false, err
	}
	if profile, jurisdiction, onRecord, err = a.quotedTaxpayer(ctx, r, profile, jurisdiction); err != nil {
		return domain.Withholding{}, false, err
	}
	cy := a.Calendar.ForUsageEnd(r.UsageEnd)
	// As the provider's settlement would (ComputeWithholding): its own
	// selection first. Without it a quote applied the jurisdiction's, 150.00
	// of tax on a gross the statement then withheld 0.00 from.
	version, err := a.ruleFor(ctx, "", r.ProviderID, jurisdiction, cur, profile, cy.End.Add(-1))
	if err != nil {
		return domain.Withholding{}, false, err
	}
	if err := checkRuleJurisdiction(version, jurisdiction); err != nil {
		return domain.Withholding{}, false, err
	}
	rule, err := split.RuleFor(version.RuleSet)
	if err != nil {
		return domain.Withholding{}, false, err
	}
	w = domain.Withholding{CycleID: cy.ID, Currency: cur.Code, Gross: gross, TaxProfile: profile, Jurisdiction: jurisdiction,
		RuleSet: version.RuleSet, RuleVersion: version.Version}
	if err := w.SplitByRate(cur, rate, rule); err != nil {
		return domain.Withholding{}, false, splitFault(cur.Code, "gross", err)
	}
	return w, onRecord, w.Check()
}

// quotedTaxpayer is the tax profile and jurisdiction a quote splits by
// (and whether they are the provider's record):
// the named provider's on record (read model of party.updated), which its
// settlement withholds by (settlement gives neither to ComputeWithholding),
// else the request's (profile and jurisdiction, defaulted and checked).
// Taken from the request, an enterprise in CN was quoted 150.00 of tax on
// a gross its statement withheld 0.00 from, and a provider in HK by CN's
// rule set. A quote naming a provider cannot choose another rule set than
// the provider's selection makes it, nor another profile or jurisdiction
// than its record: one given otherwise is a 400 naming the field (omit it,
// or correct the provider), never a split its settlement would not make.
// A provider the tax service has not heard of (a new one, or its
// party.updated behind) is quoted by the request, as before: its own
// selection still applies if it has one, and its settlement waits for
// the profile (ComputeWithholding).
func (a *App) quotedTaxpayer(ctx context.Context, r QuoteRequest, profile, jurisdiction string) (string, string, bool, error) {
	if r.ProviderID == "" {
		return profile, jurisdiction, false, nil
	}
	p, ok, err := a.Store.Profile(ctx, r.ProviderID)
	if err != nil {
		return "", "", false, fmt.Errorf("tax profile of %s: %w", r.ProviderID, err)
	}
	if !ok {
		return profile, jurisdiction, false, nil
	}
	var v apperr.Validator
	v.Check(r.TaxProfile == "" || r.TaxProfile == p.TaxProfile, "tax_profile",
		"provider %s is recorded as %s: omit tax_profile to quote by the provider's record", r.ProviderID, p.TaxProfile)
	v.Check(r.Jurisdiction == "" || strings.EqualFold(r.Jurisdiction, p.Jurisdiction), "jurisdiction",
		"provider %s is recorded in %s: omit jurisdiction to quote by the provider's record", r.ProviderID, p.Jurisdiction)
	if err := v.Err(); err != nil {
		return "", "", false, err
	}
	profile, jurisdiction = domain.Taxpayer("", "", &p)
	// Only a party recorded before metering checked these can fail here,
	// as its settlement would (ComputeWithholding); fixing the provider
	// (PATCH) updates the read model.
	if err := ids.CheckJurisdiction(jurisdiction); err != nil {
		return "", "", false, fmt.Errorf("provider %s: jurisdiction %v; correct the provider's jurisdiction: %w",
			r.ProviderID, err, apperr.ErrPrecondition)
	}
	if profile != split.ProfileIndividual && profile != split.ProfileEnterprise {
		return "", "", false, fmt.Errorf("provider %s: tax profile %q is not one of individual, enterprise; correct the provider's tax profile: %w",
			r.ProviderID, profile, apperr.ErrPrecondition)
	}
	return profile, jurisdiction, true, nil
}
