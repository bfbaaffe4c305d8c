package obs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Limits of a scrape's database reads. Each query has its own deadline, so
// a slow one fails alone; the source's whole read is bounded too, within
// Prometheus's default scrape_timeout (10 s; the chart's scrape annotations
// set none), beside the consumers' lag read (natsx, 2 s) that runs with it.
// Queries past the whole bound fail: list a source's page-level gauges
// first.
const (
	scrapeQueryTimeout = 2 * time.Second
	scrapeTimeout      = 7 * time.Second
	outboxCountMax     = 100_000 // gpubill_outbox_messages saturates here (counting more costs more than it tells)
)

var sourceErrors = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_metrics_source_errors_total",
	Help: "Scrapes where a live-state source (database query, consumer lag) failed; its metrics are missing from that scrape.",
}, []string{"source"})

// SourceKnown starts source's error counter at 0 (an alert on its increase
// sees the first failure).
func SourceKnown(source string) { sourceErrors.WithLabelValues(source) }

// SourceFailed counts a scrape whose live-state source (a database query,
// JetStream's consumers) failed, in gpubill_metrics_source_errors_total.
func SourceFailed(source string) { sourceErrors.WithLabelValues(source).Inc() }

// SQLMetric is one metric family read on scrape: Query returns one row per
// series, the label values (text, in Labels' order) then the value.
// Queries must be bounded (an index, a LIMIT, a small GROUP BY).
type SQLMetric struct {
	Name   string
	Help   string
	Type   prometheus.ValueType // Gauge or Counter
	Labels []string
	Query  string
}

// The value types of an SQLMetric.
const (
	Gauge   = prometheus.GaugeValue
	Counter = prometheus.CounterValue
)

// SQLCollector reads SQLMetrics from a database on every scrape.
type SQLCollector struct {
	Source  string // its name in gpubill_metrics_source_errors_total
	Pool    *pgxpool.Pool
	Metrics []SQLMetric
	Log     *slog.Logger
}

// NewSQLCollector returns a collector of metrics from pool, its error
// counter at 0 (so an alert on its increase has a series to start from).
func NewSQLCollector(source string, pool *pgxpool.Pool, metrics []SQLMetric, log *slog.Logger) *SQLCollector {
	sourceErrors.WithLabelValues(source)
	return &SQLCollector{Source: source, Pool: pool, Metrics: metrics, Log: log}
}

// Describe sends nothing: SQLCollector is unchecked (see SetSource).
func (c *SQLCollector) Describe(chan<- *prometheus.Desc) {}

// Collect runs every query in order, each with its own deadline within the
// scrape's; a failed query is logged and counted, and the others still
// report.
func (c *SQLCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	for _, m := range c.Metrics {
		qctx, qcancel := context.WithTimeout(ctx, scrapeQueryTimeout)
		err := c.collect(qctx, m, ch)
		qcancel()
		if err != nil {
			sourceErrors.WithLabelValues(c.Source).Inc()
			if c.Log != nil {
				c.Log.Warn("metrics query", "source", c.Source, "metric", m.Name, "err", err)
			}
		}
	}
}

func (c *SQLCollector) collect(ctx context.Context, m SQLMetric, ch chan<- prometheus.Metric) error {
	desc := prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
	rows, err := c.Pool.Query(ctx, m.Query)
	if err != nil {
		return err
	}
	var out []prometheus.Metric
	labels := make([]string, len(m.Labels))
	dest := make([]any, 0, len(m.Labels)+1)
	for i := range labels {
		dest = append(dest, &labels[i])
	}
	var v float64
	dest = append(dest, &v)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return err
		}
		pm, err := prometheus.NewConstMetric(desc, m.Type, v, labels...)
		if err != nil {
			rows.Close()
			return err
		}
		out = append(out, pm)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	for _, pm := range out {
		ch <- pm
	}
	return nil
}

// PipelineMetrics are every service schema's outbox and dead letters: a
// growing outbox or an old oldest row is a relay that cannot publish; an
// open dead letter is a message no one applied.
func PipelineMetrics(schema string) []SQLMetric {
	svc := pgx.Identifier{schema}.Sanitize()
	lit := "'" + schema + "'" // a service schema name (lowercase letters), never user input
	return []SQLMetric{
		{
			// First: GpubillOutboxStuck pages on it, and a scrape's reads
			// are bounded in all.
			Name: "gpubill_outbox_oldest_age_seconds", Type: prometheus.GaugeValue, Labels: []string{"service"},
			Help:  "Age of the oldest unpublished outbox event (0 when the outbox is empty).",
			Query: fmt.Sprintf(`select %s, coalesce((select extract(epoch from now() - created_at)::float8 from %s.outbox order by seq limit 1), 0)`, lit, svc),
		},
		{
			Name: "gpubill_outbox_messages", Type: prometheus.GaugeValue, Labels: []string{"service"},
			Help:  fmt.Sprintf("Committed events not yet published to JetStream (counted up to %d).", outboxCountMax),
			Query: fmt.Sprintf(`select %s, count(*)::float8 from (select 1 from %s.outbox limit %d) o`, lit, svc, outboxCountMax),
		},
		{
			Name: "gpubill_dead_letters_open", Type: prometheus.GaugeValue, Labels: []string{"service", "consumer"},
			Help:  "Dead letters not (successfully) replayed, by consumer.",
			Query: fmt.Sprintf(`select %s, consumer, count(*)::float8 from %s.dead_letters where replayed_at is null group by consumer`, lit, svc),
		},
	}
}
