package ledger_test

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

func TestDepositAndBalances(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tx := f.deposit(t, "r-1", "100.50", "USD", "bank-ref-1")
	if len(tx.Postings) != 2 || tx.Kind != domain.TxDeposit {
		t.Fatalf("deposit transaction %+v", tx)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "100.50")
	wantBalance(t, f, "bank:client", "USD", "100.50")
	// Replaying the bank reference changes nothing and returns the original.
	again := f.deposit(t, "r-1", "100.5", "USD", "bank-ref-1")
	if again.ID != tx.ID {
		t.Fatalf("replayed deposit got a new transaction %s, want %s", again.ID, tx.ID)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "100.50")
	// Same reference, another amount: conflict.
	_, err := f.app.Deposit(f.ctx, app.DepositInput{RenterID: "r-1", Amount: "7", Currency: "USD", ExternalRef: "bank-ref-1"})
	if !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("want conflict, got %v", err)
	}
}

func TestCreateTransactionValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tests := []struct {
		name string
		give app.CreateTransactionInput
		want string
	}{
		{"unbalanced names currency and difference", app.CreateTransactionInput{IdempotencyKey: "k1", Postings: []domain.RawPosting{
			{Account: "bank:client", Direction: "debit", Amount: "10.00", Currency: "USD"},
			{Account: "renter:r-1:wallet", Direction: "credit", Amount: "9.75", Currency: "USD"},
		}}, "unbalanced in USD: debits exceed credits by 0.25"},
		{"too many decimals for JPY", transfer("k2", "bank:client", "renter:r-1:wallet", "1.5", "JPY"), "more than 0 decimal places"},
		{"negative amount", transfer("k3", "bank:client", "renter:r-1:wallet", "-1", "USD"), "must be positive"},
		{"bad address", transfer("k4", "bank:savings", "renter:r-1:wallet", "1", "USD"), "bank:savings"},
		{"bad cycle", transfer("k5", "renter:r-1:wallet", "provider:p-1:pending:cyc-2026", "1", "USD"), "cyc-YYYYMMDD"},
		{"unknown currency", transfer("k6", "bank:client", "renter:r-1:wallet", "1", "XXX"), "unknown currency"},
		// 1e62 was taken: a balance of 63 digits, 66 characters with 2
		// decimals, which settlement's parse refused (over 64 characters).
		{"beyond 18 digits before the point", transfer("k8", "bank:client", "renter:r-1:wallet", "1e62", "USD"), "postings[0].amount"},
		{"the least amount beyond the bound", transfer("k9", "bank:client", "renter:r-1:wallet", "1000000000000000000", "USD"), "more than 18 digits before the decimal point"},
		{"missing key", transfer("", "bank:client", "renter:r-1:wallet", "1", "USD"), "idempotency_key"},
		{"one posting", app.CreateTransactionInput{IdempotencyKey: "k7", Postings: []domain.RawPosting{
			{Account: "bank:client", Direction: "debit", Amount: "1", Currency: "USD"}}}, "at least two postings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.app.CreateTransaction(f.ctx, tt.give)
			wantInvalid(t, err, tt.want)
		})
	}
}

// A deposit past 18 digits before the point is a 400 naming amount; the
// largest under it is taken.
func TestDepositAmountBound(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, give := range []string{"1e62", "1000000000000000000"} {
		_, err := f.app.Deposit(f.ctx, app.DepositInput{RenterID: "r-1", Amount: give, Currency: "USD", ExternalRef: "bank-big-" + give})
		wantInvalid(t, err, "invalid amount: amount too large")
	}
	f.deposit(t, "r-1", "999999999999999999.99", "USD", "bank-largest")
	wantBalance(t, f, "renter:r-1:wallet", "USD", "999999999999999999.99")
}

func TestMultiCurrencyTransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, err := f.app.CreateTransaction(f.ctx, app.CreateTransactionInput{IdempotencyKey: "fx", Postings: []domain.RawPosting{
		{Account: "bank:client", Direction: "debit", Amount: "10", Currency: "USD"},
		{Account: "renter:r-1:wallet", Direction: "credit", Amount: "4", Currency: "USD"},
		{Account: "renter:r-2:wallet", Direction: "credit", Amount: "6", Currency: "USD"},
		{Account: "bank:client", Direction: "debit", Amount: "1000", Currency: "JPY"},
		{Account: "renter:r-1:wallet", Direction: "credit", Amount: "1000", Currency: "JPY"},
	}, Metadata: map[string]string{"ticket": "FIN-1"}})
	if err != nil {
		t.Fatal(err)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "4")
	wantBalance(t, f, "renter:r-1:wallet", "JPY", "1000")
	wantBalance(t, f, "bank:client", "USD", "10")
}

func TestIdempotentTransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	in := transfer("manual-1", "bank:client", "renter:r-1:wallet", "5.00", "USD")
	in.Metadata = map[string]string{"a": "1", "b": "2"}
	first, err := f.app.CreateTransaction(f.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	// Same request spelled differently: a replay.
	in2 := transfer("manual-1", "bank:client", "renter:r-1:wallet", "5", "usd")
	in2.Metadata = map[string]string{"b": "2", "a": "1"}
	again, err := f.app.CreateTransaction(f.ctx, in2)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("replay returned %s, want the original %s", again.ID, first.ID)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "5")
	_, err = f.app.CreateTransaction(f.ctx, transfer("manual-1", "bank:client", "renter:r-1:wallet", "6", "USD"))
	if !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("same key, other body: want conflict, got %v", err)
	}
}

func TestOverdraftPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	// A renter wallet may go negative.
	c1, err := f.app.CreateTransaction(f.ctx, transfer("c1", "renter:r-1:wallet", "provider:p-1:pending:cyc-20260101", "3", "USD"))
	if err != nil {
		t.Fatal(err)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "-3")
	// A provider account may not.
	_, err = f.app.CreateTransaction(f.ctx, transfer("c2", "provider:p-1:available", "provider:p-1:in_transit", "1", "USD"))
	wantInvalid(t, err, "provider:p-1:available would go negative in USD")
	// Nor the bank.
	_, err = f.app.CreateTransaction(f.ctx, transfer("c3", "renter:r-1:wallet", "bank:client", "1", "USD"))
	wantInvalid(t, err, "bank:client would go negative")
	wantBalance(t, f, "renter:r-1:wallet", "USD", "-3")
	// Unless by a reversal: settle the pending money, then reverse the charge.
	if _, err := f.app.CreateTransaction(f.ctx, transfer("c4", "provider:p-1:pending:cyc-20260101", "provider:p-1:available", "3", "USD")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: c1.ID}); err != nil {
		t.Fatalf("a reversal may overdraw: %v", err)
	}
	wantBalance(t, f, "provider:p-1:pending:cyc-20260101", "USD", "-3")
	wantBalance(t, f, "renter:r-1:wallet", "USD", "0")
}

func TestReversal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	dep := f.deposit(t, "r-1", "50", "CNY", "ref-1")
	if _, err := f.app.CreateTransaction(f.ctx, transfer("spend", "renter:r-1:wallet", "provider:p-1:pending:cyc-20260101", "20", "CNY")); err != nil {
		t.Fatal(err)
	}
	// A description is bounded as on any transaction (900 KB went into the
	// immutable journal).
	var inv *apperr.InvalidError
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID, Description: strings.Repeat("x", domain.DescriptionMax+1)}); !errors.As(err, &inv) {
		t.Fatalf("reversal with a %d-byte description: %v, want InvalidArgument", domain.DescriptionMax+1, err)
	}
	rev, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID})
	if err != nil {
		t.Fatal(err)
	}
	if rev.Reverses != dep.ID || rev.Kind != domain.TxReversal {
		t.Fatalf("reversal %+v does not link %s", rev, dep.ID)
	}
	orig, err := f.app.GetTransaction(f.ctx, dep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if orig.ReversedBy != rev.ID {
		t.Fatalf("original reversed_by = %q, want %s", orig.ReversedBy, rev.ID)
	}
	for i, p := range rev.Postings {
		if p.Account.Address != dep.Postings[i].Account.Address || p.Direction == dep.Postings[i].Direction || !p.Amount.Equal(dep.Postings[i].Amount) {
			t.Fatalf("posting %d is not the mirror: %+v vs %+v", i, p, dep.Postings[i])
		}
	}
	wantBalance(t, f, "bank:client", "CNY", "0")
	wantBalance(t, f, "renter:r-1:wallet", "CNY", "-20")
	// Again with the same (default) key: the same reversal.
	again, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID})
	if err != nil || again.ID != rev.ID {
		t.Fatalf("second reverse = %v, %v; want the first reversal %s", again, err, rev.ID)
	}
	// With another key: refused.
	_, err = f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID, IdempotencyKey: "other"})
	if !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("reversing twice: want conflict, got %v", err)
	}
	// A reversal is not reversed.
	_, err = f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: rev.ID})
	if !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("reversing a reversal: want precondition, got %v", err)
	}
	_, err = f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: "0191e0a4-0000-7000-8000-000000000000"})
	if !errors.Is(err, apperr.ErrNotFound) {
		t.Fatalf("reversing nothing: want not found, got %v", err)
	}
}

