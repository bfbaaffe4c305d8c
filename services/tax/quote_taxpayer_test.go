package tax

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
)

// A quote's split names the taxpayer it withheld by and whether that is
// the provider's record: pricing's quote answered no tax profile nor
// jurisdiction, and a caller could not tell a provider's own split from
// one made by what the request gave (a provider the tax service has not
// heard of, whose settlement waits for its profile).
func TestQuoteNamesTheTaxpayer(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	known(t, s, "p-hk", "enterprise", "HK", 1)
	march := timestamppb.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	tests := []struct {
		giveProvider, giveProfile, giveJurisdiction string
		wantProfile, wantJurisdiction               string
		wantOnRecord                                bool
	}{
		{"p-hk", "", "", "enterprise", "HK", true},
		{"p-new", "", "", "individual", "CN", false},
		{"p-new", "enterprise", "US", "enterprise", "US", false},
		{"", "", "HK", "individual", "HK", false},
	}
	for _, tt := range tests {
		got, err := s.api.QuoteWithholding(as(auth.RoleAdmin, ""), &taxv1.QuoteWithholdingRequest{Currency: "CNY", Gross: "1000.00",
			CommissionRate: "0.25", TaxProfile: tt.giveProfile, Jurisdiction: tt.giveJurisdiction, ProviderId: tt.giveProvider, UsageEnd: march})
		if err != nil || got.TaxProfile != tt.wantProfile || got.Jurisdiction != tt.wantJurisdiction || got.ProviderOnRecord != tt.wantOnRecord {
			t.Errorf("quote of %q (%q, %q): %q %q on record %v, %v; want %q %q on record %v", tt.giveProvider, tt.giveProfile,
				tt.giveJurisdiction, got.GetTaxProfile(), got.GetJurisdiction(), got.GetProviderOnRecord(), err,
				tt.wantProfile, tt.wantJurisdiction, tt.wantOnRecord)
		}
	}
}
