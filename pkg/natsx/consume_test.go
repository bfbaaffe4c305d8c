package natsx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// noDeadLetters is a sink the test never expects to be used.
type noDeadLetters struct{ t *testing.T }

func (d noDeadLetters) Put(_ context.Context, consumer string, m jetstream.Msg, _ int, cause error) error {
	d.t.Errorf("dead-lettered %s on %s: %v", m.Subject(), consumer, cause)
	return nil
}

func (noDeadLetters) Replay(ctx context.Context, _ string, _ natsx.Handler) error {
	<-ctx.Done()
	return nil
}

// freeAddr returns a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func runNATS(t *testing.T, addr, dir string) *server.Server {
	t.Helper()
	ns, err := natsx.RunEmbedded(addr, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// natsToRestart starts an embedded NATS with the named streams and returns
// a JetStream client that reconnects forever, with a short request timeout
// (each attempt while NATS is down fails fast), the server, and a function
// that starts it again on the same address and store after a Shutdown.
func natsToRestart(ctx context.Context, t *testing.T, streams ...string) (jetstream.JetStream, *server.Server, func()) {
	t.Helper()
	addr, dir := freeAddr(t), t.TempDir()
	ns := runNATS(t, addr, dir)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.EnsureStreams(ctx, js, streams...); err != nil {
		t.Fatal(err)
	}
	return js, ns, func() { runNATS(t, addr, dir) }
}

// TestConsumeWaitsForNATSAtStartUp: Consume called while NATS is down (the
// chaos test killed it while payout created its consumer) retries creating
// its consumer instead of returning, and consumes once NATS is back.
func TestConsumeWaitsForNATSAtStartUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, ns, restart := natsToRestart(ctx, t, natsx.StreamSettlement)
	for _, s := range []string{"settlement.provider_settled.p-1", "settlement.provider_settled.p-2"} {
		if _, err := js.Publish(ctx, s, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	ns.Shutdown()
	ns.WaitForShutdown()

	var got atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)),
			natsx.ConsumerSpec{Stream: natsx.StreamSettlement, Durable: "payout-settled", DeadLetters: noDeadLetters{t}},
			func(_ context.Context, msgs []jetstream.Msg) error { got.Add(int64(len(msgs))); return nil })
	}()
	select {
	case err := <-done:
		t.Fatalf("Consume returned while NATS was down: %v", err)
	case <-time.After(2 * time.Second): // several attempts fail meanwhile
	}
	restart()
	testkit.Eventually(t, 20*time.Second, func() bool { return got.Load() == 2 }, "consumed %d of 2 after NATS came back", got.Load())
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
}

// TestConsumeSlowHandlerNotRedelivered: a handler that runs four ack waits is
// reported in progress, so a second consumer on the same durable (another
// replica) is not handed the batch meanwhile.
func TestConsumeSlowHandlerNotRedelivered(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js := testkit.NewJetStream(t).JS
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SLOW", Subjects: []string{"slow.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "slow.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	const ackWait = time.Second
	var calls atomic.Int32
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		if calls.Add(1) == 1 {
			time.Sleep(4 * ackWait)
		}
		return nil
	}
	spec := natsx.ConsumerSpec{Stream: "SLOW", Durable: "slow", AckWait: ackWait, DeadLetters: noDeadLetters{t}}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)), spec, h); err != nil {
				t.Error(err)
			}
		}()
	}
	for start := time.Now(); calls.Load() < 1; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the message never reached the handler")
		}
	}
	time.Sleep(6 * ackWait) // the slow call, and room for a redelivery after it
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1 (the slow batch was redelivered)", n)
	}
	cancel()
	wg.Wait()
}

