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

// A write of several transactions is judged for overdrafts as if each were
// posted alone in its turn: a draw is refused where the account stood at
// that point, whatever the write's net change.
func TestOverdrawnJudgesInOrder(t *testing.T) {
	avail, err := ParseAddress("provider:p-1:available")
	if err != nil {
		t.Fatal(err)
	}
	wallet, err := ParseAddress("renter:r-1:wallet")
	if err != nil {
		t.Fatal(err)
	}
	d := decimal.RequireFromString
	// move changes available by amount (a negative one draws from it).
	move := func(kind TxKind, amount string) *Transaction {
		from, to := wallet, avail
		if d(amount).IsNegative() {
			from, to = avail, wallet
		}
		a := d(amount).Abs()
		return &Transaction{Kind: kind, Postings: []Posting{{Account: from, Direction: Debit, Amount: a, Currency: "USD"},
			{Account: to, Direction: Credit, Amount: a, Currency: "USD"}}}
	}
	// bothWays credits available 15 and draws 10 in one transaction.
	bothWays := &Transaction{Kind: TxManual, Postings: []Posting{
		{Account: wallet, Direction: Debit, Amount: d("15"), Currency: "USD"}, {Account: avail, Direction: Credit, Amount: d("15"), Currency: "USD"},
		{Account: avail, Direction: Debit, Amount: d("10"), Currency: "USD"}, {Account: wallet, Direction: Credit, Amount: d("10"), Currency: "USD"}}}
	tests := []struct {
		name   string
		before string
		give   []*Transaction
		want   bool
	}{
		{"a draw from below zero behind a smaller credit", "-50", []*Transaction{move(TxManual, "20"), move(TxManual, "-10")}, true},
		{"a draw below zero ahead of a larger credit", "50", []*Transaction{move(TxManual, "-80"), move(TxManual, "40")}, true},
		{"a draw behind a credit back above zero", "-50", []*Transaction{move(TxManual, "60"), move(TxManual, "-10")}, false},
		{"a draw within the balance", "50", []*Transaction{move(TxManual, "-30"), move(TxManual, "-20")}, false},
		{"a reversal below zero", "0", []*Transaction{move(TxReversal, "-50"), move(TxManual, "10")}, false},
		{"a draw behind a reversal below zero", "10", []*Transaction{move(TxReversal, "-20"), move(TxManual, "-5")}, true},
		{"one transaction judged on its net", "-5", []*Transaction{bothWays}, false},
	}
	for _, tt := range tests {
		delta := decimal.Zero
		for _, x := range tt.give {
			for _, p := range x.Postings { // available is credited on its normal side
				if p.Account == avail && p.Direction == Credit {
					delta = delta.Add(p.Amount)
				} else if p.Account == avail {
					delta = delta.Sub(p.Amount)
				}
			}
		}
		changes := []BalanceChange{{Account: avail, Currency: "USD", Delta: delta, After: d(tt.before).Add(delta)}}
		if got := Overdrawn(tt.give, changes); got != tt.want {
			t.Errorf("%s: Overdrawn = %v, want %v", tt.name, got, tt.want)
		}
	}
}
