package obs_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// A query slower than its deadline fails alone: the ones after it still
// report. One deadline covered every query of a source in turn, and once a
// slow group-by spent it the page-level gauges after it (settlement's
// closing_stalled and open_past_close behind its per-cycle figures)
// vanished from the scrape, and their alerts could not fire.
func TestSQLCollectorSlowQueryLeavesTheNextReported(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	c := obs.NewSQLCollector("slow-test", pool, []obs.SQLMetric{
		{Name: "gpubill_test_slow", Help: "A query past the per-query deadline.", Type: obs.Gauge, Query: `select pg_sleep(2.1), 1`},
		{Name: "gpubill_test_cheap", Help: "A cheap gauge after it.", Type: obs.Gauge, Query: `select 7::float8`},
	}, nil)
	if n := testutil.CollectAndCount(c, "gpubill_test_cheap"); n != 1 {
		t.Fatalf("the cheap gauge after a query that ran out of its time: %d series; want 1", n)
	}
}
