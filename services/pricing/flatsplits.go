package pricing

import (
	"context"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
)

// FlatSplits stands in the tax service where pricing is hosted without it
// (the stack tests in services/gpubill): the default rule (flat 20 % for
// individuals), as the tax service applies it when no other rule is
// selected. Set it with SetSplitQuoter.
type FlatSplits struct{}

// flatJurisdiction is the tax service's default jurisdiction (its
// domain.DefaultJurisdiction), for a provider whose record names none.
const flatJurisdiction = "CN"

// QuoteSplit implements app.SplitQuoter.
func (FlatSplits) QuoteSplit(_ context.Context, r app.SplitRequest) (app.SplitQuote, error) {
	cur, err := money.Lookup(r.Currency)
	if err != nil {
		return app.SplitQuote{}, err
	}
	rule, err := split.RuleFor(split.RuleSetFlat20)
	if err != nil {
		return app.SplitQuote{}, err
	}
	res, err := split.Compute(cur, r.Gross, r.CommissionRate, rule, r.TaxProfile)
	if err != nil {
		return app.SplitQuote{}, err
	}
	// The taxpayer as the tax service defaults one it has no record of.
	profile, jurisdiction := r.TaxProfile, r.Jurisdiction
	if profile == "" {
		profile = split.ProfileIndividual
	}
	if jurisdiction == "" {
		jurisdiction = flatJurisdiction
	}
	return app.SplitQuote{Commission: res.Commission, Tax: res.Tax, Net: res.Net, RuleSet: split.RuleSetFlat20, RuleVersion: "test",
		TaxProfile: profile, Jurisdiction: jurisdiction}, nil
}
