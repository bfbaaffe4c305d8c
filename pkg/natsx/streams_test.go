package natsx_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// oldUsage is USAGE as gpubill created it before work-queue retention.
func oldUsage(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: natsx.StreamUsage, Subjects: []string{"usage.>"},
		Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardNew, MaxBytes: 1 << 30, MaxAge: 14 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
}

// consume acknowledges n messages of subject filter with durable name.
func consume(t *testing.T, js jetstream.JetStream, durable, filter string, n int) {
	t.Helper()
	c, err := js.CreateOrUpdateConsumer(context.Background(), natsx.StreamUsage, jetstream.ConsumerConfig{Durable: durable,
		FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.DoubleAck(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func streamConfig(t *testing.T, js jetstream.JetStream) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(context.Background(), natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}

// TestEnsureStreamsChangesRetentionWhenDrained: a stream an older gpubill made
// with limits retention becomes a work queue at start-up once its owning
// consumers have acknowledged everything, and takes the configured byte cap.
func TestEnsureStreamsChangesRetentionWhenDrained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := testkit.NewJetStream(t).JS
	oldUsage(t, js)
	for _, s := range []string{"usage.ingest.p-1", "usage.recorded.p-1"} {
		if _, err := js.Publish(ctx, s, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	consume(t, js, "metering-ingest", "usage.ingest.>", 1)
	consume(t, js, "pricing-rating", "usage.recorded.>", 1)
	lim := natsx.Limits{MaxBytes: 4 << 20}
	if err := lim.EnsureStreams(ctx, js, nil, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(t, js)
	if cfg.Retention != jetstream.WorkQueuePolicy || cfg.MaxBytes != 4<<20 || cfg.MaxAge != 0 {
		t.Fatalf("after start-up: retention %s, max bytes %d, max age %s; want workqueue, %d, none", cfg.Retention, cfg.MaxBytes, cfg.MaxAge, 4<<20)
	}
	// A second start changes nothing and the stream takes new publishes.
	if err := lim.EnsureStreams(ctx, js, nil, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "usage.recorded.p-1", []byte("y")); err != nil {
		t.Fatal(err)
	}
}

// TestEnsureStreamsKeepsRetentionOverABacklog: a stream still holding
// messages a consumer has not acknowledged keeps them and its old retention
// (a recreate would lose them); the byte cap is still applied.
func TestEnsureStreamsKeepsRetentionOverABacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := testkit.NewJetStream(t).JS
	oldUsage(t, js)
	for _, s := range []string{"usage.ingest.p-1", "usage.recorded.p-1", "usage.recorded.p-2"} {
		if _, err := js.Publish(ctx, s, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	consume(t, js, "metering-ingest", "usage.ingest.>", 1)
	consume(t, js, "pricing-rating", "usage.recorded.>", 1) // one of two
	if err := (natsx.Limits{MaxBytes: 4 << 20}).EnsureStreams(ctx, js, nil, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(t, js)
	if cfg.Retention != jetstream.LimitsPolicy || cfg.MaxBytes != 4<<20 {
		t.Fatalf("retention %s, max bytes %d; want limits kept and the new cap", cfg.Retention, cfg.MaxBytes)
	}
	st, err := js.Stream(ctx, natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 3 {
		t.Fatalf("stream holds %v messages (%v); want all 3 kept", info.State.Msgs, err)
	}
}

// TestPartyStreamsTakeNoByteCap: PARTY and GPU_MODEL keep every party's (and
// model's) last versions, never aged; under the byte cap of the work queues
// they filled for good, every later party's first version was refused, and
// the outbox holding it stopped every event queued behind it (usage was
// never billed). Their size is bounded by the parties and versions kept, not
// by GPUBILL_STREAM_MAX_BYTES.
func TestPartyStreamsTakeNoByteCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := testkit.NewJetStream(t).JS
	const capBytes = 16 << 10
	lim := natsx.Limits{MaxBytes: capBytes}
	if err := lim.EnsureStreams(ctx, js, nil, natsx.StreamParty, natsx.StreamGPUModel, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 512)
	for i := range 200 { // 100 KiB, 6 caps
		if _, err := js.Publish(ctx, fmt.Sprintf("party.updated.provider.p-%03d", i), body); err != nil {
			t.Fatalf("party version %d refused: %v", i, err)
		}
		if _, err := js.Publish(ctx, fmt.Sprintf("gpu_model.updated.m-%03d", i), body); err != nil {
			t.Fatalf("GPU model version %d refused: %v", i, err)
		}
	}
	st, err := js.Stream(ctx, natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != capBytes {
		t.Fatalf("USAGE max bytes %d, want the cap %d", got, capBytes)
	}
}

// USAGE takes only what its consumers take: usage published to
// usage.ingest without a provider, or to a misspelt subject, is refused at
// the publisher. Bound to usage.>, it was acknowledged, never delivered
// and never dead-lettered, and kept until the cap refused every
// usage.recorded.
func TestUsageStreamRefusesSubjectsNoConsumerTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := testkit.NewJetStream(t).JS
	if err := (natsx.Limits{MaxBytes: 4 << 20}).EnsureStreams(ctx, js, nil, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"usage.ingest", "usage.ingest_v2.p-1", "usage.recorded"} {
		if _, err := js.Publish(ctx, s, []byte("x")); err == nil {
			t.Errorf("%s: stored, want refused (no consumer takes it)", s)
		}
	}
	for _, s := range []string{"usage.ingest.p-1", "usage.recorded.p-1"} {
		if _, err := js.Publish(ctx, s, []byte("x")); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}