// TestConsumeCancelsAStuckHandler: a handler call that never returns on its
// own (a statement that never answers) has its context cancelled after
// HandleWithin, and the message is tried again and applied, instead of
// being reported in progress for as long as the call hangs.
func TestConsumeCancelsAStuckHandler(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js := testkit.NewJetStream(t).JS
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "STUCK", Subjects: []string{"stuck.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "stuck.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	var calls, applied atomic.Int32
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		if calls.Add(1) == 1 {
			<-ctx.Done() // hangs until cancelled
			return ctx.Err()
		}
		applied.Add(int32(len(msgs)))
		return nil
	}
	spec := natsx.ConsumerSpec{Stream: "STUCK", Durable: "stuck", AckWait: time.Second, HandleWithin: 500 * time.Millisecond, DeadLetters: noDeadLetters{t}}
	done := make(chan error, 1)
	go func() { done <- natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)), spec, h) }()
	testkit.Eventually(t, 20*time.Second, func() bool { return applied.Load() == 1 }, "message not applied after the stuck call (%d calls)", calls.Load())
	if got := testutil.ToFloat64(natsx.HandlerTimeouts.WithLabelValues("stuck")); got != 1 {
		t.Errorf("handler timeouts counted %v, want 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOrderedMessagesWaitsForNATSAtStartUp: an ordered consumer started
// while NATS is down (payout's wake on credits, when the chaos test killed
// NATS as payout started) retries instead of returning, and delivers what is
// published once NATS is back.
func TestOrderedMessagesWaitsForNATSAtStartUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, ns, restart := natsToRestart(ctx, t, natsx.StreamLedger)
	ns.Shutdown()
	ns.WaitForShutdown()

	started := make(chan jetstream.MessagesContext, 1)
	go func() {
		started <- natsx.OrderedMessages(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)), "payout-credits", natsx.StreamLedger,
			jetstream.OrderedConsumerConfig{FilterSubjects: []string{"ledger.posted.provider"}})
	}()
	select {
	case it := <-started:
		t.Fatalf("OrderedMessages returned while NATS was down (iterator %v)", it)
	case <-time.After(2 * time.Second): // several attempts fail meanwhile
	}
	restart()
	var it jetstream.MessagesContext
	select {
	case it = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no ordered consumer 20 s after NATS came back")
	}
	if it == nil {
		t.Fatal("OrderedMessages returned nil while ctx was live")
	}
	defer it.Stop()
	if _, err := js.Publish(ctx, "ledger.posted.provider", []byte("x")); err != nil {
		t.Fatal(err)
	}
	m, err := it.Next()
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	if m.Subject() != "ledger.posted.provider" {
		t.Fatalf("got %s", m.Subject())
	}
	cancel()
	if got := natsx.OrderedMessages(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)), "payout-credits", natsx.StreamLedger,
		jetstream.OrderedConsumerConfig{}); got != nil {
		t.Fatal("OrderedMessages after ctx ended returned an iterator")
	}
}

// TestConsumeCreatesADeletedConsumerAgain: a durable consumer deleted while
// its service runs (an operator's `nats consumer rm`, a store rebuilt) is
// created again and consumption goes on; the pull loop fetched from the
// vanished consumer forever, every answer an immediate error logged at
// debug, thousands of fetches a second and no message consumed.
func TestConsumeCreatesADeletedConsumerAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var got atomic.Int32
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		got.Add(int32(len(msgs)))
		return nil
	}
	js := consumeStream(t, "GONE", "gone.>", natsx.ConsumerSpec{Durable: "gone", MaxWait: 200 * time.Millisecond, DeadLetters: noDeadLetters{t}}, h)
	publish := func(subject string) {
		t.Helper()
		if _, err := js.Publish(ctx, subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	publish("gone.1")
	testkit.Eventually(t, 10*time.Second, func() bool { return got.Load() == 1 }, "the first message never reached the handler")
	if err := js.DeleteConsumer(ctx, "GONE", "gone"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	publish("gone.2")
	testkit.Eventually(t, 15*time.Second, func() bool { return got.Load() >= 2 }, "nothing consumed after the consumer was deleted")
}

// consumeStream creates stream name on subjects and runs Consume of spec
// (its Stream set to name) with h until the test ends.
func consumeStream(t *testing.T, name, subjects string, spec natsx.ConsumerSpec, h natsx.Handler) jetstream.JetStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	js := testkit.NewJetStream(t).JS
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subjects}}); err != nil {
		t.Fatal(err)
	}
	spec.Stream = name
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)), spec, h); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return js
}

