package domain

import (
	"fmt"
	"testing"

	"github.com/shopspring/decimal"
)

func TestParseAddress(t *testing.T) {
	tests := []struct {
		give  string
		class Class
		kind  Kind
		pool  Pool
		ok    bool
	}{
		{"bank:client", ClassBank, KindAsset, PoolClient, true},
		{"bank:operating", ClassBank, KindAsset, PoolHouse, true},
		{"renter:r-001:wallet", ClassRenter, KindLiability, PoolClient, true},
		{"provider:p-001:pending:cyc-20261112", ClassProvider, KindLiability, PoolClient, true},
		{"provider:p-001:available", ClassProvider, KindLiability, PoolClient, true},
		{"provider:p-001:in_transit", ClassProvider, KindLiability, PoolClient, true},
		{"tax:withheld:CN", ClassTax, KindLiability, PoolTax, true},
		{"platform:revenue:commission", ClassPlatform, KindIncome, PoolHouse, true},
		{"platform:expense:bad_debt", ClassPlatform, KindExpense, PoolHouse, true},
		{"platform:expense:other", "", "", "", false},
		{"bank:other", "", "", "", false},
		{"renter::wallet", "", "", "", false},
		{"renter:r 1:wallet", "", "", "", false},
		{"provider:p-1:pending", "", "", "", false},
		{"provider:p-1:pending:cyc-20261340", "", "", "", false},
		{"provider:p-1:held", "", "", "", false},
		{"tax:withheld:", "", "", "", false},
		{"platform:revenue:fees", "", "", "", false},
		{"", "", "", "", false},
	}
	for _, tt := range tests {
		a, err := ParseAddress(tt.give)
		if (err == nil) != tt.ok {
			t.Fatalf("%q: err %v, want ok=%v", tt.give, err, tt.ok)
		}
		if tt.ok && (a.Class != tt.class || a.Kind != tt.kind || a.Pool != tt.pool) {
			t.Fatalf("%q: %+v", tt.give, a)
		}
	}
}

