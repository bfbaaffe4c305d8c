package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// echoSplit splits as halfSplit and answers the taxpayer it was asked for,
// defaulted as the tax service defaults it (individual, CN), not on record.
type echoSplit struct{}

func (echoSplit) QuoteSplit(ctx context.Context, r SplitRequest) (SplitQuote, error) {
	q, err := halfSplit{}.QuoteSplit(ctx, r)
	q.TaxProfile, q.Jurisdiction = r.TaxProfile, r.Jurisdiction
	if q.TaxProfile == "" {
		q.TaxProfile = "individual"
	}
	if q.Jurisdiction == "" {
		q.Jurisdiction = "CN"
	}
	return q, err
}

// A quote's answer names the tier whose commission rate it split at, where
// that tier came from, and the tax profile and jurisdiction the tax
// service withheld by: a caller could not tell a standard quote from a
// partner's. A provider named that pricing has not heard of (no
// party.updated yet) is split at standard, the tier its settlement
// snapshots for a provider without one (settlement's SnapshotBalances):
// it was split at the request's tier, a partner's 15 % where its statement
// took 25 %. Asked for another tier, such a quote is refused, naming the
// provider and the tier its settlement would take.
func TestQuoteNamesTheTierAndTaxpayerItUsed(t *testing.T) {
	t.Parallel()
	a, start := quoteApp()
	a.Splits = echoSplit{}
	a.Tiers = recordedTiers{tiers: map[string]string{"p-part": "partner"}}
	quote := func(provider, tier string) (QuoteResult, error) {
		return a.Quote(context.Background(), QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: 1, Hours: "1",
			StartTime: &start, ProviderID: provider, ProviderTier: tier, TaxProfile: "enterprise"})
	}
	tests := []struct {
		giveProvider, giveTier         string
		wantRate, wantTier, wantSource string
	}{
		{"p-part", "", "0.15", "partner", "record"},
		{"p-part", "partner", "0.15", "partner", "record"},
		{"p-new", "", "0.25", "standard", "default"},
		{"p-new", "standard", "0.25", "standard", "default"},
		{"", "partner", "0.15", "partner", "request"},
		{"", "", "0.25", "standard", "default"},
	}
	for _, tt := range tests {
		got, err := quote(tt.giveProvider, tt.giveTier)
		if err != nil || got.CommissionRate != tt.wantRate || got.ProviderTier != tt.wantTier || got.ProviderTierSource != tt.wantSource ||
			got.TaxProfile != "enterprise" || got.Jurisdiction != "CN" {
			t.Errorf("%q quoted with tier %q: rate %s, tier %q (%q), taxpayer %q %q, %v; want %s, %q (%q), enterprise CN",
				tt.giveProvider, tt.giveTier, got.CommissionRate, got.ProviderTier, got.ProviderTierSource, got.TaxProfile, got.Jurisdiction,
				err, tt.wantRate, tt.wantTier, tt.wantSource)
		}
	}
	for _, give := range []string{"partner", "pro"} {
		got, err := quote("p-new", give)
		if !errors.Is(err, apperr.ErrPrecondition) || !strings.Contains(err.Error(), "p-new") || !strings.Contains(err.Error(), "standard") {
			t.Errorf("p-new (not on record) quoted as %s: rate %s, %v; want a failed precondition naming p-new and standard",
				give, got.CommissionRate, err)
		}
	}
}
