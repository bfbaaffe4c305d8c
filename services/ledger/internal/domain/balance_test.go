package domain

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// A wallet is announced depleted once, when a debit takes it from above zero
// (or from nothing) to zero or below, naming the write's last transaction on it.
func TestDepletions(t *testing.T) {
	at := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	acc := func(addr string) Account {
		a, err := ParseAddress(addr)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	w1, w2, w3, w4 := acc("renter:r-1:wallet"), acc("renter:r-2:wallet"), acc("renter:r-3:wallet"), acc("renter:r-4:wallet")
	pending := acc("provider:p-1:pending:cyc-20261112")
	d := decimal.RequireFromString
	tx := func(id string, w Account) *Transaction {
		return &Transaction{ID: id, Postings: []Posting{{Account: w, Direction: Debit, Amount: d("1"), Currency: "USD"},
			{Account: pending, Direction: Credit, Amount: d("1"), Currency: "USD"}}}
	}
	txs := []*Transaction{tx("t1", w1), tx("t2", w1), tx("t3", w2), tx("t4", w3), tx("t5", w4)}
	changes := []BalanceChange{
		{Account: w1, Currency: "USD", Delta: d("-2"), After: d("0")},                 // 2 → 0: depleted, by t2
		{Account: w2, Currency: "USD", Delta: d("-1"), After: d("-3")},                // -2 → -3: already depleted
		{Account: w3, Currency: "USD", Delta: d("-1"), After: d("-1"), Created: true}, // nothing → -1: depleted
		{Account: w4, Currency: "USD", Delta: d("-1"), After: d("4")},                 // 5 → 4: still in credit
		{Account: pending, Currency: "USD", Delta: d("5"), After: d("5")},
	}
	got := Depletions(txs, changes, at)
	want := []WalletDepletion{
		{RenterID: "r-1", Currency: "USD", Balance: d("0"), TransactionID: "t2", At: at},
		{RenterID: "r-3", Currency: "USD", Balance: d("-1"), TransactionID: "t4", At: at},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.RenterID != w.RenterID || g.Currency != w.Currency || !g.Balance.Equal(w.Balance) || g.TransactionID != w.TransactionID || !g.At.Equal(w.At) {
			t.Fatalf("depletion %d: got %+v, want %+v", i, g, w)
		}
	}
}
