package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	taxsplit "github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// WithholdingRequest asks for a provider's withholding in a cycle.
type WithholdingRequest struct {
	ProviderID, CycleID, Currency string
	Gross                         string
	CommissionRate                string // set: split gross with pkg/split; else Commission is given
	Commission                    string
	TaxProfile, Jurisdiction      string // "" = the provider's (read model), else individual / CN
	RuleSet                       string // "" = selection for the provider, its jurisdiction or one that holds it, else the default
	IdempotencyKey                string
	ClosedAt                      time.Time // when settlement closed the cycle; zero = not said (an older caller)
}

// ComputeWithholding computes the tax on (gross − commission) by the rule
// version in force when the cycle's payments fell due (ruleTime: its end,
// or its close when it was closed early), records it with its certificate
// and returns it. A replay of the key returns the original record.
func (a *App) ComputeWithholding(ctx context.Context, r WithholdingRequest) (domain.Withholding, error) {
	cur, cy, err := a.checkRequest(r)
	if err != nil {
		return domain.Withholding{}, err
	}
	w0, found, p, ok, err := a.Store.Recorded(ctx, r.IdempotencyKey, r.ProviderID)
	if err != nil {
		return domain.Withholding{}, err
	}
	if found {
		return replay(r, cur, cy.ID, w0)
	}
	gross, err := parseGross(cur, r.Gross)
	if err != nil {
		return domain.Withholding{}, err
	}
	var known *domain.Profile
	if ok {
		known = &p
	} else if r.TaxProfile == "" || r.Jurisdiction == "" {
		// No party.updated of the provider has reached the tax service (one
		// dead-lettered, or the consumer behind): withheld on the defaults
		// (individual, CN), an enterprise's or another jurisdiction's tax
		// was recorded, posted and remitted to the wrong authority for good.
		return domain.Withholding{}, fmt.Errorf("provider %s: the tax service has not received the provider's tax profile "+
			"(party.updated; see the dead letters of %s): settled once it arrives, or give tax_profile and jurisdiction: %w",
			r.ProviderID, PartyConsumer, apperr.ErrPrecondition)
	}
	profile, jurisdiction := domain.Taxpayer(r.TaxProfile, r.Jurisdiction, known)
	if err := ids.CheckJurisdiction(jurisdiction); err != nil {
		// Only a party recorded before metering checked the grammar can get
		// here; fixing the provider (PATCH) updates the read model.
		return domain.Withholding{}, fmt.Errorf("provider %s: jurisdiction %v; correct the provider's jurisdiction: %w",
			r.ProviderID, err, apperr.ErrPrecondition)
	}
	// The payment falls due at the cycle's end, or at its close when it was
	// closed early: the rule then in force (of the requested rule set, else
	// the one selected for the provider, its jurisdiction or one holding
	// it, else the default: ruleFor) applies.
	version, err := a.ruleFor(ctx, r.RuleSet, r.ProviderID, jurisdiction, cur, profile, ruleTime(cy, r.ClosedAt))
	if err != nil {
		return domain.Withholding{}, err
	}
	if err := checkRuleJurisdiction(version, jurisdiction); err != nil {
		return domain.Withholding{}, err
	}
	w := domain.Withholding{
		ID: ids.New("wh"), IdempotencyKey: r.IdempotencyKey, ProviderID: r.ProviderID, CycleID: cy.ID, Currency: cur.Code,
		Gross: gross, TaxProfile: profile, Jurisdiction: jurisdiction, RuleSet: version.RuleSet, RuleVersion: version.Version,
		CertificateID: ids.New("cert"), CreatedAt: a.Clock.Now(),
	}
	if err := splitGross(r, cur, &w); err != nil {
		return domain.Withholding{}, err
	}
	got, err := a.Store.InsertWithholding(ctx, w)
	if err != nil || got.ID == w.ID {
		return got, err
	}
	return replay(r, cur, cy.ID, got) // another request took the key first
}

// parseGross reads a gross in cur, refusing it with the parse's reason: a
// gross of 10^18 or more was refused as "want a non-negative amount", not
// as too large.
func parseGross(cur money.Currency, s string) (decimal.Decimal, error) {
	gross, err := cur.Parse(s)
	if err != nil {
		return decimal.Decimal{}, apperr.Invalid("gross", "%v (want a non-negative amount in %s minor units)", err, cur.Code)
	}
	if gross.IsNegative() {
		return decimal.Decimal{}, apperr.Invalid("gross", "want a non-negative amount in %s minor units", cur.Code)
	}
	return gross, nil
}

