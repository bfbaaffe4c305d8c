package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/tax/internal/adapters"
)

// WithholdingRequest asks for a provider's withholding in a cycle.
type WithholdingRequest struct {
	ProviderID, CycleID, Currency string
	Gross                         string
	CommissionRate                string // set: split gross with pkg/split; else Commission is given
	Commission                    string
	TaxProfile, Jurisdiction      string // "" = the provider's (read model), else individual / CN
	RuleSet                       string // "" = selection for the provider or jurisdiction, else the default
	IdempotencyKey                string
}

// ComputeWithholding computes the tax on (gross − commission) by the rule
// version in force at the cycle's end, records it with its certificate and
// returns it. A replay of the key returns the original record.
func (a *App) ComputeWithholding(ctx context.Context, r WithholdingRequest) (adapters.Withholding, error) {
	var v apperr.Validator
	if err := ids.CheckPartyID(r.ProviderID); err != nil {
		v.Add("provider_id", "%v", err)
	}
	if r.Jurisdiction != "" {
		if err := ids.CheckJurisdiction(r.Jurisdiction); err != nil {
			v.Add("jurisdiction", "%v", err)
		}
	}
	v.Check(r.IdempotencyKey != "", "idempotency_key", "required")
	cur, err := money.Lookup(r.Currency)
	v.Check(err == nil, "currency", "%v", err)
	cy, cerr := a.Calendar.Parse(r.CycleID)
	v.Check(cerr == nil, "cycle_id", "%v", cerr)
	if err := v.Err(); err != nil {
		return adapters.Withholding{}, err
	}
	w0, found, p, ok, err := a.Store.Recorded(ctx, r.IdempotencyKey, r.ProviderID)
	if err != nil || found {
		return w0, err
	}
	gross, err := cur.ParseAmount(r.Gross)
	if err != nil || gross.IsNegative() {
		return adapters.Withholding{}, apperr.Invalid("gross", "want a non-negative amount in %s minor units", cur.Code)
	}
	profile, jurisdiction := r.TaxProfile, strings.ToUpper(r.Jurisdiction)
	if ok {
		profile = cmp(profile, p.TaxProfile)
		jurisdiction = cmp(jurisdiction, strings.ToUpper(p.Jurisdiction))
	}
	profile = cmp(profile, split.ProfileIndividual)
	jurisdiction = cmp(jurisdiction, DefaultJurisdiction)
	if err := ids.CheckJurisdiction(jurisdiction); err != nil {
		// Only a party recorded before metering checked the grammar can get
		// here; fixing the provider (PATCH) updates the read model.
		return adapters.Withholding{}, fmt.Errorf("provider %s: jurisdiction %v; correct the provider's jurisdiction: %w",
			r.ProviderID, err, apperr.ErrPrecondition)
	}
	// The payment falls due at the cycle's end: the rule then in force
	// (of the requested rule set, else the one selected for the provider or
	// its jurisdiction, else the default) applies.
	version, err := a.Store.RuleAt(ctx, r.RuleSet, r.ProviderID, jurisdiction, cy.End.Add(-1))
	if err != nil {
		return adapters.Withholding{}, err
	}
	rule, err := split.RuleFor(version.RuleSet)
	if err != nil {
		return adapters.Withholding{}, apperr.Invalid("rule_set", "%v", err)
	}
	w := adapters.Withholding{
		ID: ids.New("wh"), IdempotencyKey: r.IdempotencyKey, ProviderID: r.ProviderID, CycleID: cy.ID, Currency: cur.Code,
		Gross: gross, TaxProfile: profile, Jurisdiction: jurisdiction, RuleSet: version.RuleSet, RuleVersion: version.Version,
		CertificateID: ids.New("cert"), CreatedAt: a.Clock.Now(),
	}
	if r.CommissionRate != "" {
		rate, err := decimal.NewFromString(r.CommissionRate)
		if err != nil || rate.IsNegative() || rate.GreaterThan(decimal.NewFromInt(1)) {
			return adapters.Withholding{}, apperr.Invalid("commission_rate", "want a decimal fraction in 0..1")
		}
		res, err := split.Compute(cur, gross, rate, rule, profile)
		if err != nil {
			return adapters.Withholding{}, apperr.Invalid("gross", "%v", err)
		}
		w.CommissionRate, w.Commission, w.Tax, w.Net = &rate, res.Commission, res.Tax, res.Net
	} else {
		commission, err := cur.ParseAmount(r.Commission)
		if err != nil || commission.IsNegative() || commission.GreaterThan(gross) {
			return adapters.Withholding{}, apperr.Invalid("commission", "want an amount in 0..gross, or commission_rate")
		}
		exact, err := rule.Withhold(profile, gross.Sub(commission))
		if err != nil {
			return adapters.Withholding{}, apperr.Invalid("tax_profile", "%v", err)
		}
		w.Commission, w.Tax = commission, cur.Round(exact)
		w.Net = gross.Sub(commission).Sub(w.Tax)
	}
	w.TaxableBase = gross.Sub(w.Commission)
	if !w.Commission.Add(w.Tax).Add(w.Net).Equal(gross) || w.Net.IsNegative() {
		return adapters.Withholding{}, apperr.Invalid("gross", "split %s+%s+%s does not make %s", w.Commission, w.Tax, w.Net, gross)
	}
	return a.Store.InsertWithholding(ctx, w)
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
