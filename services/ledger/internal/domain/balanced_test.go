package domain

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// TestCheckBalancedRefusesOneMinorUnit: a transaction whose debits and
// credits differ by the smallest unit of its currency is refused, in a
// currency of 2, 6 and 18 places, either way round. The ledger's sum check
// is the only thing that keeps the journal at zero (no database constraint
// sums postings), so a tolerance of even one unit would create or destroy
// money one posting at a time.
func TestCheckBalancedRefusesOneMinorUnit(t *testing.T) {
	bank, err := ParseAddress("bank:client")
	if err != nil {
		t.Fatal(err)
	}
	wallet, err := ParseAddress("renter:r-1:wallet")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"CNY", "USDC", "ETH"} {
		unit := decimal.New(1, -int32(money.MustLookup(code).MinorUnits))
		amt := decimal.RequireFromString("10").Add(unit)
		for _, c := range []struct {
			debit, credit decimal.Decimal
			side          string
		}{
			{amt, amt.Sub(unit), "debits exceed credits"},
			{amt.Sub(unit), amt, "credits exceed debits"},
		} {
			vs := CheckBalanced([]Posting{
				{Account: bank, Direction: Debit, Amount: c.debit, Currency: code},
				{Account: wallet, Direction: Credit, Amount: c.credit, Currency: code},
			})
			want := "unbalanced in " + code + ": " + c.side + " by " + unit.String()
			if len(vs) != 1 || !strings.Contains(vs[0].Reason, want) {
				t.Errorf("debit %s, credit %s %s: %v; want one violation %q", c.debit, c.credit, code, vs, want)
			}
		}
		if vs := CheckBalanced([]Posting{
			{Account: bank, Direction: Debit, Amount: amt, Currency: code},
			{Account: wallet, Direction: Credit, Amount: amt, Currency: code},
		}); len(vs) != 0 {
			t.Errorf("balanced %s %s: %v; want none", amt, code, vs)
		}
	}
}
