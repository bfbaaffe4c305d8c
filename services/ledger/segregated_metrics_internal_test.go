package ledger

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// failingReportStore fails every segregated-funds report (the database
// unreachable, a client line that does not add up).
type failingReportStore struct{ app.ReportStore }

func (failingReportStore) HeadAsOf(context.Context, *time.Time) (string, int64, error) {
	return "", 0, errors.New("database unreachable")
}

// A ledger whose segregated-funds report fails from its start showed no
// series of the currency: the report's staleness, the client money short
// and the breaches alerts read nothing, and only the log said so. The
// report's timestamp exists (at 0, so GpubillSegregatedFundsReportStale
// fires) and each failure is counted.
func TestSegregatedFundsReportFailingFromTheStartIsOnMetrics(t *testing.T) {
	before := gatherByCurrency(t)
	s := &Service{deps: svc.Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		reports: &app.Reports{Store: failingReportStore{}, Now: time.Now}}
	s.reportSegregatedFunds(context.Background())
	after := gatherByCurrency(t)
	for _, c := range money.Codes() {
		if _, ok := after["gpubill_segregated_funds_report_timestamp_seconds"][c]; !ok {
			t.Errorf("no gpubill_segregated_funds_report_timestamp_seconds{currency=%q} after its report failed", c)
		}
		name := "gpubill_segregated_funds_report_failures_total"
		if got := after[name][c] - before[name][c]; got != 1 {
			t.Errorf("%s{currency=%q} rose by %v; want 1", name, c, got)
		}
	}
}

// gatherByCurrency is the ledger's series by family and currency.
func gatherByCurrency(t *testing.T) map[string]map[string]float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "currency" {
					continue
				}
				if out[mf.GetName()] == nil {
					out[mf.GetName()] = map[string]float64{}
				}
				out[mf.GetName()][l.GetValue()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return out
}
