package ledger_test

import (
	"errors"
	"testing"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// Every idempotent ledger write answers a repeated key the same way: the
// original for the same body, a conflict (409) for another. Deposits by
// external_ref and manual transactions are covered in TestDepositAndBalances
// and TestIdempotentTransaction; here the cases they leave out.
func TestIdempotencyKeysConflictOnAnotherBody(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	dep := f.deposit(t, "r-1", "50", "CNY", "ref-1")
	// A deposit's reference for another renter or currency.
	for name, in := range map[string]app.DepositInput{
		"renter":   {RenterID: "r-2", Amount: "50", Currency: "CNY", ExternalRef: "ref-1"},
		"currency": {RenterID: "r-1", Amount: "50", Currency: "USD", ExternalRef: "ref-1"},
	} {
		if _, err := f.app.Deposit(f.ctx, in); !errors.Is(err, apperr.ErrConflict) {
			t.Errorf("deposit ref-1 with another %s: %v, want conflict", name, err)
		}
	}
	// A manual transaction's key with other postings' accounts or description.
	in := transfer("manual-1", "bank:client", "renter:r-1:wallet", "5", "CNY")
	first, err := f.app.CreateTransaction(f.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	other := transfer("manual-1", "bank:client", "renter:r-2:wallet", "5", "CNY")
	if _, err := f.app.CreateTransaction(f.ctx, other); !errors.Is(err, apperr.ErrConflict) {
		t.Errorf("manual-1 to another account: %v, want conflict", err)
	}
	described := in
	described.Description = "another"
	if _, err := f.app.CreateTransaction(f.ctx, described); !errors.Is(err, apperr.ErrConflict) {
		t.Errorf("manual-1 with another description: %v, want conflict", err)
	}
	// A reversal's key: the same request replays, another description or
	// another transaction under the same key conflicts.
	rev, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID, IdempotencyKey: "rev-1", Description: "bank recall"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID, IdempotencyKey: "rev-1", Description: "bank recall"})
	if err != nil || again.ID != rev.ID {
		t.Fatalf("reversal replay: %v, %v; want %s", again, err, rev.ID)
	}
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID, IdempotencyKey: "rev-1", Description: "typo"}); !errors.Is(err, apperr.ErrConflict) {
		t.Errorf("rev-1 with another description: %v, want conflict", err)
	}
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: first.ID, IdempotencyKey: "rev-1", Description: "bank recall"}); !errors.Is(err, apperr.ErrConflict) {
		t.Errorf("rev-1 reversing another transaction: %v, want conflict", err)
	}
	wantBalance(t, f, "renter:r-1:wallet", "CNY", "5")
	wantBalance(t, f, "renter:r-2:wallet", "CNY", "0")
}

// The keys the ledger gives its own writes are not a caller's to choose: a
// manual entry keyed deposit:wx-9 made the deposit wx-9 a 409 for good, and
// one keyed reverse:{id} the reversal of id asked without a key.
func TestTheLedgersOwnKeysAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tx, err := f.app.CreateTransaction(f.ctx, transfer("m-1", "bank:client", "renter:r-1:wallet", "5", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"deposit:wx-9", "reverse:" + tx.ID} {
		_, err := f.app.CreateTransaction(f.ctx, transfer(key, "bank:client", "renter:r-1:wallet", "1", "CNY"))
		wantInvalid(t, err, "idempotency_key")
	}
	other, err := f.app.CreateTransaction(f.ctx, transfer("m-2", "bank:client", "renter:r-1:wallet", "2", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: other.ID, IdempotencyKey: "reverse:" + tx.ID})
	wantInvalid(t, err, "idempotency_key")
	f.deposit(t, "r-1", "1", "CNY", "wx-9")
	if rev, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: tx.ID}); err != nil || rev.Reverses != tx.ID {
		t.Fatalf("reversal asked without a key: %v, %v", rev, err)
	}
	if rev, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: tx.ID, IdempotencyKey: "reverse:" + tx.ID}); err != nil || rev.Reverses != tx.ID {
		t.Fatalf("the same reversal, its key given: %v, %v", rev, err)
	}
}
