package natsx_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpubill/gpubill/pkg/natsx"
)

// streamless answers every stream lookup with err.
type streamless struct {
	jetstream.JetStream
	err error
}

func (s streamless) Stream(context.Context, string) (jetstream.Stream, error) { return nil, s.err }

// lagSourceErrors is gpubill_metrics_source_errors_total{source="consumer-lag"}.
func lagSourceErrors(t *testing.T) float64 {
	t.Helper()
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "gpubill_metrics_source_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == natsx.LagSource {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A stream that does not exist yet has no consumers to report; a stream
// JetStream cannot be asked about (down, slower than the scrape) fails the
// read, which the scrape counts. It was skipped like a missing stream: every
// lag series vanished, nothing counted, the ops answer an empty 200, and no
// lag alert could fire.
func TestConsumerLagsFailWhenAStreamCannotBeRead(t *testing.T) {
	ctx := context.Background()
	if lags, err := natsx.ConsumerLags(ctx, streamless{err: jetstream.ErrStreamNotFound}); err != nil || len(lags) != 0 {
		t.Fatalf("streams not created yet: %v, %v; want no lags and no error", lags, err)
	}
	if _, err := natsx.ConsumerLags(ctx, streamless{err: nats.ErrTimeout}); err == nil {
		t.Fatal("a stream JetStream did not answer for: no error")
	}
	before := lagSourceErrors(t)
	if n := testutil.CollectAndCount(&natsx.LagCollector{JS: streamless{err: nats.ErrTimeout}}); n != 0 {
		t.Fatalf("a failed read reported %d series", n)
	}
	if got := lagSourceErrors(t); got != before+1 {
		t.Fatalf("gpubill_metrics_source_errors_total{source=%q} went %v → %v; want one more", natsx.LagSource, before, got)
	}
}
