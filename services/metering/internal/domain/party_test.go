package domain

import (
	"strings"
	"testing"

	"github.com/gpubill/gpubill/pkg/money"
)

// A renter's credit limit is an amount: at most 18 digits before the
// point. "1e64" was taken; published as its 65 digits, the ledger's parse
// refused it (over 64 characters) and dead-lettered the renter's
// party.updated, so the ledger never learned the renter's limit.
func TestRenterCreditLimitBound(t *testing.T) {
	tests := []struct {
		give string
		want string // a reason's part, "" = accepted
	}{
		{"999999999999999999.99", ""},
		{"1000000000000000000", "more than 18 digits before the decimal point"},
		{"1e64", "more than 18 digits before the decimal point"},
		{"10.001", "more than 2 decimal places"},
	}
	for _, tt := range tests {
		_, vs := ParseRenter(RenterInput{ID: "r-1", Name: "Lab", Currency: "CNY", CreditLimit: tt.give})
		if tt.want == "" {
			if len(vs) > 0 {
				t.Errorf("credit limit %s: %v", tt.give, vs)
			}
			continue
		}
		if len(vs) != 1 || vs[0].Field != "credit_limit" || !strings.Contains(vs[0].Reason, tt.want) {
			t.Errorf("credit limit %s: %v, want one naming credit_limit: %s", tt.give, vs, tt.want)
		}
	}
}

// A provider's PUE is at most 10 (total facility power over IT power: real
// data centres are near 1.1 to 3). "1e64" was taken and published on every
// usage event as its 65 digits; pricing's parse refused it (over 64
// characters) and rated the usage as if the PUE were unknown: no surcharge.
// What ParseProvider takes, pricing reads back.
func TestProviderPUEBound(t *testing.T) {
	tests := []struct {
		give string
		want string // a reason's part, "" = accepted
	}{
		{"1", ""},
		{"1.45", ""},
		{"10", ""},
		{"1." + strings.Repeat("9", 62), ""},
		{"10.01", "above 10"},
		{"1e64", "above 10"},
		{"0.99", "below 1"},
	}
	for _, tt := range tests {
		p, vs := ParseProvider(ProviderInput{ID: "p-1", Tier: "pro", TaxProfile: "individual", Jurisdiction: "CN", PUE: tt.give})
		if tt.want == "" {
			if len(vs) > 0 {
				t.Errorf("pue %s: %v", tt.give, vs)
				continue
			}
			if _, err := money.ParseDecimal(PUEString(p.PUE)); err != nil {
				t.Errorf("pue %s is published as %q, which pricing cannot read: %v", tt.give, PUEString(p.PUE), err)
			}
			continue
		}
		if len(vs) != 1 || vs[0].Field != "pue" || !strings.Contains(vs[0].Reason, tt.want) {
			t.Errorf("pue %s: %v, want one naming pue: %s", tt.give, vs, tt.want)
		}
	}
}
