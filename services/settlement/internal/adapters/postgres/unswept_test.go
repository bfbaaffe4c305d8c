package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// UnsweptCommission pages the deferred sweeps oldest first on the keyset
// (settled_at, cycle, provider, currency): statements settled at the same
// instant are neither skipped nor read twice across pages, and swept ones,
// ones without commission and unsettled ones are never listed.
func TestUnsweptCommissionPagesOnTheKeyset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	at := time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC)
	for _, c := range []string{"cyc-20261101", "cyc-20261102"} {
		if _, err := s.Pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
			values ($1, 'settled', now(), now(), now())`, c); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	insert := func(cycle, provider, currency, status, commission, sweep string, settled time.Time, listed bool) {
		t.Helper()
		if _, err := s.Pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, status,
				commission, sweep_transaction_id, settled_at) values ($1, $2, $3, 100, $4, $5::numeric, $6, $7)`,
			cycle, provider, currency, status, commission, sweep, settled); err != nil {
			t.Fatal(err)
		}
		if listed {
			want = append(want, cycle+" "+provider+" "+currency)
		}
	}
	// In the order the sweep must read them: three at one instant, told
	// apart by cycle, provider and currency.
	insert("cyc-20261101", "p-2", "CNY", "settled", "1.00", "", at, true)
	insert("cyc-20261101", "p-2", "USD", "settled", "1.00", "", at, true)
	insert("cyc-20261102", "p-1", "CNY", "settled", "1.00", "", at, true)
	insert("cyc-20261101", "p-1", "CNY", "settled", "1.00", "", at.Add(time.Microsecond), true)
	insert("cyc-20261101", "p-3", "CNY", "settled", "1.00", "tx-swept", at, false)
	insert("cyc-20261101", "p-4", "CNY", "settled", "0", "", at, false)
	insert("cyc-20261101", "p-5", "CNY", "held", "1.00", "", at, false)
	for i := range 3 {
		insert("cyc-20261102", fmt.Sprintf("p-9%d", i), "EUR", "settled", "2.00", "", at.Add(time.Hour), true)
	}
	for _, limit := range []int{1, 2, 3, 100} {
		var got []string
		var after *domain.Unswept
		for range 20 {
			page, err := s.UnsweptCommission(ctx, after, nil, limit)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range page {
				got = append(got, u.CycleID+" "+u.ProviderID+" "+u.Currency)
			}
			if len(page) < limit {
				break
			}
			after = &page[len(page)-1]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pages of %d: %v\nwant %v", limit, got, want)
		}
	}
	// A bound through a statement (a run's round back to where it started)
	// lists up to and with it, alone or with after, in pages too.
	all, err := s.UnsweptCommission(ctx, nil, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	name := func(us []domain.Unswept) (out []string) {
		for _, u := range us {
			out = append(out, u.CycleID+" "+u.ProviderID+" "+u.Currency)
		}
		return out
	}
	for k := range all {
		for i := -1; i < k; i++ {
			var after *domain.Unswept
			if i >= 0 {
				after = &all[i]
			}
			var got []domain.Unswept
			for range 20 {
				page, err := s.UnsweptCommission(ctx, after, &all[k], 2)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, page...)
				if len(page) < 2 {
					break
				}
				after = &page[len(page)-1]
			}
			if w := name(all[i+1 : k+1]); fmt.Sprint(name(got)) != fmt.Sprint(w) {
				t.Errorf("after %d through %d: %v\nwant %v", i, k, name(got), w)
			}
		}
	}
}
