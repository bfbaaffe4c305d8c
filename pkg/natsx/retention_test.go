package natsx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// ids is a set of message ids shared by goroutines, each with the stream
// sequence its publish was acknowledged with (0 when not recorded).
type ids struct {
	mu  sync.Mutex
	set map[string]bool
	seq map[string]uint64
}

func (s *ids) add(id string) { s.addAcked(id, 0) }

func (s *ids) addAcked(id string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		s.set, s.seq = map[string]bool{}, map[string]uint64{}
	}
	s.set[id] = true
	if seq > 0 {
		s.seq[id] = seq
	}
}

// sequences lists the acknowledged sequences of the given ids.
func (s *ids) sequences(of []string) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint64, 0, len(of))
	for _, id := range of {
		out = append(out, s.seq[id])
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// missing lists the ids of s that are not in other, sorted.
func (s *ids) missing(other *ids) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	other.mu.Lock()
	defer other.mu.Unlock()
	var out []string
	for id := range s.set {
		if !other.set[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (s *ids) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.set)
}

// publishUntil publishes to subject, every message with its own id, as an
// outbox relay does: a refused publish is tried again (same id) until it is
// acknowledged; acknowledged ids go to acked.
func publishUntil(ctx context.Context, js jetstream.JetStream, subject string, acked *ids) {
	for n := 0; ctx.Err() == nil; n++ {
		id := fmt.Sprintf("%s-%d", subject, n)
		for ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			pa, err := js.Publish(pctx, subject, []byte("x"), jetstream.WithMsgID(id), jetstream.WithRetryAttempts(0))
			cancel()
			if err == nil {
				acked.addAcked(id, pa.Sequence)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
	}
}

// publishBatchesUntil publishes to subject in batches of async publishes,
// as an outbox relay does (PublishMsgAsync over a batch of rows, then its
// acks): many publishes are in flight at once, queued in the stream's
// inbound queue when its subjects move. A batch's refused publishes are
// tried again (same ids) in the next; acknowledged ids go to acked.
func publishBatchesUntil(ctx context.Context, js jetstream.JetStream, subject string, acked *ids) {
	var todo []string
	for n := 0; ctx.Err() == nil; {
		for len(todo) < 200 {
			todo = append(todo, fmt.Sprintf("%s-b%d", subject, n))
			n++
		}
		futures := make([]jetstream.PubAckFuture, 0, len(todo))
		for _, id := range todo {
			f, err := js.PublishAsync(subject, []byte("x"), jetstream.WithMsgID(id), jetstream.WithRetryAttempts(0))
			if err != nil {
				break
			}
			futures = append(futures, f)
		}
		var again []string
		timeout := time.After(2 * time.Second)
		for i, f := range futures {
			select {
			case pa := <-f.Ok():
				acked.addAcked(todo[i], pa.Sequence)
			case err := <-f.Err():
				_ = err // refused (no stream on the subject): tried again in the next batch
				again = append(again, todo[i])
			case <-timeout:
				again = append(again, todo[i])
			}
		}
		todo = append(again, todo[len(futures):]...)
		if len(again) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// consumeUntil acknowledges what durable's filter takes from USAGE,
// recording each id in consumed, and creates the consumer again whenever
// it is gone (the stream recreated), as natsx.Consume does.
func consumeUntil(ctx context.Context, js jetstream.JetStream, durable, filter string, consumed *ids) {
	cfg := jetstream.ConsumerConfig{Durable: durable, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy}
	var c jetstream.Consumer
	for ctx.Err() == nil {
		if c == nil {
			var err error
			if c, err = js.CreateOrUpdateConsumer(ctx, natsx.StreamUsage, cfg); err != nil {
				c = nil
				time.Sleep(10 * time.Millisecond)
				continue
			}
		}
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			c = nil
			continue
		}
		got := 0
		for m := range batch.Messages() {
			consumed.add(m.Headers().Get(jetstream.MsgIDHeader))
			got++
			if err := m.Ack(); err != nil {
				continue // a lost ack is a redelivery: the id is recorded already
			}
		}
		if got > 0 {
			continue
		}
		if _, err := c.Info(ctx); errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			c = nil
		}
	}
}

func retention(ctx context.Context, js jetstream.JetStream) (jetstream.RetentionPolicy, []string, error) {
	st, err := js.Stream(ctx, natsx.StreamUsage)
	if err != nil {
		return 0, nil, err
	}
	return st.CachedInfo().Config.Retention, st.CachedInfo().Config.Subjects, nil
}

// migrateUntilDone calls EnsureStreams, as a service's start does (a
// failed start starts again), until USAGE is a work queue.
func migrateUntilDone(ctx context.Context, js jetstream.JetStream) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for {
		err := (natsx.Limits{MaxBytes: 64 << 20}).EnsureStreams(ctx, js, log, natsx.StreamUsage)
		if ret, _, rerr := retention(ctx, js); err == nil && rerr == nil && ret == jetstream.WorkQueuePolicy {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("USAGE still not a work queue: %w (last start: %v)", ctx.Err(), err)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	}
}

// migrateUnderLoad changes USAGE's retention with migrators processes
// starting at once while publishers and the owning consumers run, and
// returns the acknowledged publishes that were neither delivered nor are
// still in USAGE (deleted with the old stream).
func migrateUnderLoad(t *testing.T, js jetstream.JetStream, migrators int) (lost []string, published int, state string) {
	t.Helper()
	if err := js.DeleteStream(context.Background(), natsx.StreamUsage); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatal(err)
	}
	oldUsage(t, js)
	var acked, consumed ids
	var load sync.WaitGroup
	pubCtx, stopPublishing := context.WithCancel(context.Background())
	defer stopPublishing()
	conCtx, stopConsuming := context.WithCancel(context.Background())
	defer stopConsuming()
	for _, s := range []string{"usage.ingest.p-1", "usage.recorded.p-1", "usage.recorded.p-2"} {
		load.Add(1)
		go func() { defer load.Done(); publishUntil(pubCtx, js, s, &acked) }()
	}
	for _, s := range []string{"usage.ingest.p-3", "usage.recorded.p-3"} {
		load.Add(1)
		go func() { defer load.Done(); publishBatchesUntil(pubCtx, js, s, &acked) }()
	}
	for durable, filter := range map[string]string{"metering-ingest": "usage.ingest.>", "pricing-rating": "usage.recorded.>"} {
		load.Add(1)
		go func() { defer load.Done(); consumeUntil(conCtx, js, durable, filter, &consumed) }()
	}
	time.Sleep(100 * time.Millisecond)
	migCtx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	errs := make(chan error, migrators)
	for range migrators {
		go func() { errs <- migrateUntilDone(migCtx, js) }()
	}
	for range migrators {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the new stream takes publishes
	stopPublishing()
	for deadline := time.Now().Add(5 * time.Second); len(acked.missing(&consumed)) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	state = ownersState(js)
	stopConsuming()
	load.Wait()
	// Under load the test's consumers fall behind (a fetch that expired
	// client-side leaves its messages unacknowledged for the ack wait):
	// what is still in USAGE is late, not lost. Lost is what the stream
	// acknowledged and neither delivered nor still holds.
	undelivered := acked.missing(&consumed)
	if len(undelivered) == 0 {
		return nil, acked.len(), state
	}
	stored := storedIDs(t, js)
	for _, id := range undelivered {
		if !stored[id] {
			lost = append(lost, id)
		}
	}
	state = fmt.Sprintf("%d undelivered still in USAGE; %s", len(undelivered)-len(lost), state)
	if len(lost) > 0 {
		state = fmt.Sprintf("lost ones acknowledged with sequences %v; %s", acked.sequences(lost[:min(10, len(lost))]), state)
	}
	return lost, acked.len(), state
}

// storedIDs lists the message ids USAGE holds.
func storedIDs(t *testing.T, js jetstream.JetStream) map[string]bool {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[m.Header.Get(jetstream.MsgIDHeader)] = true
	}
	return out
}

// ownersState describes USAGE as it is: whether what was not delivered is
// still in it (its owners behind) or gone.
func ownersState(js jetstream.JetStream) string {
	ctx := context.Background()
	st, err := js.Stream(ctx, natsx.StreamUsage)
	if err != nil {
		return err.Error()
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("USAGE now %s: %d messages, last sequence %d", info.Config.Retention, info.State.Msgs, info.State.LastSeq)
	for _, o := range []string{"metering-ingest", "pricing-rating"} {
		c, err := st.Consumer(ctx, o)
		if err != nil {
			out += fmt.Sprintf("; %s: %v", o, err)
			continue
		}
		ci, err := c.Info(ctx)
		if err != nil {
			out += fmt.Sprintf("; %s: %v", o, err)
			continue
		}
		out += fmt.Sprintf("; %s: %d pending, %d unacknowledged", o, ci.NumPending, ci.NumAckPending)
	}
	return out
}

// TestRetentionMigrationKeepsWhatIsPublishedMeanwhile: USAGE made by an
// older gpubill (limits retention) becomes a work queue while its
// publishers publish (one at a time, and in async batches as the outbox
// relays do) and its owners consume, one process or two changing it at
// once; every publish the stream acknowledged is delivered to its owner,
// from the old stream or the new one. Unguarded, a publish between the
// drained check and the delete was acknowledged, then deleted; a publish
// queued in the stream before its subjects moved was stored and
// acknowledged after the drained check, then deleted (1 to 3 lost with the
// one-at-a-time publishers under load, hundreds with the batches); and a
// second process deleted the stream the first had just recreated, with
// new messages in it.
func TestRetentionMigrationKeepsWhatIsPublishedMeanwhile(t *testing.T) {
	t.Parallel()
	const rounds = 20
	for _, migrators := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d migrators", migrators), func(t *testing.T) {
			t.Parallel()
			js := testkit.NewJetStream(t).JS
			for round := range rounds {
				lost, published, state := migrateUnderLoad(t, js, migrators)
				if len(lost) > 0 {
					t.Errorf("round %d: %d of %d acknowledged publishes neither delivered nor in USAGE, e.g. %v (%s)", round, len(lost), published, lost[:min(3, len(lost))], state)
				} else {
					t.Logf("round %d: none of %d acknowledged publishes lost (%s)", round, published, state)
				}
			}
		})
	}
}

