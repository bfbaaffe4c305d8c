package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/sandbox"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// The sandbox reports what its first submission of a reference booked: the
// same reference sent again at another amount (a payout made again after a
// restore at another net) changes nothing, and the answer says the amount
// booked, not the one sent.
func TestSandboxReportsTheAmountBooked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testkit.NewPool(t)
	if err := pg.Migrate(ctx, pool, "payout", migrations.For("payout")); err != nil {
		t.Fatal(err)
	}
	s := &sandbox.Sandbox{Pool: pool, Clock: clock.System{}, Latency: time.Hour}
	tr := app.Transfer{Reference: "po_1", ProviderID: "p-1", Currency: "CNY", Amount: decimal.RequireFromString("320.00"),
		Method: domain.Method{Type: domain.MethodBank, AccountNumber: "6222000011110001"}}
	for _, amount := range []string{"320.00", "300.00"} {
		tr.Amount = decimal.RequireFromString(amount)
		st, err := s.Submit(ctx, tr)
		if err != nil || st.Currency != "CNY" || !st.Amount.Equal(decimal.RequireFromString("320.00")) {
			t.Fatalf("submit of %s: %+v %v; want 320.00 CNY", amount, st, err)
		}
	}
	if st, err := s.Query(ctx, "po_1"); err != nil || st.Currency != "CNY" || !st.Amount.Equal(decimal.RequireFromString("320.00")) {
		t.Fatalf("query: %+v %v; want 320.00 CNY", st, err)
	}
	if n, err := s.Submissions(ctx, "po_1"); err != nil || n != 2 {
		t.Fatalf("%d submissions, %v; want 2", n, err)
	}
}
