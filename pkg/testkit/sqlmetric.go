package testkit

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/obs"
)

// SQLMetric is the value the query of the unlabelled SQL metric name (one
// of ms, a service's Metrics) reads from pool now; t fails when ms has no
// such metric.
func SQLMetric(t testing.TB, pool *pgxpool.Pool, ms []obs.SQLMetric, name string) float64 {
	t.Helper()
	for _, m := range ms {
		if m.Name == name {
			var v float64
			if err := pool.QueryRow(context.Background(), m.Query).Scan(&v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