// deferredCount reads gpubill_stream_retention_deferred_total{stream="USAGE"}
// as /metrics serves it (0 when there is no such series).
func deferredCount(t *testing.T) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "gpubill_stream_retention_deferred_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stream" && l.GetValue() == natsx.StreamUsage {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// checkTakesPublishes fails unless USAGE takes a publish to each of its subjects.
func checkTakesPublishes(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	for _, s := range []string{"usage.ingest.p-9", "usage.recorded.p-9"} {
		if _, err := js.Publish(context.Background(), s, []byte("after")); err != nil {
			t.Errorf("publish to %s after the start: %v", s, err)
		}
	}
}

func storedMsgs(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// oldUsageWithAStuckMessage makes USAGE as an older gpubill did (limits
// retention) with 3 messages, one of them delivered to pricing-rating and
// never acknowledged (a handler stuck on it): a retention change waits
// for it until it gives up.
func oldUsageWithAStuckMessage(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	oldUsage(t, js)
	for _, s := range []string{"usage.ingest.p-1", "usage.recorded.p-1", "usage.recorded.p-2"} {
		if _, err := js.Publish(ctx, s, []byte("x"), jetstream.WithMsgID(s)); err != nil {
			t.Fatal(err)
		}
	}
	consume(t, js, "metering-ingest", "usage.ingest.>", 1)
	consume(t, js, "pricing-rating", "usage.recorded.>", 1)
	stuck, err := js.Consumer(ctx, natsx.StreamUsage, "pricing-rating")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stuck.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil { // delivered, never acked
		t.Fatal(err)
	}
}

// TestRetentionMigrationGivesUpOnALateBacklog: the owners still hold a
// message (delivered, never acknowledged: a handler stuck on it) when the
// stream has stopped taking publishes to change its retention. The change
// is given up within moments: the stream takes its subjects back, keeps its
// old retention and every message, and the deferral is counted for the
// alert (GpubillStreamRetentionDeferred). Not parallel: the counter is the
// process's.
func TestRetentionMigrationGivesUpOnALateBacklog(t *testing.T) {
	ctx := context.Background()
	js := testkit.NewJetStream(t).JS
	oldUsageWithAStuckMessage(t, js)
	deferredBefore := deferredCount(t)

	start := time.Now()
	if err := (natsx.Limits{MaxBytes: 4 << 20}).EnsureStreams(ctx, js, nil, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	ret, subjects, err := retention(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	want, err := natsx.StreamConfig(natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	if ret != jetstream.LimitsPolicy || fmt.Sprint(subjects) != fmt.Sprint(want.Subjects) {
		t.Errorf("after the start: retention %s, subjects %v; want limits kept and subjects %v", ret, subjects, want.Subjects)
	}
	if n := storedMsgs(t, js); n != 3 {
		t.Errorf("stream holds %d messages; want all 3 kept", n)
	}
	if got := deferredCount(t) - deferredBefore; got != 1 {
		t.Errorf("gpubill_stream_retention_deferred_total{stream=USAGE} rose by %v; want 1", got)
	}
	if took > 10*time.Second {
		t.Errorf("the start took %s over a backlog; want a bounded wait", took)
	}
	checkTakesPublishes(t, js)
}

// TestRetentionMigrationCancelledMidwayGivesTheSubjectsBack: the start is
// cancelled (SIGTERM, a deploy's timeout) while the retention change waits
// for the owners to drain USAGE, its subjects moved to its placeholder.
// The start fails with the cancellation, and USAGE has its own subjects
// back, its old retention and every message, and takes publishes. Before,
// giving the subjects back ran on the cancelled context and failed at
// once: USAGE refused every outbox publish until a later start.
func TestRetentionMigrationCancelledMidwayGivesTheSubjectsBack(t *testing.T) {
	t.Parallel()
	js := testkit.NewJetStream(t).JS
	oldUsageWithAStuckMessage(t, js)

	// Well inside the drain wait (2s), well past moving the subjects.
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	err := (natsx.Limits{MaxBytes: 4 << 20}).EnsureStreams(ctx, js, nil, natsx.StreamUsage)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("start cancelled during the drain wait returned %v; want the cancellation", err)
	}
	ret, subjects, err := retention(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	want, err := natsx.StreamConfig(natsx.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	if ret != jetstream.LimitsPolicy || fmt.Sprint(subjects) != fmt.Sprint(want.Subjects) {
		t.Errorf("after the cancelled start: retention %s, subjects %v; want limits kept and subjects %v", ret, subjects, want.Subjects)
	}
	if n := storedMsgs(t, js); n != 3 {
		t.Errorf("stream holds %d messages; want all 3 kept", n)
	}
	checkTakesPublishes(t, js)
}

// TestEnsureStreamsFinishesAChangeLeftHalfway: a process that died while
// changing USAGE's retention left it on its placeholder subject
// (gpubill.retired.USAGE), taking no publish. The next start finishes the
// change when the owners have consumed everything, and gives the stream
// its subjects back with its old retention when they have not; either
// way the stream takes publishes again.
func TestEnsureStreamsFinishesAChangeLeftHalfway(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		give          string
		consumed      int // of the 2 usage.recorded messages
		wantRetention jetstream.RetentionPolicy
	}{
		{give: "drained", consumed: 2, wantRetention: jetstream.WorkQueuePolicy},
		{give: "backlog", consumed: 1, wantRetention: jetstream.LimitsPolicy},
	} {
		t.Run(tt.give, func(t *testing.T) {
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
			consume(t, js, "pricing-rating", "usage.recorded.>", tt.consumed)
			halfway := streamConfig(t, js)
			halfway.Subjects = []string{"gpubill.retired." + natsx.StreamUsage}
			if _, err := js.UpdateStream(ctx, halfway); err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, "usage.recorded.p-1", []byte("refused")); err == nil {
				t.Fatal("a stream on its placeholder subject took a publish: the setup proves nothing")
			}

			if err := (natsx.Limits{MaxBytes: 4 << 20}).EnsureStreams(ctx, js, nil, natsx.StreamUsage); err != nil {
				t.Fatal(err)
			}
			ret, subjects, err := retention(ctx, js)
			if err != nil {
				t.Fatal(err)
			}
			want, err := natsx.StreamConfig(natsx.StreamUsage)
			if err != nil {
				t.Fatal(err)
			}
			if ret != tt.wantRetention || fmt.Sprint(subjects) != fmt.Sprint(want.Subjects) {
				t.Errorf("after the start: retention %s, subjects %v; want %s, %v", ret, subjects, tt.wantRetention, want.Subjects)
			}
			checkTakesPublishes(t, js)
		})
	}
}

// stillDeferred reads gpubill_stream_retention_still_deferred{stream="USAGE"}
// as /metrics serves it; ok is false when there is no such series.
func stillDeferred(t *testing.T) (v float64, ok bool) {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "gpubill_stream_retention_still_deferred" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stream" && l.GetValue() == natsx.StreamUsage {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestRetentionStillDeferredUntilChanged: the deferral's alert read the
// counter's increase over an hour, so its ticket cleared an hour after the
// start while USAGE still had its old retention (consumed messages piling
// up toward its byte cap). The gauge is 1 from the deferral until a start
// changes the retention, then 0. Not parallel: the gauge is the process's.
func TestRetentionStillDeferredUntilChanged(t *testing.T) {
	ctx := context.Background()
	js := testkit.NewJetStream(t).JS
	oldUsage(t, js)
	for _, s := range []string{"usage.ingest.p-1", "usage.recorded.p-1"} {
		if _, err := js.Publish(ctx, s, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	consume(t, js, "metering-ingest", "usage.ingest.>", 1) // pricing-rating not there yet: a backlog
	lim := natsx.Limits{MaxBytes: 4 << 20}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := lim.EnsureStreams(ctx, js, log, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	if ret, _, err := retention(ctx, js); err != nil || ret != jetstream.LimitsPolicy {
		t.Fatalf("after a start over a backlog: retention %s (%v); want limits kept (the deferral this test is about)", ret, err)
	}
	if v, ok := stillDeferred(t); !ok || v != 1 {
		t.Errorf("after the deferral: gpubill_stream_retention_still_deferred{stream=USAGE} = %v (series %v); want 1", v, ok)
	}

	consume(t, js, "pricing-rating", "usage.recorded.>", 1)
	if err := lim.EnsureStreams(ctx, js, log, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	if ret, _, err := retention(ctx, js); err != nil || ret != jetstream.WorkQueuePolicy {
		t.Fatalf("after a start with nothing left: retention %s (%v); want workqueue", ret, err)
	}
	if v, ok := stillDeferred(t); !ok || v != 0 {
		t.Errorf("after the change: gpubill_stream_retention_still_deferred{stream=USAGE} = %v (series %v); want 0", v, ok)
	}
}

// TestRetentionMigrationKeepsAPublishStoredAfterTheDrainedCheck: moving
// USAGE's subjects to its placeholder stops the publishes that arrive
// later, not those already in the stream's inbound queue: the server
// stores and acknowledges them after the move returns, under load after
// the check that found the owners had consumed everything. Such a publish
// (made here between that check and the delete, the owners not running)
// is acknowledged and must reach its owner, from the old stream or the
// new; before, the stream was deleted with it. Not parallel: the hook is
// the process's.
func TestRetentionMigrationKeepsAPublishStoredAfterTheDrainedCheck(t *testing.T) {
	ctx := context.Background()
	js := testkit.NewJetStream(t).JS
	oldUsage(t, js)
	if _, err := js.Publish(ctx, "usage.recorded.p-1", []byte("x"), jetstream.WithMsgID("early")); err != nil {
		t.Fatal(err)
	}
	consume(t, js, "metering-ingest", "usage.ingest.>", 0)
	consume(t, js, "pricing-rating", "usage.recorded.>", 1)

	var late *jetstream.PubAck
	var hookErr error
	restore := natsx.SetAfterDrainedCheck(func() {
		if late != nil || hookErr != nil {
			return // once
		}
		// What the server does with a publish queued before the move:
		// store it on the old subjects and acknowledge it.
		moved := streamConfig(t, js)
		back := moved
		back.Subjects = []string{"usage.>"}
		if _, hookErr = js.UpdateStream(ctx, back); hookErr != nil {
			return
		}
		if late, hookErr = js.Publish(ctx, "usage.recorded.p-1", []byte("x"), jetstream.WithMsgID("late")); hookErr != nil {
			return
		}
		_, hookErr = js.UpdateStream(ctx, moved)
	})
	defer restore()

	if err := (natsx.Limits{MaxBytes: 4 << 20}).EnsureStreams(ctx, js, nil, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	if hookErr != nil || late == nil {
		t.Fatalf("the late publish was not made (%v): the test proves nothing", hookErr)
	}
	var consumed ids
	conCtx, stopConsuming := context.WithTimeout(ctx, 5*time.Second)
	defer stopConsuming()
	go consumeUntil(conCtx, js, "pricing-rating", "usage.recorded.>", &consumed)
	for !consumedHas(&consumed, "late") && conCtx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if !consumedHas(&consumed, "late") {
		ret, subjects, err := retention(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("a publish USAGE acknowledged (seq %d) after its owners were found drained was never delivered: deleted with the old stream (USAGE now %s, %v, %d messages)",
			late.Sequence, ret, subjects, storedMsgs(t, js))
	}
}

func consumedHas(s *ids, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set[id]
}