// TestUnansweredAsyncPublishesAreDropped: an async publish whose ack never
// comes (a clustered stream's server drops it while its leader moves) is
// ended by the client's timeout. It stayed pending for good, and once 4000
// had piled up every PublishMsgAsync of the process failed: every outbox
// relay stopped while the connection was healthy.
func TestUnansweredAsyncPublishesAreDropped(t *testing.T) { // not parallel: it sets the package's timeout
	old := natsx.SetPublishAsyncTimeout(500 * time.Millisecond)
	defer natsx.SetPublishAsyncTimeout(old)
	srv := testkit.NewJetStream(t)
	nc, js, err := natsx.Connect(srv.Conn.ConnectedUrl(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A subscriber that never answers: the publish is delivered, its ack never comes.
	sub, err := srv.Conn.SubscribeSync("lost.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for range 10 {
		if _, err := js.PublishAsync("lost.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return js.PublishAsyncPending() == 0 }, "async publishes still pending with no ack coming")
}

// recordedLetters records what a consumer dead-letters: each letter's
// payload, and its deliveries and cause.
type recordedLetters struct {
	mu     sync.Mutex
	ids    []string
	causes []string // "<deliveries> <cause>"
}

func (d *recordedLetters) Put(_ context.Context, _ string, m jetstream.Msg, deliveries int, cause error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids = append(d.ids, string(m.Data()))
	d.causes = append(d.causes, fmt.Sprintf("%d %v", deliveries, cause))
	return nil
}

func (d *recordedLetters) gotCauses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.causes...)
}

func (*recordedLetters) Replay(ctx context.Context, _ string, _ natsx.Handler) error {
	<-ctx.Done()
	return nil
}

func (d *recordedLetters) got() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.ids...)
}

// TestConsumeSurvivesAPanickingHandler: a message whose handling panics is
// dead-lettered at its last delivery and the messages around it are
// applied; the panic ended the process (every service of `gpubill dev`),
// and the message, delivered again after each restart, brought it down
// again.
func TestConsumeSurvivesAPanickingHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var applied sync.Map
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		for _, m := range msgs {
			if string(m.Data()) == "bad" {
				panic("a handler's bug")
			}
		}
		for _, m := range msgs {
			applied.Store(string(m.Data()), true)
		}
		return nil
	}
	letters := &recordedLetters{}
	js := consumeStream(t, "PANIC", "panic.>", natsx.ConsumerSpec{Durable: "panic", MaxWait: 200 * time.Millisecond, DeadLetters: letters}, h)
	for _, data := range []string{"good-1", "bad", "good-2"} {
		if _, err := js.Publish(ctx, "panic.x", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 60*time.Second, func() bool {
		_, g1 := applied.Load("good-1")
		_, g2 := applied.Load("good-2")
		got := letters.got()
		return g1 && g2 && len(got) == 1 && got[0] == "bad"
	}, "good messages applied and the panicking one dead-lettered")
	if _, bad := applied.Load("bad"); bad {
		t.Error("the panicking message was applied")
	}
}

