package ledger_test

import (
	"errors"
	"testing"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// A request replaying a posted idempotency key with another body, committed
// in a group of more than one write (commitGroup's per-key replay path, not
// postOne's), is refused as a conflict: answered with the posted
// transaction, the caller would believe its own (other) entry was posted.
// The group's other write is posted.
func TestGroupCommitRefusesAReplayWithAnotherBody(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	if _, err := f.app.CreateTransaction(f.ctx, transfer("k-1", "bank:client", "renter:r-1:wallet", "5", "USD")); err != nil {
		t.Fatal(err)
	}
	errs := queueBehindDeposit(t, f,
		transfer("k-1", "bank:client", "renter:r-1:wallet", "7", "USD"), // another body under k-1
		transfer("k-2", "bank:client", "renter:r-1:wallet", "2", "USD"))
	if errs[0] != nil || !errors.Is(errs[1], apperr.ErrConflict) || errs[2] != nil {
		t.Fatalf("deposit %v, k-1 with another body %v, k-2 %v; want k-1's replay alone refused as a conflict", errs[0], errs[1], errs[2])
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "7")
	checkInvariants(t, f)
}
