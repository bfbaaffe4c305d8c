package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/proto"

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
