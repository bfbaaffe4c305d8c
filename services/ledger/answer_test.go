package ledger_test

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A write answers with the transaction it has just committed, from memory
// (no read back): that answer must be what a read of it returns, field for
// field, on each write path — grouped API calls, the single-call path
// (a reversal), a deposit.
func TestWriteAnswersWhatAReadReturns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	eff := time.Date(2026, 11, 3, 4, 5, 6, 789123456, time.FixedZone("x", 3600)) // ns and a zone: stored at µs, UTC
	const n = 8
	answers := make([]*domain.Transaction, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { // concurrent: committed in groups
			defer wg.Done()
			in := transfer(fmt.Sprintf("ans-%d", i), "bank:client", fmt.Sprintf("renter:r-%d:wallet", i%3), fmt.Sprintf("%d.50", i+1), "usd")
			in.Description = fmt.Sprintf("manual %d", i)
			if i%2 == 0 {
				in.Metadata, in.EffectiveAt = map[string]string{"ticket": fmt.Sprint(i)}, &eff
			}
			tx, err := f.app.CreateTransaction(f.ctx, in)
			if err != nil {
				t.Error(err)
			}
			answers[i] = tx
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	rev, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: answers[0].ID, IdempotencyKey: "ans-rev", Description: "undo"})
	if err != nil {
		t.Fatal(err)
	}
	dep := f.deposit(t, "r-9", "12.3", "USD", "ans-dep")
	for _, a := range append(answers, rev, dep) {
		got, err := f.app.GetTransaction(f.ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameTransaction(t, a, got)
	}
}

// sameTransaction compares an answer with a read (the chain hash aside: a
// read fills it once the chain worker has got to the transaction; the
// original's ReversedBy aside: the reversal came after its answer).
func sameTransaction(t *testing.T, answer, read *domain.Transaction) {
	t.Helper()
	md := func(m map[string]string) map[string]string {
		if m == nil {
			return map[string]string{}
		}
		return m
	}
	if answer.ID != read.ID || answer.IdempotencyKey != read.IdempotencyKey || answer.Kind != read.Kind ||
		answer.Description != read.Description || answer.Reverses != read.Reverses || answer.ReversedBy != "" ||
		!answer.EffectiveAt.Equal(read.EffectiveAt) || answer.EffectiveAt.Location() != time.UTC ||
		!answer.CreatedAt.Equal(read.CreatedAt) || !maps.Equal(md(answer.Metadata), md(read.Metadata)) || len(answer.Postings) != len(read.Postings) {
		t.Fatalf("answered %+v\nread     %+v", answer, read)
	}
	for i, p := range answer.Postings {
		q := read.Postings[i]
		if p.Account != q.Account || p.Direction != q.Direction || !p.Amount.Equal(q.Amount) || p.Currency != q.Currency {
			t.Fatalf("%s posting %d: answered %+v, read %+v", answer.ID, i, p, q)
		}
	}
}
