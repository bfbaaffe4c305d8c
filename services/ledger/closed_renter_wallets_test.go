package ledger_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A closed renter's wallet is left at 0 by its close (its balance
// refunded, its debt written off), but a reversal restores the state
// before its entry: the refund the bank returned puts the money back in the
// closed wallet, client money nobody spends or claims, and nothing said
// so. gpubill_ledger_closed_renter_wallets counts closed renters' wallets
// off zero, by currency and sign: r-gone's 100.00 CNY after its refund's
// reversal, r-debt's 30.00 USD of debt not written off; not r-zero (closed
// at 0) nor r-open (open, with money).
func TestClosedRenterWalletsMetric(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	cyc := f.app.Calendar.At(time.Now()).ID
	f.deposit(t, "r-gone", "100.00", "CNY", "bank-gone")
	f.deposit(t, "r-zero", "50.00", "CNY", "bank-zero")
	f.deposit(t, "r-open", "70.00", "CNY", "bank-open")
	refund, err := f.app.CreateTransaction(f.ctx, transfer("refund-gone", "renter:r-gone:wallet", "bank:client", "100.00", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []app.CreateTransactionInput{
		transfer("refund-zero", "renter:r-zero:wallet", "bank:client", "50.00", "CNY"),
		transfer("usage-debt", "renter:r-debt:wallet", domain.ProviderPendingAddr("p-1", cyc), "30.00", "USD"),
	} {
		if _, err := f.app.CreateTransaction(f.ctx, in); err != nil {
			t.Fatalf("%s: %v", in.IdempotencyKey, err)
		}
	}
	if _, err := f.pool.Exec(f.ctx, `insert into ledger.renters (renter_id, currency, credit_limit, version, updated_at, closed_at)
		values ('r-gone', 'CNY', 0, 2, now(), now()), ('r-zero', 'CNY', 0, 2, now(), now()),
			('r-debt', 'USD', 0, 2, now(), now()), ('r-open', 'CNY', 0, 1, now(), null)`); err != nil {
		t.Fatal(err)
	}
	metric := func() map[string]float64 {
		t.Helper()
		for _, m := range ledger.Metrics() {
			if m.Name != "gpubill_ledger_closed_renter_wallets" {
				continue
			}
			rows, err := f.pool.Query(f.ctx, m.Query)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			out := map[string]float64{}
			for rows.Next() {
				var cur, sign string
				var v float64
				if err := rows.Scan(&cur, &sign, &v); err != nil {
					t.Fatal(err)
				}
				out[cur+" "+sign] = v
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		}
		t.Fatal("no metric gpubill_ledger_closed_renter_wallets")
		return nil
	}
	if got, want := fmt.Sprint(metric()), fmt.Sprint(map[string]float64{"USD negative": 1}); got != want {
		t.Fatalf("closed renters' wallets off zero before the reversal: %s; want %s", got, want)
	}
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: refund.ID}); err != nil {
		t.Fatalf("reversal of r-gone's refund: %v", err)
	}
	wantBalance(t, f, "renter:r-gone:wallet", "CNY", "100.00")
	if got, want := fmt.Sprint(metric()), fmt.Sprint(map[string]float64{"CNY positive": 1, "USD negative": 1}); got != want {
		t.Fatalf("closed renters' wallets off zero after r-gone's refund was reversed: %s; want %s", got, want)
	}
}
