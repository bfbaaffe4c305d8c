package svc

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/obs"
)

// MetricsSource is implemented by a service with business metrics read from
// its own tables on scrape (payouts by status, settlement progress).
type MetricsSource interface {
	Metrics() []obs.SQLMetric
}

// ServeMetrics installs the live-state metrics of the hosted services on
// /metrics: each one's outbox and dead letters, its business metrics, and
// the JetStream consumers' lag. The returned function removes them.
func ServeMetrics(pool *pgxpool.Pool, js jetstream.JetStream, log *slog.Logger, services ...Service) func() {
	obs.SourceKnown(natsx.LagSource)
	removes := []func(){obs.SetSource(natsx.LagSource, &natsx.LagCollector{JS: js, Log: log})}
	for _, s := range services {
		ms := obs.PipelineMetrics(s.Name())
		if src, ok := s.(MetricsSource); ok {
			ms = append(ms, src.Metrics()...)
		}
		removes = append(removes, obs.SetSource("service/"+s.Name(), obs.NewSQLCollector(s.Name(), pool, ms, log)))
	}
	return func() {
		for _, r := range removes {
			r()
		}
	}
}
