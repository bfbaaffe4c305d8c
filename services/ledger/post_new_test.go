package ledger_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// apiTx is a manual entry of amount USD from one account to another, as
// CreateTransaction builds it.
func apiTx(t *testing.T, key, from, to, amount string) *domain.Transaction {
	t.Helper()
	fa, err := domain.ParseAddress(from)
	if err != nil {
		t.Fatal(err)
	}
	ta, err := domain.ParseAddress(to)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	return &domain.Transaction{ID: ids.New(""), IdempotencyKey: key, Kind: domain.TxManual, Description: "entry " + key,
		EffectiveAt: at, CreatedAt: at, Metadata: map[string]string{"ticket": key}, RequestHash: sha256.Sum256([]byte(key)),
		Postings: []domain.Posting{
			{Account: fa, Direction: domain.Debit, Amount: dec(amount), Currency: "USD"},
			{Account: ta, Direction: domain.Credit, Amount: dec(amount), Currency: "USD"}}}
}

// written is everything a write leaves in the ledger's tables: journal rows
// with their postings, accounts, balances and outbox rows, one string each.
func written(t *testing.T, f *fixture) []string {
	t.Helper()
	return f.texts(t, `
		select format('tx %s|%s|%s|%s|%s|%s|%s|%s|%s', t.id, t.idempotency_key, encode(t.request_hash, 'hex'), t.kind,
			t.description, t.effective_at, t.created_at, t.metadata::text,
			(select string_agg(format('%s %s %s %s %s %s', p.idx, p.account, p.currency, p.direction, p.amount, p.created_at), ';' order by p.idx)
			 from ledger.postings p where p.tx_id = t.id))
		from ledger.transactions t
		union all select format('account %s %s %s %s', address, class, kind, fund_pool) from ledger.accounts
		union all select format('balance %s %s %s %s %s', account, currency, debits, credits, cycle_id) from ledger.balances
		union all select format('outbox %s %s %s', id, subject, encode(payload, 'hex')) from ledger.outbox
		order by 1`)
}

// A group of new API writes posted in one round trip (PostNew) leaves
// exactly what Tx.Post leaves for the same transactions: journal rows and
// postings (amounts at their own scale), accounts created on first use,
// balances, ledger.posted events; and answers the same balance changes.
func TestPostNewWritesWhatPostWrites(t *testing.T) {
	t.Parallel()
	var txs []*domain.Transaction
	amounts := []string{"1.50", "10", "0.001", "250.00", "3.3"}
	for i := range 20 {
		txs = append(txs, apiTx(t, fmt.Sprintf("k-%02d", i), "bank:client", fmt.Sprintf("renter:r-%d:wallet", i%7), amounts[i%len(amounts)]))
	}
	txs = append(txs, apiTx(t, "k-20", "renter:r-1:wallet", "renter:r-2:wallet", "0.25")) // a wallet debited, left positive
	posted, grouped := newFixture(t, nil), newFixture(t, nil)
	var want []domain.BalanceChange
	if err := posted.app.Store.WithTx(posted.ctx, func(tx app.Tx) error {
		fresh, ch, err := tx.Post(posted.ctx, txs)
		if err == nil && len(fresh) != len(txs) {
			err = fmt.Errorf("%d of %d posted", len(fresh), len(txs))
		}
		want = ch
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got, err := grouped.app.Store.PostNew(grouped.ctx, txs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("balance changes:\n PostNew %v\n    Post %v", got, want)
	}
	a, b := written(t, posted), written(t, grouped)
	if len(a) != len(b) {
		t.Fatalf("Post left %d rows, PostNew %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("row %d differs:\n    Post %s\n PostNew %s", i, a[i], b[i])
		}
	}
	checkInvariants(t, grouped)

	// The chain hashes what PostNew wrote, not what it reads back: a row
	// altered before it is chained does not verify.
	editJournalRow(t, grouped, txs[7].ID)
	chainWritten(t, grouped)
	if res, err := ledger.VerifyChain(grouped.ctx, grouped.pool); err != nil || res.OK || res.FirstBadTransaction != txs[7].ID {
		t.Fatalf("altered before chained: %+v, %v; want transaction %s named", res, err, txs[7].ID)
	}
}

// PostNew writes nothing and answers ErrUsePost for a group it cannot take
// as new and unjudged: a key already stored, a balance a judge must see (a
// wallet taken to zero or below, an account that may not go negative taken
// below zero, even by a draw that a later credit of the group makes up for),
// a segregation breach. A wallet debited but left above zero
// needs no judge.
func TestPostNewLeavesToPostWhatNeedsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	s := f.app.Store
	if _, err := s.PostNew(f.ctx, []*domain.Transaction{
		apiTx(t, "fund-1", "bank:client", "renter:r-1:wallet", "10.00"),
		apiTx(t, "fund-2", "bank:client", "renter:r-2:wallet", "10.00"),
	}, nil); err != nil {
		t.Fatal(err)
	}
	before := written(t, f)
	for _, c := range []struct {
		name string
		txs  []*domain.Transaction
	}{
		{"a stored key", []*domain.Transaction{apiTx(t, "new", "bank:client", "renter:r-3:wallet", "1"), apiTx(t, "fund-2", "bank:client", "renter:r-2:wallet", "10.00")}},
		{"a wallet taken to zero", []*domain.Transaction{apiTx(t, "zero", "renter:r-1:wallet", "renter:r-3:wallet", "10.00")}},
		{"a wallet taken below zero", []*domain.Transaction{apiTx(t, "below", "renter:r-2:wallet", "renter:r-3:wallet", "10.01")}},
		{"a new wallet debited", []*domain.Transaction{apiTx(t, "fresh", "renter:r-9:wallet", "renter:r-3:wallet", "1")}},
		{"an overdraft", []*domain.Transaction{apiTx(t, "od", "provider:p-1:available", "renter:r-3:wallet", "1")}},
		{"an overdraft ahead of a larger credit", []*domain.Transaction{apiTx(t, "od-first", "provider:p-1:available", "renter:r-3:wallet", "1"),
			apiTx(t, "credit-after", "renter:r-1:wallet", "provider:p-1:available", "2")}},
		{"an asset below zero", []*domain.Transaction{apiTx(t, "asset", "bank:operating", "bank:client", "20.01")}},
		{"a breach", []*domain.Transaction{apiTx(t, "fee", "renter:r-1:wallet", "platform:revenue:commission", "1.00")}},
	} {
		if _, err := s.PostNew(f.ctx, c.txs, nil); !errors.Is(err, app.ErrUsePost) {
			t.Fatalf("%s: %v, want ErrUsePost", c.name, err)
		}
		if after := written(t, f); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("%s: the refused group changed the ledger", c.name)
		}
	}
	if _, err := s.PostNew(f.ctx, []*domain.Transaction{apiTx(t, "pay", "renter:r-1:wallet", "renter:r-3:wallet", "9.99")}, nil); err != nil {
		t.Fatalf("a wallet left at 0.01: %v", err)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "0.01")
	checkInvariants(t, f)
}
