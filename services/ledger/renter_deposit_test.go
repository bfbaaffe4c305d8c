package ledger_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// A deposit to a closed renter's wallet is refused, naming the renter as
// closed: r-gone was closed (PATCH /v1/renters/{id}, party.updated status
// closed) with its wallet refunded to 0, and a later top-up (finance's
// POST /v1/deposits for a bank transfer, or a rail's notification through
// payout) was credited to it, client money of a renter gpubill no longer
// serves, which nothing would return. A deposit posted before the close,
// asked again under its reference, still answers that deposit.
func TestDepositToAClosedRenterRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	before := f.deposit(t, "r-gone", "80.00", "CNY", "bank-before-close")
	if _, err := f.pool.Exec(f.ctx, `insert into ledger.renters (renter_id, currency, credit_limit, version, updated_at, closed_at)
		values ('r-gone', 'CNY', 0, 2, now(), $1), ('r-open', 'CNY', 0, 1, now(), null)`, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}

	_, err := f.app.Deposit(f.ctx, app.DepositInput{RenterID: "r-gone", Amount: "50.00", Currency: "CNY", ExternalRef: "bank-after-close"})
	if !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "r-gone") || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("deposit to closed r-gone: %v; want a conflict naming r-gone as closed", err)
	}
	if st, _ := status.FromError(apperr.ToStatus(err)); st.Code() != codes.Aborted { // 409 over REST
		t.Fatalf("deposit to closed r-gone answered %v, want Aborted (409)", st.Code())
	}
	wantBalance(t, f, "renter:r-gone:wallet", "CNY", "80.00")
	wantBalance(t, f, "bank:client", "CNY", "80.00")

	again, err := f.app.Deposit(f.ctx, app.DepositInput{RenterID: "r-gone", Amount: "80.00", Currency: "CNY", ExternalRef: "bank-before-close"})
	if err != nil || again.ID != before.ID {
		t.Fatalf("the deposit made before the close, asked again: %v, %v; want %s", again, err, before.ID)
	}
	// An open renter, or one the ledger has no record of, takes deposits.
	f.deposit(t, "r-open", "10.00", "CNY", "bank-open")
	f.deposit(t, "r-new", "10.00", "CNY", "bank-new")
	wantBalance(t, f, "bank:client", "CNY", "100.00")
}
