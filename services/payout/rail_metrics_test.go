package payout

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubill/gpubill/services/payout/internal/adapters/alipay"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/bankfile"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/sandbox"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/wechatpay"
	"github.com/gpubill/gpubill/services/payout/internal/ports"
)

// Every rail the router holds has its mismatch series at 0 once the rails
// are wired: finance resolving a bank transfer in review as paid at another
// amount makes the bank-file rail's first mismatch, and a series first seen
// at 1 is no increase to Prometheus (GpubillPayoutRailAmountMismatch never
// fired for it).
func TestRailAmountMismatchSeriesFromZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"no real rail", Config{}, []string{(&sandbox.Sandbox{}).Name(), bankfile.Name}},
		{"every rail on", Config{BankRail: BankRailFile, AlipayOn: true, WeChatPayOn: true},
			[]string{(&sandbox.Sandbox{}).Name(), bankfile.Name, alipay.Name, wechatpay.Name}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{sandbox: &sandbox.Sandbox{}, flow: &ports.Workflows{}}
			s.wireRails(tc.cfg)
			got := mismatchSeries(t)
			for _, rail := range tc.want {
				if v, ok := got[rail]; !ok || v != 0 {
					t.Errorf("gpubill_payout_rail_amount_mismatches_total{rail=%q}: %v (present %v); want a series at 0 before any mismatch", rail, v, ok)
				}
			}
		})
	}
}

// mismatchSeries is gpubill_payout_rail_amount_mismatches_total by rail.
func mismatchSeries(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "gpubill_payout_rail_amount_mismatches_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "rail" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}
