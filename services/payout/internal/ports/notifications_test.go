package ports

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The top-up series the alert reads are on /metrics before any
// notification: a counter's first increase from no series is no increase
// to Prometheus, and the first refused payment paged nobody.
func TestTopUpNotificationSeriesExistAtZero(t *testing.T) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "gpubill_rail_notifications_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["kind"] == "topup" {
				found[l["rail"]+" "+l["outcome"]] = true
			}
		}
	}
	for _, want := range []string{"alipay rejected", "alipay failed", "alipay refunded", "alipay forged", "alipay stale",
		"wechatpay rejected", "wechatpay failed", "wechatpay refunded", "wechatpay forged", "wechatpay stale"} {
		if !found[want] {
			t.Errorf("no series gpubill_rail_notifications_total{rail, kind=topup, outcome} for %s before any notification", want)
		}
	}
}
