package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var cardsSetAside = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "gpubill_pricing_rate_cards_unreadable",
	Help: "Stored rate cards set aside at the last load of the book because they cannot be read and not replaced (a card of the same currency and effective_from); usage they would price waits as pending.",
})
