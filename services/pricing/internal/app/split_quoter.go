package app

import (
	"context"
	"time"

	"github.com/shopspring/decimal"
)

// SplitRequest asks how settlement would split a quote's renter price.
type SplitRequest struct {
	Currency                 string
	Gross, CommissionRate    decimal.Decimal
	TaxProfile, Jurisdiction string // "" = the provider's when one is named (tax's read model), else individual / the default jurisdiction
	UsageEnd                 time.Time
	ProviderID               string // optional: its own tax profile, jurisdiction and rule set selection apply
}

// SplitQuote is the split, the withholding rule version that made it and
// the taxpayer it withheld by: the tax profile and jurisdiction (OnRecord:
// the named provider's on record, else the request's, defaulted).
type SplitQuote struct {
	Commission, Tax, Net     decimal.Decimal
	RuleSet, RuleVersion     string
	TaxProfile, Jurisdiction string
	OnRecord                 bool
}

// SplitQuoter splits a gross amount as settlement would: the tax service,
// whose rule table and selections settlement's withholdings are computed
// from (the rule in force at the end of the usage's cycle).
type SplitQuoter interface {
	QuoteSplit(ctx context.Context, r SplitRequest) (SplitQuote, error)
}
