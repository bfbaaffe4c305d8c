package ledger_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpubill/gpubill/services/ledger/internal/ports"
)

func counterByLabel(t *testing.T, name, label string) float64 {
	t.Helper()
	v, _ := byLabel(t, name, label, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
	return v
}

// byLabel is the value read of the series of family name whose first label
// is label, and whether there is one.
func byLabel(t *testing.T, name, label string, read func(*dto.Metric) float64) (float64, bool) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				return read(m), true
			}
		}
	}
	return 0, false
}

// TestChargesCounted: each charge posted counts once, with its amount in
// cents, however often it is delivered. Not parallel: the counters are the
// process's, and parallel tests wait until this one is done.
func TestChargesCounted(t *testing.T) {
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "10", "USD", "top")
	const cyc = "cyc-20261112"
	n0 := counterByLabel(t, "gpubill_charges_posted_total", "USD")
	a0 := counterByLabel(t, "gpubill_charged_amount_minor_total", "USD")
	m := batchMsg(t, "batch-m1",
		charge("ch-m1", "r-1", "p-1", cyc, "4.00"),
		charge("ch-m2", "r-1", "p-2", cyc, "0"), // nothing to post
		charge("ch-m3", "r-1", "p-1", cyc, "2.57"))
	for _, msgs := range [][]ports.ChargesMessage{{m, m}, {m}, {batchMsg(t, "batch-m2", charge("ch-m1", "r-1", "p-1", cyc, "4.00"))}} {
		if _, err := ports.PostCharges(f.ctx, f.app, msgs); err != nil {
			t.Fatal(err)
		}
	}
	if got := counterByLabel(t, "gpubill_charges_posted_total", "USD") - n0; got != 2 {
		t.Errorf("charges posted grew by %v, want 2", got)
	}
	if got := counterByLabel(t, "gpubill_charged_amount_minor_total", "USD") - a0; got != 400+257 {
		t.Errorf("charged cents grew by %v, want %d", got, 400+257)
	}
}

func gaugeByLabel(t *testing.T, name, label string) float64 {
	t.Helper()
	v, ok := byLabel(t, name, label, func(m *dto.Metric) float64 { return m.GetGauge().GetValue() })
	if !ok {
		return -1
	}
	return v
}

// A recorded breach is counted on /metrics by the report of now, so the
// alert sees it the next time the ledger computes one: it was on the report
// only, seen when someone asked for it. Not parallel: the gauge is the
// process's.
func TestBreachesOnMetrics(t *testing.T) {
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "1000", "JPY", "top")
	if _, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "JPY"); err != nil {
		t.Fatal(err)
	}
	if n := gaugeByLabel(t, "gpubill_segregation_breaches", "JPY"); n != 0 {
		t.Fatalf("no breach yet: gpubill_segregation_breaches{currency=JPY} %v, want 0", n)
	}
	if _, err := f.app.CreateTransaction(f.ctx, transfer("fee", "renter:r-1:wallet", "platform:revenue:commission", "5", "JPY")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "JPY"); err != nil {
		t.Fatal(err)
	}
	if n := gaugeByLabel(t, "gpubill_segregation_breaches", "JPY"); n != 1 {
		t.Fatalf("a fee taken from a wallet: gpubill_segregation_breaches{currency=JPY} %v, want 1", n)
	}
}
