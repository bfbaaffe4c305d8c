package domain

import (
	"strings"
	"testing"
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
