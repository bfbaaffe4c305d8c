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

// The age of a consumer's oldest unacknowledged message is how stale what
// it feeds is: the ledger's renters (ledger-renters on PARTY) see a renter
// closed in metering as open until its party.updated is applied, and a
// pending count says nothing of how long that has been. The oldest is the
// first message after the ack floor on the consumer's own subjects: a
// message of another subject of the stream sitting there (older) is not
// its backlog. Caught up, 0.
func TestLagCollectorReportsTheOldestUnackedAge(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	js := testkit.NewJetStream(t).JS
	if err := natsx.EnsureStreams(ctx, js, natsx.StreamParty); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, natsx.StreamParty, jetstream.ConsumerConfig{Durable: "ledger-renters",
		FilterSubject: "party.updated.*", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	ack := func(n int) {
		t.Helper()
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got != n {
			t.Fatalf("fetched %d; want %d", got, n)
		}
	}
	for _, subj := range []string{"party.updated.r-1", "party.other.x"} {
		if _, err := js.Publish(ctx, subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	ack(1)
	noiseAt := time.Now()
	testkit.Eventually(t, 5*time.Second, func() bool { return time.Since(noiseAt) > 1500*time.Millisecond }, "1.5 s never passed")
	ackPub, err := js.Publish(ctx, "party.updated.r-2", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := js.Stream(ctx, natsx.StreamParty)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := pending.GetMsg(ctx, ackPub.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	lagOf := func() natsx.Lag {
		t.Helper()
		lags, err := natsx.ConsumerLags(ctx, js, natsx.StreamParty)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lags {
			if l.Consumer == "ledger-renters" {
				return l
			}
		}
		t.Fatal("ledger-renters not listed")
		return natsx.Lag{}
	}
	if l := lagOf(); l.OldestUnacked == nil || !l.OldestUnacked.Equal(msg.Time) {
		t.Fatalf("oldest unacknowledged of ledger-renters: %v; want party.updated.r-2's arrival %v (not party.other.x's)", l.OldestUnacked, msg.Time)
	}
	gauge := func() (float64, bool) {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(&natsx.LagCollector{JS: js})
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				if f.GetName() == "gpubill_consumer_oldest_unacked_age_seconds" && m.GetLabel()[0].GetValue() == "ledger-renters" {
					return m.GetGauge().GetValue(), true
				}
			}
		}
		return 0, false
	}
	before := time.Since(msg.Time).Seconds()
	age, ok := gauge()
	after := time.Since(msg.Time).Seconds()
	if !ok || age < before || age > after {
		t.Fatalf("gpubill_consumer_oldest_unacked_age_seconds{consumer=ledger-renters} = %v (reported %t); want between %v and %v", age, ok, before, after)
	}
	ack(1)
	if l := lagOf(); l.OldestUnacked != nil {
		t.Fatalf("caught up, oldest unacknowledged %v; want none", l.OldestUnacked)
	}
	if age, ok := gauge(); !ok || age != 0 {
		t.Fatalf("caught up, gpubill_consumer_oldest_unacked_age_seconds = %v (reported %t); want 0", age, ok)
	}
}