func TestSegregationBreaches(t *testing.T) {
	p := func(addr string, dir Direction, amt int64) Posting {
		a, err := ParseAddress(addr)
		if err != nil {
			t.Fatal(err)
		}
		return Posting{Account: a, Direction: dir, Amount: decimal.NewFromInt(amt), Currency: "USD"}
	}
	settle := []Posting{p("provider:p:pending:cyc-20261112", Debit, 100), p(PlatformCommission, Credit, 20),
		p("tax:withheld:CN", Credit, 16), p("provider:p:available", Credit, 64)}
	sweep := []Posting{p(BankOperating, Debit, 20), p(BankClient, Credit, 20)}
	tx := func(kind TxKind, mdKind string, ps []Posting) *Transaction {
		return &Transaction{Kind: kind, Metadata: map[string]string{"kind": mdKind}, Postings: ps}
	}
	both := append(append([]Posting{}, settle...), sweep...)
	reversing := func(kind string, ps []Posting) *Transaction {
		return &Transaction{Kind: TxReversal, Metadata: map[string]string{MetaReversesKind: kind}, Postings: ps}
	}
	funding := []Posting{p(BankClient, Debit, 300), p(BankOperating, Credit, 300)}
	writeOff := []Posting{p(PlatformBadDebt, Debit, 300), p("renter:r-2:wallet", Credit, 300)}
	tests := []struct {
		name string
		give *Transaction
		want int
	}{
		{"settlement", tx(TxManual, KindSettlement, settle), 0},
		{"settlement reversed", tx(TxReversal, "", Mirror(settle)), 0},
		{"sweep", tx(TxManual, KindCommissionSweep, sweep), 0},
		{"sweep reversed", tx(TxReversal, "", Mirror(sweep)), 0},
		{"settlement with its sweep", tx(TxManual, KindSettlement, both), 0},
		{"settlement with its sweep reversed", tx(TxReversal, "", Mirror(both)), 0},
		{"client only", tx(TxManual, "", []Posting{p(BankClient, Debit, 5), p("renter:r:wallet", Credit, 5)}), 0},
		// The shapes alone, not posted as settlement's (a finance entry
		// may not name its kinds): each house-pool posting is a breach.
		{"a settlement's shape by finance", tx(TxManual, "", settle), 1},
		{"a settlement's shape as a sweep", tx(TxManual, KindCommissionSweep, settle), 1},
		{"a sweep's shape by finance", tx(TxManual, "", sweep), 1},
		{"a sweep's shape as a settlement", tx(TxManual, KindSettlement, sweep), 1},
		{"a settlement with its sweep by finance", tx(TxManual, "", both), 2},
		{"a settlement's mirror not a reversal", tx(TxManual, "", Mirror(settle)), 1},
		{"house pays into client bank, not a reversal", tx(TxManual, "", []Posting{p(BankOperating, Credit, 5), p(BankClient, Debit, 5)}), 1},
		{"fee from wallet", tx(TxManual, "", []Posting{p("renter:r:wallet", Debit, 5), p(PlatformCommission, Credit, 5)}), 1},
		{"settlement with a sweep larger than its commission", tx(TxManual, KindSettlement, append(append([]Posting{}, settle...), p(BankOperating, Debit, 30), p(BankClient, Credit, 30))), 2},
		{"settlement with a sweep the wrong way", tx(TxManual, KindSettlement, append(append([]Posting{}, settle...), p(BankOperating, Credit, 20), p(BankClient, Debit, 20))), 2},
		// The house funds a client-money shortfall (house → client only),
		// and writes off a departed renter's debt: sanctioned by their
		// kinds, breaches in any other shape, without them, or mirrored.
		{"client money funding", tx(TxClientMoneyFunding, KindClientMoneyFunding, funding), 0},
		{"client money funding's shape without its kind", tx(TxManual, "", funding), 1},
		{"client money funding's shape named by metadata only", tx(TxManual, KindClientMoneyFunding, funding), 1},
		{"client money funding the other way", tx(TxClientMoneyFunding, KindClientMoneyFunding, sweep), 1},
		{"client money funding reversed", tx(TxReversal, "", Mirror(funding)), 1},
		{"client money funding into a wallet", tx(TxClientMoneyFunding, KindClientMoneyFunding, []Posting{p(BankOperating, Credit, 5), p("renter:r:wallet", Credit, 5), p(BankClient, Debit, 10), p(BankOperating, Credit, 10)}), 2},
		{"bad debt write-off", tx(TxBadDebtWriteOff, KindBadDebtWriteOff, writeOff), 0},
		{"bad debt write-off's shape without its kind", tx(TxManual, "", writeOff), 1},
		{"bad debt write-off reversed", tx(TxReversal, "", Mirror(writeOff)), 1},
		{"bad debt write-off to a provider", tx(TxBadDebtWriteOff, KindBadDebtWriteOff, []Posting{p(PlatformBadDebt, Debit, 5), p("provider:p:available", Credit, 5)}), 1},
		{"operating funds a wallet", tx(TxManual, "", []Posting{p(BankOperating, Credit, 5), p("renter:r:wallet", Credit, 5), p(BankOperating, Debit, 10)}), 2},
		// Their reversals, marked by the ledger with the reversed entry's
		// kind: sanctioned as that entry's exact mirror only.
		{"client money funding reversed, marked", reversing(KindClientMoneyFunding, Mirror(funding)), 0},
		{"bad debt write-off reversed, marked", reversing(KindBadDebtWriteOff, Mirror(writeOff)), 0},
		{"a write-off's mirror marked as a funding's", reversing(KindClientMoneyFunding, Mirror(writeOff)), 1},
		{"a funding's mirror marked as a write-off's", reversing(KindBadDebtWriteOff, Mirror(funding)), 1},
		{"a write-off not mirrored, marked", reversing(KindBadDebtWriteOff, writeOff), 1},
		{"a funding's mirror with a fee, marked", reversing(KindClientMoneyFunding, append(Mirror(funding), p("renter:r:wallet", Debit, 5), p(PlatformCommission, Credit, 5))), 2},
		{"a funding's mirror marked, not a reversal", &Transaction{Kind: TxManual, Metadata: map[string]string{MetaReversesKind: KindClientMoneyFunding}, Postings: Mirror(funding)}, 1},
	}
	for _, tt := range tests {
		got := SegregationBreaches(tt.give)
		if len(got) != tt.want {
			t.Fatalf("%s: %d breaches %+v, want %d", tt.name, len(got), got, tt.want)
		}
		// Read back from its pools, a breach is its posting's debits -
		// credits (the report takes them out of the house pool's balance).
		var fromPostings, fromBreaches decimal.Decimal
		for _, p := range tt.give.Postings {
			switch {
			case p.Account.Pool != PoolHouse || len(got) == 0:
			case p.Direction == Debit:
				fromPostings = fromPostings.Add(p.Amount)
			default:
				fromPostings = fromPostings.Sub(p.Amount)
			}
		}
		for _, b := range got {
			fromBreaches = fromBreaches.Add(b.HouseNetDebit())
		}
		if !fromBreaches.Equal(fromPostings) {
			t.Fatalf("%s: breaches read back as %s of house-pool debits - credits, the postings are %s", tt.name, fromBreaches, fromPostings)
		}
	}
}

// A field JSON cannot encode fails the hash: two such requests under one
// idempotency key must not share the hash of nothing and replay each other.
func TestRequestHashRefusesUnencodableField(t *testing.T) {
	if _, err := RequestHash("transaction", map[string]any{"effective_at": func() {}}); err == nil {
		t.Fatal("a func field hashed; want an error")
	}
	a, errA := RequestHash("deposit", map[string]any{"amount": "10.00"})
	b, errB := RequestHash("deposit", map[string]any{"amount": "10.5"})
	if errA != nil || errB != nil || a == b {
		t.Fatalf("distinct requests: %x, %v; %x, %v", a, errA, b, errB)
	}
}

// A statement past its bound folds the rest into one line: the lines still
// add up to the gross, and the answer stays bounded (one line per lease
// made a provider of 45 000 leases an answer past gRPC's 4 MiB).
func TestFoldLines(t *testing.T) {
	var ls []ProviderLine
	total := decimal.Zero
	for i := range 7 {
		a := decimal.NewFromInt(int64(i + 1))
		ls = append(ls, ProviderLine{LeaseID: fmt.Sprintf("l-%d", i), Amount: a, Postings: 2})
		total = total.Add(a)
	}
	got := FoldLines(append([]ProviderLine(nil), ls...), 4)
	sum := decimal.Zero
	for _, l := range got {
		sum = sum.Add(l.Amount)
	}
	if len(got) != 4 || !sum.Equal(total) || got[3].Postings != 8 || got[3].LeaseID != "" || !got[3].Amount.Equal(decimal.NewFromInt(22)) {
		t.Fatalf("folded %+v: want 4 lines adding up to %s, the last of 4 lines' 8 postings", got, total)
	}
	if len(FoldLines(ls[:4], 4)) != 4 {
		t.Fatal("a statement at its bound was folded")
	}
}
