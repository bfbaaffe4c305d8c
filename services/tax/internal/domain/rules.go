package domain

import (
	"fmt"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
)

// DefaultJurisdiction applies to providers whose party record names none.
const DefaultJurisdiction = "CN"

// AccountBankClient is the account remittances are paid out of.
const AccountBankClient = ids.BankClient

// Taxpayer is the tax profile and jurisdiction a withholding applies: the
// request's, else the provider's (read model of party.updated), else the
// defaults (individual, CN).
func Taxpayer(profile, jurisdiction string, known *Profile) (string, string) {
	jurisdiction = strings.ToUpper(jurisdiction)
	if known != nil {
		profile = first(profile, known.TaxProfile)
		jurisdiction = first(jurisdiction, strings.ToUpper(known.Jurisdiction))
	}
	return first(profile, split.ProfileIndividual), first(jurisdiction, DefaultJurisdiction)
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// SplitByRate sets w's commission (gross × rate, rounded), tax (by rule on
// gross − commission) and net: the platform split of pkg/split.
func (w *Withholding) SplitByRate(cur money.Currency, rate decimal.Decimal, rule split.TaxRule) error {
	res, err := split.Compute(cur, w.Gross, rate, rule, w.TaxProfile)
	if err != nil {
		return err
	}
	w.CommissionRate, w.Commission, w.Tax, w.Net = &rate, res.Commission, res.Tax, res.Net
	w.TaxableBase = w.Gross.Sub(w.Commission)
	return nil
}

// SplitByCommission sets w's commission as given, tax by rule on gross −
// commission (rounded in the currency) and net.
func (w *Withholding) SplitByCommission(cur money.Currency, commission decimal.Decimal, rule split.TaxRule) error {
	if err := split.CheckCurrency(rule, cur, w.TaxProfile); err != nil {
		return err
	}
	exact, err := rule.Withhold(w.TaxProfile, w.Gross.Sub(commission))
	if err != nil {
		return err
	}
	w.Commission, w.Tax = commission, cur.Round(exact)
	w.Net = w.Gross.Sub(commission).Sub(w.Tax)
	w.TaxableBase = w.Gross.Sub(w.Commission)
	return nil
}

// Check asserts the split: commission + tax + net is gross, net is not
// negative.
func (w Withholding) Check() error {
	if !w.Commission.Add(w.Tax).Add(w.Net).Equal(w.Gross) || w.Net.IsNegative() {
		return fmt.Errorf("split %s+%s+%s does not make %s", w.Commission, w.Tax, w.Net, w.Gross)
	}
	return nil
}

// JurisdictionLevels is a jurisdiction and each it belongs to, most
// specific first: CN-BJ, CN (a subdivision is its country's, as
// checkRuleJurisdiction holds a rule of CN to apply in CN-BJ). Only '-'
// separates levels.
func JurisdictionLevels(jurisdiction string) []string {
	levels := []string{jurisdiction}
	for i := strings.LastIndexByte(jurisdiction, '-'); i > 0; i = strings.LastIndexByte(jurisdiction, '-') {
		jurisdiction = jurisdiction[:i]
		levels = append(levels, jurisdiction)
	}
	return levels
}

// Legs are the accounts a remittance moves its amount between: Dr
// tax:withheld:{jurisdiction}, Cr bank:client.
func (r Remittance) Legs() (debit, credit string) {
	return ids.TaxWithheld(r.Jurisdiction), AccountBankClient
}