func TestAsOf(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	f.deposit(t, "r-1", "10", "USD", "a")
	mid := clk.Now().Add(time.Second)
	clk.Advance(2 * time.Second)
	f.deposit(t, "r-1", "5", "USD", "b")
	v, err := f.app.GetAccount(f.ctx, "renter:r-1:wallet", &mid)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Balances) != 1 || !v.Balances[0].Amount.Equal(dec("10")) {
		t.Fatalf("as of %s: %+v, want 10 USD", mid, v.Balances)
	}
	before := mid.Add(-time.Hour)
	v, err = f.app.GetAccount(f.ctx, "renter:r-1:wallet", &before)
	if err != nil || len(v.Balances) != 0 {
		t.Fatalf("before any posting: %+v, %v", v.Balances, err)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "15")
	_, err = f.app.GetAccount(f.ctx, "renter:nobody:wallet", nil)
	if !errors.Is(err, apperr.ErrNotFound) {
		t.Fatalf("unused account: want not found, got %v", err)
	}
}

func TestJournalIsImmutable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	dep := f.deposit(t, "r-1", "10", "USD", "a")
	for _, q := range []string{
		`update ledger.postings set amount = 1`,
		`delete from ledger.postings`,
		`update ledger.transactions set description = 'x'`,
		`delete from ledger.transactions`,
		`truncate ledger.postings`,
	} {
		if _, err := f.pool.Exec(f.ctx, q); err == nil || !containsStr(err.Error(), "immutable") {
			t.Fatalf("%s: want refused as immutable, got %v", q, err)
		}
	}
	got, err := f.app.GetTransaction(f.ctx, dep.ID)
	if err != nil || !got.Postings[0].Amount.Equal(dec("10")) {
		t.Fatalf("after refused edits: %+v, %v", got, err)
	}
}

func TestHashChainDetectsTampering(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var txs []*domain.Transaction
	for i, ref := range []string{"a", "b", "c", "d"} {
		txs = append(txs, f.deposit(t, "r-1", "1"+string(rune('0'+i)), "USD", ref))
	}
	chainAll(t, f)
	res, err := ledger.VerifyChain(f.ctx, f.pool)
	if err != nil || !res.OK || res.Checked != 4 || res.Unchained != 0 {
		t.Fatalf("clean chain: %+v, %v", res, err)
	}
	// Each transaction carries its chain hash, recomputed here from its content
	// and its predecessor's hash; the last one's is the head.
	prev := domain.GenesisHash
	for i, tx := range txs {
		got, err := f.app.GetTransaction(f.ctx, tx.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := domain.ChainHash(prev, *got)
		if got.Hash != hex.EncodeToString(want) {
			t.Fatalf("transaction %d carries chain hash %q, want %x", i, got.Hash, want)
		}
		prev = want
	}
	if res.HeadHash != hex.EncodeToString(prev) {
		t.Fatalf("head hash %s, want the last transaction's %x", res.HeadHash, prev)
	}
	// A superuser bypasses the immutability trigger and edits an amount.
	for _, q := range []string{
		`alter table ledger.postings disable trigger postings_immutable`,
		`update ledger.postings set amount = 99 where tx_id = '` + txs[2].ID + `' and idx = 1`,
		`alter table ledger.postings enable trigger postings_immutable`,
	} {
		if _, err := f.pool.Exec(f.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err = ledger.VerifyChain(f.ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.FirstBadTransaction != txs[2].ID || res.FirstBadPosition != 3 {
		t.Fatalf("tampered chain: %+v; want transaction %s at position 3 named", res, txs[2].ID)
	}
}

// ledger.balances is not hashed (it must stay writable) but payouts, the
// overdraft check and every balance of now read it: verification checks
// each against the sum of its postings, so an edit of one, or one removed,
// is named. Both passed verification, the journal intact.
func TestVerifyDetectsAlteredBalance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, tamper, want string }{
		{"inflated", `update ledger.balances set credits = credits + 10000 where account = 'renter:r-1:wallet'`, "credits 10030"},
		{"removed", `delete from ledger.balances where account = 'renter:r-1:wallet'`, "credits 0; its postings sum to debits 0, credits 30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			f.deposit(t, "r-1", "10", "USD", "a")
			f.deposit(t, "r-1", "20", "USD", "b")
			chainAll(t, f)
			if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
				t.Fatalf("clean ledger: %+v, %v", res, err)
			}
			if _, err := f.pool.Exec(f.ctx, tc.tamper); err != nil {
				t.Fatal(err)
			}
			res, err := ledger.VerifyChain(f.ctx, f.pool)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK || res.BadBalance != "renter:r-1:wallet USD" || !containsStr(res.Reason, tc.want) {
				t.Fatalf("balance %s: %+v; want renter:r-1:wallet USD named (%q)", tc.name, res, tc.want)
			}
		})
	}
}