// TestConsumeDeadLettersAHandlerThatAlwaysOutrunsItsBound: a message whose
// handler call runs past HandleWithin at every delivery (a statement the
// message makes that never finishes) is dead-lettered after
// DeadLetterDeliveries deliveries, with the bound as its cause, like a
// statement timeout: it may be the message's own doing. The call's error
// wrapped context.DeadlineExceeded, which was taken as an outage
// (apperr.Transient), so the message was redelivered for ever, every
// delivery a stuck call.
func TestConsumeDeadLettersAHandlerThatAlwaysOutrunsItsBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls atomic.Int32
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		calls.Add(1)
		<-ctx.Done()
		return fmt.Errorf("apply: %w", ctx.Err())
	}
	letters := &recordedLetters{}
	js := consumeStream(t, "OUTRUN", "outrun.>", natsx.ConsumerSpec{Durable: "outrun", MaxWait: 100 * time.Millisecond,
		HandleWithin: 200 * time.Millisecond, DeadLetters: letters}, h)
	if _, err := js.Publish(ctx, "outrun.x", []byte("hangs")); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("%d handler calls", calls.Load())
		}
	}()
	testkit.Eventually(t, 30*time.Second, func() bool { return len(letters.got()) > 0 }, "never dead-lettered")
	time.Sleep(500 * time.Millisecond) // room for a second letter, if any
	if got := letters.got(); len(got) != 1 || got[0] != "hangs" {
		t.Fatalf("dead letters %q, want the one message", got)
	}
	cause := letters.gotCauses()[0]
	if want := fmt.Sprint(natsx.DeadLetterDeliveries) + " "; !strings.HasPrefix(cause, want) || !strings.Contains(cause, "exceeded its bound") {
		t.Errorf("dead letter %q, want %d deliveries and the bound as its cause", cause, natsx.DeadLetterDeliveries)
	}
}

// flakyLetters refuses its second Put, once, and records every Put asked
// of it by payload.
type flakyLetters struct {
	mu   sync.Mutex
	puts []string
}

func (d *flakyLetters) Put(_ context.Context, _ string, m jetstream.Msg, _ int, _ error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.puts = append(d.puts, string(m.Data()))
	if len(d.puts) == 2 {
		return errors.New("dead-letter table unavailable")
	}
	return nil
}

func (*flakyLetters) Replay(ctx context.Context, _ string, _ natsx.Handler) error {
	<-ctx.Done()
	return nil
}

func (d *flakyLetters) count(data string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(slices.DeleteFunc(slices.Clone(d.puts), func(p string) bool { return p != data }))
}

// TestConsumePoisonDeadLetteredOnceWhenALaterLetterFails: a batch naming
// two messages poison, the second's dead letter refused, goes on with the
// messages not yet settled: the first, dead-lettered and acknowledged, was
// handed to the handler again and dead-lettered twice (counted twice in
// gpubill_dead_letters_total, its attempts doubled).
func TestConsumePoisonDeadLetteredOnceWhenALaterLetterFails(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js := testkit.NewJetStream(t).JS
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "POISON2", Subjects: []string{"poison2.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{"poison-1", "poison-2", "good"} {
		if _, err := js.Publish(ctx, "poison2.x", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	var good atomic.Int32
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		var p natsx.PoisonError
		for _, m := range msgs {
			if strings.HasPrefix(string(m.Data()), "poison") {
				p.Add(natsx.MsgID(m), errors.New("cannot decode"))
			}
		}
		if len(p.ByID) > 0 {
			return &p
		}
		for _, m := range msgs {
			if string(m.Data()) == "good" {
				good.Add(1)
			}
		}
		return nil
	}
	letters := &flakyLetters{}
	done := make(chan error, 1)
	go func() {
		done <- natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)),
			natsx.ConsumerSpec{Stream: "POISON2", Durable: "poison2", BatchMax: 10, DeadLetters: letters}, h)
	}()
	testkit.Eventually(t, 20*time.Second, func() bool { return good.Load() == 1 && letters.count("poison-2") == 2 },
		"good applied and poison-2 dead-lettered on the second try")
	letters.mu.Lock()
	puts := slices.Clone(letters.puts)
	letters.mu.Unlock()
	if len(puts) < 2 || puts[0] != "poison-1" || puts[1] != "poison-2" {
		t.Fatalf("dead letters asked %q: the refused one was not the second of the batch", puts)
	}
	if n := letters.count("poison-1"); n != 1 {
		t.Errorf("poison-1 dead-lettered %d times, want 1 (letters asked: %q)", n, puts)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
