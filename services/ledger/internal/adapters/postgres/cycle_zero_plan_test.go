package postgres

import (
	"testing"

	"github.com/gpubill/gpubill/pkg/testkit"
)

// A cycle's listing reads each of its 0.00 charges on one page. Read with
// the non-zero balances as one union, the 0.00 accounts' part read every
// 0.00 charge after the cursor on each page until it had a page of
// accounts with no balance, and where most providers with a balance had
// 0.00 charges too, a close paged with the square of the cycle's size
// (34 s against 0.06 s for 100 000 providers and 2 million 0.00 charges).
// Here 200 providers with a balance and 5 charges of 0.00 each, and 3 with
// only 0.00 charges among them, paged 10 at a time: the listing must hold
// the 203, the 3 at 0, reading under twice the 1 015 charges' entries.
func TestCycleListingReadsEachZeroChargeOnce(t *testing.T) {
	t.Parallel()
	ctx, pool, _ := migratedStore(t)
	const cycle = "cyc-20260928"
	if _, err := pool.Exec(ctx, `insert into ledger.balances (account, currency, debits, credits, cycle_id)
		select format('provider:p-%s:pending:%s', lpad(i::text, 3, '0'), $1::text), 'CNY', 0, 1.25, $1::text from generate_series(0, 199) i`, cycle); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.unbilled_charges (charge_id, renter_id, account, currency, metadata, created_at)
		select format('chg-%s-%s', p, k), 'r-1', format('provider:p-%s:pending:%s', p, $1::text), 'CNY', '{}', now()
		from (select lpad(i::text, 3, '0') as p from generate_series(0, 199) i union all values ('050z'), ('120z'), ('199z')) ps,
			generate_series(1, 5) k`, cycle); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `analyze ledger.unbilled_charges; analyze ledger.balances`); err != nil {
		t.Fatal(err)
	}
	on := testkit.GenericPlanPool(t, ctx, pool)
	var got, zero int
	read := testkit.IndexTuplesRead(t, ctx, pool, on, "ledger", "unbilled_charges_cycle", func() {
		afterAcc, afterCur := "", ""
		for range 100 {
			bs, err := ListCycleBalances(ctx, on, cycle, afterAcc, afterCur, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range bs {
				if b.Amount.IsZero() {
					zero++
				}
			}
			got += len(bs)
			if len(bs) < 10 {
				return
			}
			afterAcc, afterCur = bs[len(bs)-1].Account, bs[len(bs)-1].Currency
		}
		t.Fatal("more than 100 pages")
	})
	t.Logf("%d entries read", read)
	if got != 203 || zero != 3 {
		t.Fatalf("listed %d accounts, %d at 0; want 203, 3", got, zero)
	}
	if read > 2*1015 {
		t.Fatalf("the listing read %d entries of unbilled_charges_cycle for 1 015 charges of 0.00; want under %d (each read by one page)", read, 2*1015)
	}
}
