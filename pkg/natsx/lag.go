package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/pkg/obs"
)

// Lag is one durable consumer's backlog: what was published to its stream
// and not yet processed. Pending above 0 with a flat AckFloor is a stalled
// consumer (an accepted event that is not being applied).
type Lag struct {
	Stream      string `json:"stream"`
	Consumer    string `json:"consumer"`
	Pending     uint64 `json:"pending"`       // not yet delivered
	AckPending  int    `json:"ack_pending"`   // delivered, not yet acked
	Redelivered int    `json:"redelivered"`   // delivered more than once, not yet acked
	Delivered   uint64 `json:"delivered_seq"` // last stream sequence delivered
	AckFloor    uint64 `json:"ack_floor_seq"` // stream sequence up to which every message is acknowledged
	// OldestUnacked is when the oldest message of the consumer's subjects
	// not yet acknowledged arrived in the stream (nil: none): how far
	// behind what the consumer has applied is, in time. A backlog's count
	// says how much; this says how stale a read model fed by it is (the
	// ledger's renters: a renter closed in metering is open to the ledger
	// until its party.updated is applied).
	OldestUnacked *time.Time `json:"oldest_unacked_at,omitempty"`

	filters []string // the consumer's filter subjects (none: the whole stream)
}

// ConsumerLags lists every durable consumer of the named streams.
func ConsumerLags(ctx context.Context, js jetstream.JetStream, streams ...string) ([]Lag, error) {
	if len(streams) == 0 {
		for n := range streamSpecs {
			streams = append(streams, n)
		}
	}
	sort.Strings(streams)
	var out []Lag
	for _, name := range streams {
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // not created yet
		}
		if err != nil {
			// JetStream down or slow: skipped, every series vanished from
			// the scrape and the ops answer, uncounted, and no lag alert
			// could fire.
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		lister := st.ListConsumers(ctx)
		start := len(out)
		for ci := range lister.Info() {
			out = append(out, Lag{Stream: name, Consumer: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending,
				Redelivered: ci.NumRedelivered, Delivered: ci.Delivered.Stream, AckFloor: ci.AckFloor.Stream})
			out[len(out)-1].filters = ci.Config.FilterSubjects
			if ci.Config.FilterSubject != "" {
				out[len(out)-1].filters = []string{ci.Config.FilterSubject}
			}
		}
		if err := lister.Err(); err != nil {
			return nil, fmt.Errorf("consumers of %s: %w", name, err)
		}
		for i := start; i < len(out); i++ {
			if err := oldestUnacked(ctx, st, &out[i]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// oldestUnacked sets l.OldestUnacked: the arrival of the first message
// after the ack floor on any of the consumer's filter subjects (the whole
// stream with none), when anything is pending or unacknowledged. Every
// message up to the ack floor is acknowledged, so that one is the oldest
// not yet applied; one acknowledged out of order past the floor only makes
// the age an upper bound, as JetStream's floor is. Not found: the backlog
// was acknowledged (or aged out) since the consumer was read.
func oldestUnacked(ctx context.Context, st jetstream.Stream, l *Lag) error {
	if l.Pending == 0 && l.AckPending == 0 {
		return nil
	}
	filters := l.filters
	if len(filters) == 0 {
		filters = []string{">"}
	}
	for _, f := range filters {
		m, err := st.GetMsg(ctx, l.AckFloor+1, jetstream.WithGetMsgSubject(f))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("oldest unacknowledged message of consumer %s on %s: %w", l.Consumer, l.Stream, err)
		}
		if at := m.Time; l.OldestUnacked == nil || at.Before(*l.OldestUnacked) {
			l.OldestUnacked = &at
		}
	}
	return nil
}

// lagScrapeTimeout bounds one scrape's reading of the consumers.
const lagScrapeTimeout = 2 * time.Second

var (
	lagPendingDesc = prometheus.NewDesc("gpubill_consumer_pending_messages",
		"Messages in a durable consumer's stream not yet delivered to it (its backlog).", []string{"stream", "consumer"}, nil)
	lagAckPendingDesc = prometheus.NewDesc("gpubill_consumer_ack_pending_messages",
		"Messages delivered to a durable consumer and not yet acknowledged.", []string{"stream", "consumer"}, nil)
	lagRedeliveredDesc = prometheus.NewDesc("gpubill_consumer_redelivered_messages",
		"Messages delivered more than once and not yet acknowledged.", []string{"stream", "consumer"}, nil)
	lagAckFloorDesc = prometheus.NewDesc("gpubill_consumer_ack_floor_sequence",
		"Stream sequence up to which a durable consumer has acknowledged every message: its progress (flat with messages pending: no one is working them off).",
		[]string{"stream", "consumer"}, nil)
	lagOldestDesc = prometheus.NewDesc("gpubill_consumer_oldest_unacked_age_seconds",
		"Time since the oldest message of a durable consumer's subjects not yet acknowledged arrived in its stream (0: none): how stale what the consumer feeds is "+
			"(ledger-renters on PARTY: how long a renter closed in metering has still been open to the ledger's deposit, entry and write-off checks).",
		[]string{"stream", "consumer"}, nil)
	lagErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "gpubill_consumer_lag_errors_total",
		Help: "Scrapes where the consumers' lag could not be read from JetStream.",
	})
)

// LagSource is the consumers' lag in gpubill_metrics_source_errors_total.
const LagSource = "consumer-lag"

// LagCollector reports ConsumerLags on every scrape.
type LagCollector struct {
	JS  jetstream.JetStream
	Log *slog.Logger
}

// Describe sends the five gauges' descriptions.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagPendingDesc
	ch <- lagAckPendingDesc
	ch <- lagRedeliveredDesc
	ch <- lagAckFloorDesc
	ch <- lagOldestDesc
}

// Collect reads every durable consumer of gpubill's streams.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), lagScrapeTimeout)
	defer cancel()
	lags, err := ConsumerLags(ctx, c.JS)
	if err != nil {
		lagErrors.Inc()
		obs.SourceFailed(LagSource)
		if c.Log != nil {
			c.Log.Warn("consumer lag metrics", "err", err)
		}
		return
	}
	for _, l := range lags {
		ch <- prometheus.MustNewConstMetric(lagPendingDesc, prometheus.GaugeValue, float64(l.Pending), l.Stream, l.Consumer)
		ch <- prometheus.MustNewConstMetric(lagAckPendingDesc, prometheus.GaugeValue, float64(l.AckPending), l.Stream, l.Consumer)
		ch <- prometheus.MustNewConstMetric(lagRedeliveredDesc, prometheus.GaugeValue, float64(l.Redelivered), l.Stream, l.Consumer)
		ch <- prometheus.MustNewConstMetric(lagAckFloorDesc, prometheus.GaugeValue, float64(l.AckFloor), l.Stream, l.Consumer)
		age := 0.0
		if l.OldestUnacked != nil {
			age = max(time.Since(*l.OldestUnacked).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(lagOldestDesc, prometheus.GaugeValue, age, l.Stream, l.Consumer)
	}
}
