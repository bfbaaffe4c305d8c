package natsx_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
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

// The ack floor (every message up to it acknowledged) is a consumer's
// progress: a backlog that arrived at once and stays flat on a consumer
// that is down (payout-settled at a cycle close) never grows, and only a
// floor that does not move shows no one is working it off
// (GpubillConsumerStalled). It was not exported.
func TestLagCollectorReportsTheAckFloor(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	js := testkit.NewJetStream(t).JS
	if err := natsx.EnsureStreams(ctx, js, natsx.StreamSettlement); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, natsx.StreamSettlement, jetstream.ConsumerConfig{Durable: "payout-settled", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	// Three delivered, the first two acknowledged: the floor is not the
	// delivered sequence (a handler failing everything keeps delivering).
	const published, delivered, acked = 5, 3, 2
	for range published {
		if _, err := js.Publish(ctx, "settlement.provider.settled", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := cons.Fetch(delivered, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		if n++; n > acked {
			continue
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n != delivered {
		t.Fatalf("fetched %d messages; want %d", n, delivered)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&natsx.LagCollector{JS: js})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) == 2 && m.GetLabel()[0].GetValue() == "payout-settled" && m.GetLabel()[1].GetValue() == natsx.StreamSettlement {
				got[f.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	// Sequences from 1: the floor is the last of the acknowledged.
	want := map[string]float64{"gpubill_consumer_ack_floor_sequence": acked, "gpubill_consumer_pending_messages": published - delivered}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s{stream=%q,consumer=%q} = %v (reported %t); want %v", name, natsx.StreamSettlement, "payout-settled", g, ok, v)
		}
	}
}
