package postgres

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/ids"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A big write is announced in a few ledger.posted batches per class, each
// under the payload bound, every transaction exactly once per class.
func TestPostedEventsBatchedPerClass(t *testing.T) {
	const n = 8000
	now := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	txs := make([]*domain.Transaction, n)
	for i := range txs {
		w, err := domain.ParseAddress(domain.RenterWallet(fmt.Sprintf("r-%d", i%100)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := domain.ParseAddress(domain.ProviderPendingAddr(fmt.Sprintf("p-%d", i%50), "cyc-20261112"))
		if err != nil {
			t.Fatal(err)
		}
		amt := decimal.RequireFromString("2.83")
		txs[i] = &domain.Transaction{ID: ids.New(""), IdempotencyKey: fmt.Sprintf("chg_%d", i), Kind: domain.TxCharge,
			EffectiveAt: now, CreatedAt: now, Postings: []domain.Posting{
				{Account: w, Direction: domain.Debit, Amount: amt, Currency: "USD"},
				{Account: p, Direction: domain.Credit, Amount: amt, Currency: "USD"}}}
	}
	msgs := postedEvents(txs)
	seen := map[string]map[string]int{}
	ids := map[string]bool{}
	for _, m := range msgs {
		if len(m.Payload) > postedPayloadMax {
			t.Fatalf("%s: %d bytes, over %d", m.ID, len(m.Payload), postedPayloadMax)
		}
		if ids[m.ID] {
			t.Fatalf("message id %s twice", m.ID)
		}
		ids[m.ID] = true
		var b eventsv1.LedgerPostedBatch
		if err := proto.Unmarshal(m.Payload, &b); err != nil {
			t.Fatal(err)
		}
		if seen[m.Subject] == nil {
			seen[m.Subject] = map[string]int{}
		}
		for _, tx := range b.Transactions {
			seen[m.Subject][tx.IdempotencyKey]++
			if len(tx.Postings) != 2 {
				t.Fatalf("%s: %d postings", tx.IdempotencyKey, len(tx.Postings))
			}
		}
	}
	if len(msgs) < 4 || len(msgs) > 40 {
		t.Fatalf("%d messages for %d transactions in 2 classes", len(msgs), n)
	}
	for _, subj := range []string{"ledger.posted.renter", "ledger.posted.provider"} {
		if len(seen[subj]) != n {
			t.Fatalf("%s announced %d transactions, want %d", subj, len(seen[subj]), n)
		}
		for k, c := range seen[subj] {
			if c != 1 {
				t.Fatalf("%s announced %s %d times", subj, k, c)
			}
		}
	}
}

// The ledger.posted payloads written with protowire are what proto.Marshal
// writes for the same LedgerPostedBatch, byte for byte, and carry each
// transaction as the generated types would: ids, both instants (a zero
// nanosecond and the zero time included), every posting in order, a class
// a transaction moves twice announced once.
func TestPostedEventsAreProtobuf(t *testing.T) {
	at := time.Date(2026, 11, 20, 7, 30, 15, 123456000, time.UTC)
	addr := func(s string) domain.Account {
		a, err := domain.ParseAddress(s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	txs := []*domain.Transaction{
		{ID: ids.New(""), IdempotencyKey: "chg_1", Kind: domain.TxCharge, EffectiveAt: at, CreatedAt: at.Truncate(time.Second),
			Postings: []domain.Posting{
				{Account: addr(domain.RenterWallet("r-1")), Direction: domain.Debit, Amount: decimal.RequireFromString("2.830"), Currency: "USD"},
				{Account: addr(domain.ProviderPendingAddr("p-1", "cyc-20261112")), Direction: domain.Credit, Amount: decimal.RequireFromString("2.83"), Currency: "USD"}}},
		{ID: ids.New(""), IdempotencyKey: "", Kind: domain.TxManual, CreatedAt: at,
			Postings: []domain.Posting{
				{Account: addr(domain.RenterWallet("r-1")), Direction: domain.Debit, Amount: decimal.RequireFromString("1000000000000000000000.01"), Currency: "CNY"},
				{Account: addr(domain.RenterWallet("r-2")), Direction: domain.Credit, Amount: decimal.RequireFromString("600000000000000000000.005"), Currency: "CNY"},
				{Account: addr(domain.ProviderPendingAddr("p-2", "cyc-20261112")), Direction: domain.Credit, Amount: decimal.RequireFromString("400000000000000000000.005"), Currency: "CNY"}}},
	}
	want := map[string][]*eventsv1.LedgerPosted{} // by subject, in order
	for _, x := range txs {
		ev := &eventsv1.LedgerPosted{TransactionId: x.ID, IdempotencyKey: x.IdempotencyKey,
			EffectiveAt: timestamppb.New(x.EffectiveAt), CreatedAt: timestamppb.New(x.CreatedAt)}
		for _, p := range x.Postings {
			ev.Postings = append(ev.Postings, &eventsv1.Posting{Account: p.Account.Address, Direction: string(p.Direction),
				Amount: p.Amount.String(), Currency: p.Currency})
		}
		classes := map[domain.Class]bool{}
		for _, p := range x.Postings {
			if !classes[p.Account.Class] {
				classes[p.Account.Class] = true
				subj := "ledger.posted." + string(p.Account.Class)
				want[subj] = append(want[subj], ev)
			}
		}
	}
	msgs := postedEvents(txs)
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want one per class (2)", len(msgs))
	}
	for _, m := range msgs {
		var b eventsv1.LedgerPostedBatch
		if err := proto.Unmarshal(m.Payload, &b); err != nil {
			t.Fatal(err)
		}
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(&b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, m.Payload) {
			t.Fatalf("%s: payload\n%x\nproto.Marshal writes\n%x", m.Subject, m.Payload, again)
		}
		if b.BatchId != m.ID {
			t.Fatalf("batch id %q, message id %q", b.BatchId, m.ID)
		}
		w := want[m.Subject]
		if len(b.Transactions) != len(w) {
			t.Fatalf("%s: %d transactions, want %d", m.Subject, len(b.Transactions), len(w))
		}
		for i := range w {
			if !proto.Equal(b.Transactions[i], w[i]) {
				t.Fatalf("%s #%d:\n%v\nwant\n%v", m.Subject, i, b.Transactions[i], w[i])
			}
		}
	}
}

// One write depleting two renters' wallets in one currency (a manual entry
// debiting both) gives each its billing.wallet.depleted message: their ids
// named the transaction and currency only, so the outbox kept the first and
// the second renter's event was lost.
func TestDepletionsOfOneWriteHaveTheirOwnIDs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	msgs := depletedEvents([]domain.WalletDepletion{
		{RenterID: "r-a", Currency: "CNY", Balance: decimal.Zero, TransactionID: "tx-1", At: at},
		{RenterID: "r-b", Currency: "CNY", Balance: decimal.Zero, TransactionID: "tx-1", At: at},
	})
	if len(msgs) != 2 || msgs[0].ID == msgs[1].ID {
		t.Fatalf("depletions of r-a and r-b in one write: %d messages, ids %q; want 2 of their own", len(msgs), []string{msgs[0].ID, msgs[1].ID})
	}
}