// ruleTime is the instant whose rules withhold a cycle's payments: its
// last instant, or when it was closed (closedAt; zero: not said) if that
// came first. Picked at the calendar end, a cycle closed early (`:close`)
// was withheld by whatever was selected between its close and that end, so
// a provider held through the close and released after a selection was
// withheld under another rule set than the cycle's other providers.
func ruleTime(cy cycles.Cycle, closedAt time.Time) time.Time {
	at := cy.End.Add(-1)
	if !closedAt.IsZero() && closedAt.Before(at) {
		return closedAt
	}
	return at
}

// ruleFor is the rule version a payment is withheld by, in force at at:
// the rule set requested, held to as it is; else the most specific
// selection in force: the one selected for the provider, then for its
// jurisdiction, then for each jurisdiction that one belongs to (CN-BJ's,
// then CN's: cn_labour selected for CN is CN-BJ's too), then the default,
// each passed over when it cannot tax this payment: a rule of another
// jurisdiction than the provider's (a provider selected for cn_labour,
// since moved to US), or thresholds in another currency for a taxed
// profile (cn_labour's yuan, an individual paid in USD). Refused instead,
// the provider's settlement failed for good: a selection made to fix it
// applies to cycles ending (or closed) after it, never to the one refused.
func (a *App) ruleFor(ctx context.Context, requested, provider, jurisdiction string, cur money.Currency, profile string, at time.Time) (domain.Rule, error) {
	version, err := a.Store.RuleAt(ctx, requested, provider, jurisdiction, at)
	if err != nil || requested != "" {
		return version, err
	}
	// The levels after the provider's, each read with those below it
	// (RuleAt): its jurisdiction's selection, each parent jurisdiction's,
	// then the default alone (no scope selects for "").
	scopes := [][2]string{{provider, jurisdiction}}
	if provider != "" {
		scopes = append(scopes, [2]string{"", jurisdiction})
	}
	for _, j := range domain.JurisdictionLevels(jurisdiction)[1:] {
		scopes = append(scopes, [2]string{"", j})
	}
	scopes = append(scopes, [2]string{"", ""})
	for i, scope := range scopes {
		if i > 0 {
			if version, err = a.Store.RuleAt(ctx, "", scope[0], scope[1], at); err != nil {
				return version, err
			}
		}
		if taxes(version, jurisdiction, cur, profile) {
			return version, nil
		}
	}
	return version, nil // the default cannot either: its refusal is the answer
}

// taxes reports whether the rule applies to a payment in cur to a taxpayer
// of profile in jurisdiction.
func taxes(version domain.Rule, jurisdiction string, cur money.Currency, profile string) bool {
	if checkRuleJurisdiction(version, jurisdiction) != nil {
		return false
	}
	rule, err := taxsplit.RuleFor(version.RuleSet)
	return err != nil || taxsplit.CheckCurrency(rule, cur, profile) == nil
}

// checkRuleJurisdiction refuses a rule of one jurisdiction (cn_labour is
// CN's) for a provider of another: a provider selected for cn_labour and
// then moved to US was withheld Chinese labour tax, credited to and
// remitted from tax:withheld:US. A sub-jurisdiction (CN-BJ) is its
// country's.
func checkRuleJurisdiction(r domain.Rule, jurisdiction string) error {
	if r.Jurisdiction == "" || jurisdiction == r.Jurisdiction || strings.HasPrefix(jurisdiction, r.Jurisdiction+"-") {
		return nil
	}
	return fmt.Errorf("tax rule set %s is %s's and the provider is in %s; select a rule set for the provider or its jurisdiction that applies there: %w",
		r.RuleSet, r.Jurisdiction, jurisdiction, apperr.ErrPrecondition)
}

// splitFault is the error of a split the rule refused: a rule set whose
// thresholds are of another currency is the provider's or jurisdiction's
// rule to change (a failed precondition), anything else the field's.
func splitFault(currency, field string, err error) error {
	if errors.Is(err, taxsplit.ErrRuleCurrency) {
		return fmt.Errorf("%v; select a rule set for the provider or its jurisdiction that taxes %s payments: %w",
			err, currency, apperr.ErrPrecondition)
	}
	return apperr.Invalid(field, "%v", err)
}

