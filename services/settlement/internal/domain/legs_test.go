package domain

import (
	"testing"

	"github.com/shopspring/decimal"
)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// The settlement's legs balance (debits = credits = gross) and leave out
// parts without an amount; the sweep moves exactly the commission.
func TestSettlementLegs(t *testing.T) {
	for _, tt := range []struct {
		give Split
		want []Leg
	}{
		{
			give: Split{Currency: "CNY", Gross: d("100.00"), Commission: d("25.00"), Tax: d("15.00"), Net: d("60.00"), Jurisdiction: "CN"},
			want: []Leg{
				{"provider:p-1:pending:cyc-20260101", Debit, d("100.00")},
				{AccountCommission, Credit, d("25.00")},
				{"tax:withheld:CN", Credit, d("15.00")},
				{"provider:p-1:available", Credit, d("60.00")},
			},
		},
		{
			give: Split{Currency: "CNY", Gross: d("0.01"), Commission: d("0"), Tax: d("0"), Net: d("0.01"), Jurisdiction: "CN"},
			want: []Leg{
				{"provider:p-1:pending:cyc-20260101", Debit, d("0.01")},
				{"provider:p-1:available", Credit, d("0.01")},
			},
		},
	} {
		got := SettlementLegs("p-1", "cyc-20260101", tt.give)
		if len(got) != len(tt.want) {
			t.Fatalf("legs %v, want %v", got, tt.want)
		}
		sum := decimal.Zero
		for i, l := range got {
			if l.Account != tt.want[i].Account || l.Direction != tt.want[i].Direction || !l.Amount.Equal(tt.want[i].Amount) {
				t.Errorf("leg %d: %v, want %v", i, l, tt.want[i])
			}
			if l.Direction == Debit {
				sum = sum.Add(l.Amount)
			} else {
				sum = sum.Sub(l.Amount)
			}
		}
		if !sum.IsZero() {
			t.Errorf("legs %v do not balance (%s)", got, sum)
		}
	}
	sweep := SweepLegs(Split{Commission: d("25.00")})
	if len(sweep) != 2 || sweep[0].Account != AccountBankOperating || sweep[0].Direction != Debit || sweep[1].Account != AccountBankClient ||
		sweep[1].Direction != Credit || !sweep[0].Amount.Equal(d("25.00")) || !sweep[1].Amount.Equal(d("25.00")) {
		t.Errorf("sweep legs %v", sweep)
	}
	if legs := SweepLegs(Split{Commission: decimal.Zero}); legs != nil {
		t.Errorf("sweep without a commission: %v", legs)
	}
}
