package ports

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// railNotifications counts the payment rails' notifications by outcome
// (app.Notify*: accepted, duplicate, refunded, replay, forged, stale,
// malformed, rejected, failed), on the default registry.
var railNotifications = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_rail_notifications_total",
	Help: "Payment rails' notifications (top-ups, payout results) by rail, kind and outcome; forged, stale, replay and malformed ones are refused.",
}, []string{"rail", "kind", "outcome"})

// The series GpubillTopUpNotApplied reads exist at 0 from the start (a
// counter's first increase from nothing is no increase to Prometheus): a
// renter's verified payment the ledger refused, or that could not be
// applied, was counted only, and once the rail stopped retrying the renter
// had paid and was never credited; a refund made at the rail, the first
// one would not page. Forged and stale too (GpubillTopUpNotificationsRefused):
// after WeChat Pay switched its platform certificate, or with the host's
// clock off, every genuine payment was refused so, and nothing read them.
func init() {
	for _, rail := range []string{"alipay", "wechatpay"} {
		for _, outcome := range []string{app.NotifyRejected, app.NotifyFailed, app.NotifyRefunded, app.NotifyForged, app.NotifyStale} {
			railNotifications.WithLabelValues(rail, app.NotifyKindTopUp, outcome)
		}
	}
}

// CountNotification counts one notification.
func CountNotification(rail, kind, outcome string) {
	railNotifications.WithLabelValues(rail, kind, outcome).Inc()
}

// NotificationCounter is the counter of one rail, kind and outcome (tests
// read it with prometheus/testutil).
func NotificationCounter(rail, kind, outcome string) prometheus.Counter {
	return railNotifications.WithLabelValues(rail, kind, outcome)
}
