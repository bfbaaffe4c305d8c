package ports

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// railNotifications counts the payment rails' notifications by outcome
// (app.Notify*: accepted, duplicate, replay, forged, stale, malformed,
// rejected, failed), on the default registry.
var railNotifications = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_rail_notifications_total",
	Help: "Payment rails' notifications (top-ups, payout results) by rail, kind and outcome; forged, stale, replay and malformed ones are refused.",
}, []string{"rail", "kind", "outcome"})

// CountNotification counts one notification.
func CountNotification(rail, kind, outcome string) {
	railNotifications.WithLabelValues(rail, kind, outcome).Inc()
}

// NotificationCounter is the counter of one rail, kind and outcome (tests
// read it with prometheus/testutil).
func NotificationCounter(rail, kind, outcome string) prometheus.Counter {
	return railNotifications.WithLabelValues(rail, kind, outcome)
}