// A posting under a transaction id the journal does not hold, its balance
// raised to match, is named by verify: the chain hashes a transaction's
// postings by its id, and the balances still summed their postings, so
// bank:client was 1000 higher in every report and verify said ok.
func TestVerifyDetectsAPostingOfNoTransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "10", "USD", "a")
	chainAll(t, f)
	const ghost = "01890000-0000-7000-8000-000000000001"
	for _, q := range []string{
		`insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
			values ('` + ghost + `', 0, 'bank:client', 'USD', 'debit', 1000, now())`,
		`update ledger.balances set debits = debits + 1000 where account = 'bank:client' and currency = 'USD'`,
	} {
		if _, err := f.pool.Exec(f.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := ledger.VerifyChain(f.ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.FirstBadTransaction != ghost || !containsStr(res.Reason, "not in the journal") {
		t.Fatalf("a posting of no transaction: %+v; want %s named", res, ghost)
	}
}

// A transaction that sorts before the chain's head in (xid, id) order and is
// not chained never will be (the chain takes a transaction once every id
// before it finished): verify names it. It counted as not chained yet and
// verify passed, while a journal moved into a cluster whose transaction ids
// are behind its head chained nothing new.
func TestVerifyDetectsATransactionBehindTheHead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "10", "USD", "a")
	chainAll(t, f)
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK || res.Unchained != 0 {
		t.Fatalf("clean ledger: %+v, %v", res, err)
	}
	var id string
	if err := f.pool.QueryRow(f.ctx, `insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at, xid)
		values (gen_random_uuid(), 'behind', '\x00', 'manual', now(), now(), '3') returning id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.ChainOnce(f.ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	res, err := ledger.VerifyChain(f.ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.FirstBadTransaction != id || res.Unchained != 1 || !containsStr(res.Reason, "never will be") {
		t.Fatalf("a transaction behind the head: %+v; want %s named", res, id)
	}
}

// The reversal link (ledger.reversals) is not part of the chain's hashed
// content; the reversal's hashed metadata names what it reverses, so
// verification catches a link moved to another transaction or removed.
func TestVerifyDetectsAlteredReversalLink(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		tamper func(orig, other, rev string) string
		reason string
	}{
		{"moved", func(orig, other, rev string) string {
			return `update ledger.reversals set original_id = '` + other + `' where reversal_id = '` + rev + `'`
		}, "reversal link names"},
		{"removed", func(orig, other, rev string) string {
			return `delete from ledger.reversals where reversal_id = '` + rev + `'`
		}, "reversal has no link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			dep := f.deposit(t, "r-1", "10", "USD", "a")
			other := f.deposit(t, "r-1", "20", "USD", "b")
			rev, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID})
			if err != nil {
				t.Fatal(err)
			}
			chainAll(t, f)
			if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK || res.Checked != 3 {
				t.Fatalf("clean journal with a reversal: %+v, %v", res, err)
			}
			for _, q := range []string{
				`alter table ledger.reversals disable trigger reversals_immutable`,
				tc.tamper(dep.ID, other.ID, rev.ID),
				`alter table ledger.reversals enable trigger reversals_immutable`,
			} {
				if _, err := f.pool.Exec(f.ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			res, err := ledger.VerifyChain(f.ctx, f.pool)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK || res.FirstBadTransaction != rev.ID || !containsStr(res.Reason, tc.reason) {
				t.Fatalf("altered reversal link: %+v; want reversal %s named (%q)", res, rev.ID, tc.reason)
			}
		})
	}
}
