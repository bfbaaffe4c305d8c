package ledger_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// histogramTotals is a histogram's sample sum and count in this process.
func histogramTotals(t *testing.T, name string) (sum float64, count uint64) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleSum(), h.GetSampleCount()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0, 0
}

// TestWriteGroupsMeasured: every API write is counted in exactly one group
// commit (an overdraft in the mix too: its group is retried one write at a
// time and still counted once), and each group's time is observed. Not
// parallel: the histograms are the process's, and a parallel test starts
// only once the sequential ones are done.
func TestWriteGroupsMeasured(t *testing.T) {
	f := newFixture(t, nil)
	sizes0, groups0 := histogramTotals(t, "gpubill_ledger_write_group_size")
	secs0, timed0 := histogramTotals(t, "gpubill_ledger_write_group_seconds")
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for i := range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := transfer(fmt.Sprintf("grp-%d", i), "bank:client", "renter:r-1:wallet", "1", "USD")
			if i == n { // overdraws a provider account: refused
				in = transfer("grp-overdraft", "provider:p-1:available", "renter:r-1:wallet", "1", "USD")
			}
			_, errs[i] = f.app.CreateTransaction(f.ctx, in)
		}()
	}
	wg.Wait()
	for i, err := range errs[:n] {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if !isInvalid(errs[n]) {
		t.Fatalf("overdraft: %v, want it refused", errs[n])
	}
	sizes1, groups1 := histogramTotals(t, "gpubill_ledger_write_group_size")
	secs1, timed1 := histogramTotals(t, "gpubill_ledger_write_group_seconds")
	groups := groups1 - groups0
	if got := sizes1 - sizes0; got != n+1 {
		t.Fatalf("group sizes add up to %v writes, want %d", got, n+1)
	}
	if groups < 1 || groups > n+1 {
		t.Fatalf("%d groups for %d writes", groups, n+1)
	}
	if timed1-timed0 != groups || secs1 <= secs0 {
		t.Fatalf("group time observed %d times (%v s) for %d groups", timed1-timed0, secs1-secs0, groups)
	}
	t.Logf("%d writes in %d groups, %.2f ms", n+1, groups, (secs1-secs0)*1000)
	wantBalance(t, f, "renter:r-1:wallet", "USD", fmt.Sprint(n))
}