// checkRequest checks the request's fields and returns its currency and cycle.
func (a *App) checkRequest(r WithholdingRequest) (money.Currency, cycles.Cycle, error) {
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
	// No cycle is closed before it starts: such a time would pick a rule
	// from before the cycle's usage.
	if cerr == nil && !r.ClosedAt.IsZero() && r.ClosedAt.Before(cy.Start) {
		v.Add("closed_at", "%s is before cycle %s started (%s)", r.ClosedAt.Format(time.RFC3339), cy.ID, cy.Start.Format(time.RFC3339))
	}
	return cur, cy, v.Err()
}

// splitGross fills w's commission, tax and net by its rule set: from the
// request's commission rate, else from its commission amount.
func splitGross(r WithholdingRequest, cur money.Currency, w *domain.Withholding) error {
	rule, err := taxsplit.RuleFor(w.RuleSet)
	if err != nil {
		return apperr.Invalid("rule_set", "%v", err)
	}
	if r.CommissionRate != "" {
		rate, err := money.ParseDecimal(r.CommissionRate)
		if err != nil || rate.IsNegative() || rate.GreaterThan(decimal.NewFromInt(1)) {
			return apperr.Invalid("commission_rate", "want a decimal fraction in 0..1")
		}
		if err := w.SplitByRate(cur, rate, rule); err != nil {
			return splitFault(cur.Code, "gross", err)
		}
	} else {
		commission, err := cur.Parse(r.Commission)
		if err != nil {
			return apperr.Invalid("commission", "%v (want an amount in 0..gross, or commission_rate)", err)
		}
		if commission.IsNegative() || commission.GreaterThan(w.Gross) {
			return apperr.Invalid("commission", "want an amount in 0..gross, or commission_rate")
		}
		if err := w.SplitByCommission(cur, commission, rule); err != nil {
			return splitFault(cur.Code, "tax_profile", err)
		}
	}
	if err := w.Check(); err != nil {
		return apperr.Invalid("gross", "%v", err)
	}
	return nil
}

// replay answers a request whose idempotency key is taken: the recorded
// withholding when the request is the one recorded, else a conflict (409), as
// every idempotent write in gpubill answers. A field the request leaves empty
// (tax profile, jurisdiction, rule set: "the provider's") matches what was
// recorded; a field it gives must be the recorded one. Amounts are read
// within money.ParseDecimal's bounds, as a first request's are, and
// compared by value (the record's scale is the text's of a version before
// Currency.Parse answered the currency's); not held to the magnitude bound
// a new amount is, so a withholding recorded before that bound is answered
// to its own request, not called another.
func replay(r WithholdingRequest, cur money.Currency, cycleID string, w domain.Withholding) (domain.Withholding, error) {
	var diff []string
	gross, err := money.ParseDecimal(r.Gross)
	if r.ProviderID != w.ProviderID {
		diff = append(diff, "provider_id")
	}
	if cycleID != w.CycleID {
		diff = append(diff, "cycle_id")
	}
	if cur.Code != w.Currency {
		diff = append(diff, "currency")
	}
	if err != nil || !gross.Equal(w.Gross) {
		diff = append(diff, "gross")
	}
	if r.CommissionRate != "" {
		rate, err := money.ParseDecimal(r.CommissionRate) // as the split parsed it: blanks round it taken
		if err != nil || w.CommissionRate == nil || !rate.Equal(*w.CommissionRate) {
			diff = append(diff, "commission_rate")
		}
	} else {
		commission, err := money.ParseDecimal(r.Commission)
		if err != nil || w.CommissionRate != nil || !commission.Equal(w.Commission) {
			diff = append(diff, "commission")
		}
	}
	if r.TaxProfile != "" && r.TaxProfile != w.TaxProfile {
		diff = append(diff, "tax_profile")
	}
	if r.Jurisdiction != "" && !strings.EqualFold(r.Jurisdiction, w.Jurisdiction) {
		diff = append(diff, "jurisdiction")
	}
	if r.RuleSet != "" && r.RuleSet != w.RuleSet {
		diff = append(diff, "rule_set")
	}
	if len(diff) > 0 {
		return domain.Withholding{}, fmt.Errorf("idempotency key %q was used for a different withholding (%s, differing in %s): %w",
			r.IdempotencyKey, w.ID, strings.Join(diff, ", "), apperr.ErrConflict)
	}
	return w, nil
}
