// Package taxclient asks the tax service, over its internal API, how
// settlement would split a quote (app.SplitQuoter).
package taxclient

import (
	"context"
	"fmt"

	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/money"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
)

// Client implements app.SplitQuoter with TaxService.QuoteWithholding.
type Client struct{ Tax taxv1.TaxServiceClient }

var _ app.SplitQuoter = Client{}

// QuoteSplit implements app.SplitQuoter.
func (c Client) QuoteSplit(ctx context.Context, r app.SplitRequest) (app.SplitQuote, error) {
	cur, err := money.Lookup(r.Currency)
	if err != nil {
		return app.SplitQuote{}, err
	}
	resp, err := c.Tax.QuoteWithholding(ctx, &taxv1.QuoteWithholdingRequest{Currency: cur.Code, Gross: cur.Format(r.Gross),
		CommissionRate: r.CommissionRate.String(), TaxProfile: r.TaxProfile, Jurisdiction: r.Jurisdiction,
		UsageEnd: timestamppb.New(r.UsageEnd), ProviderId: r.ProviderID})
	if err != nil {
		return app.SplitQuote{}, fmt.Errorf("tax QuoteWithholding: %w", err)
	}
	var v [3]decimal.Decimal
	for i, s := range []string{resp.Commission, resp.TaxWithheld, resp.Net} {
		if v[i], err = cur.Parse(s); err != nil {
			return app.SplitQuote{}, fmt.Errorf("tax QuoteWithholding answered %q: %w", s, err)
		}
	}
	return app.SplitQuote{Commission: v[0], Tax: v[1], Net: v[2], RuleSet: resp.RuleSet, RuleVersion: resp.RuleVersion,
		TaxProfile: resp.TaxProfile, Jurisdiction: resp.Jurisdiction, OnRecord: resp.ProviderOnRecord}, nil
}
