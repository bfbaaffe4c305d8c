package ports

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// decodedWallets is what movedWallets must find: the renter wallets of the
// fully decoded batch, each once, in the order first named.
func decodedWallets(t *testing.T, wire []byte) []domain.WalletKey {
	t.Helper()
	var b eventsv1.LedgerPostedBatch
	if err := proto.Unmarshal(wire, &b); err != nil {
		t.Fatal(err)
	}
	seen := map[domain.WalletKey]bool{}
	var keys []domain.WalletKey
	for _, tx := range b.Transactions {
		for _, p := range tx.Postings {
			renter, ok := walletOwner(p.Account)
			k := domain.WalletKey{RenterID: renter, Currency: p.Currency}
			if ok && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// TestMovedWalletsReadsOnlyWhatItNeeds: reading the accounts and currencies
// off the wire finds the wallets a full decode finds, in the same order,
// across batches of every shape (wallets named twice, other accounts of the
// renter and other classes, several currencies, fields a later version may
// add); a batch that is not protobuf, or names an account that is not
// UTF-8, is refused.
func TestMovedWalletsReadsOnlyWhatItNeeds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	accounts := func() string {
		switch rng.IntN(6) {
		case 0:
			return "bank:client"
		case 1:
			return fmt.Sprintf("provider:p-%d:pending:cyc-20261112", rng.IntN(5))
		case 2:
			return fmt.Sprintf("renter:r-%d:deposits", rng.IntN(5)) // a renter's, not its wallet
		default:
			return fmt.Sprintf("renter:r-%d:wallet", rng.IntN(40))
		}
	}
	found := 0
	for i := range 500 {
		b := &eventsv1.LedgerPostedBatch{BatchId: fmt.Sprintf("ledger-posted-%d-renter", i)}
		for range rng.IntN(30) {
			tx := &eventsv1.LedgerPosted{TransactionId: fmt.Sprintf("tx-%d", rng.IntN(1e6)), IdempotencyKey: "k",
				EffectiveAt: timestamppb.Now(), CreatedAt: timestamppb.Now()}
			for range 1 + rng.IntN(4) {
				tx.Postings = append(tx.Postings, &eventsv1.Posting{Account: accounts(), Direction: "debit", Amount: "1.00",
					Currency: []string{"USD", "CNY", "EUR"}[rng.IntN(3)]})
			}
			b.Transactions = append(b.Transactions, tx)
		}
		wire, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 { // a field this version does not know, after the rest
			wire = protowire.AppendTag(wire, 99, protowire.BytesType)
			wire = protowire.AppendString(wire, "later")
		}
		got, err := movedWallets(wire)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		want := decodedWallets(t, wire)
		if !slices.Equal(got, want) {
			t.Fatalf("batch %d: %v, want %v", i, got, want)
		}
		found += len(got)
	}
	if found == 0 {
		t.Fatal("no batch moved a wallet: the test checks nothing")
	}

	bad := func(account string) []byte {
		wire, err := proto.Marshal(&eventsv1.LedgerPostedBatch{Transactions: []*eventsv1.LedgerPosted{{
			Postings: []*eventsv1.Posting{{Account: "renter:r-1:wallet", Currency: "USD"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return []byte(string(wire[:len(wire)-len("renter:r-1:wallet")-5]) + account + string(wire[len(wire)-5:]))
	}
	if got, err := movedWallets(bad("renter:r-2:wallet")); err != nil || len(got) != 1 || got[0].RenterID != "r-2" {
		t.Fatalf("same-length account swapped in: %v, %v (the splice the next cases rely on is wrong)", got, err)
	}
	for name, wire := range map[string][]byte{
		"an account that is not UTF-8": bad("renter:r-\xff:wallet"),
		"a length past the end":        {0x12, 0x40, 0x2a, 0x02},
		"a truncated tag":              {0x12, 0x01, 0x80},
		"a truncated posting length":   {0x12, 0x02, 0x2a, 0x80},
		"field number zero":            {0x02, 0x00},
	} {
		if got, err := movedWallets(wire); err == nil {
			t.Errorf("%s: accepted (%v)", name, got)
		}
	}
}
