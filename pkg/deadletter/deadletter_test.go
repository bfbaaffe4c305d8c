package deadletter_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// The table as every service's migration creates it (see the package doc).
const ddl = `create schema dlt;
create table dlt.dead_letters (
    id bigserial primary key, consumer text not null, message_id text not null, subject text not null,
    headers jsonb not null default '{}', payload bytea not null, error text not null, attempts int not null,
    first_seen_at timestamptz not null, last_seen_at timestamptz not null,
    replay_requested_at timestamptz, replayed_at timestamptz, unique (consumer, message_id))`

func setup(t *testing.T) (*pgxpool.Pool, jetstream.JetStream, *deadletter.Sink) {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	if _, err := pool.Exec(context.Background(), ddl); err != nil {
		t.Fatal(err)
	}
	js := testkit.NewJetStream(t)
	if _, err := js.JS.CreateStream(context.Background(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return pool, js.JS, deadletter.New(pool, "dlt", log)
}

func publish(t *testing.T, js jetstream.JetStream, id, data string) {
	t.Helper()
	m := nats.NewMsg("t.x")
	m.Data = []byte(data)
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// applied records what a handler applied, by message id.
type applied struct {
	mu  sync.Mutex
	ids map[string]int
}

func (a *applied) add(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids = map[string]int{}
	}
	a.ids[id]++
}

func (a *applied) get(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[id]
}

// TestFailingMessageDeadLetteredAfterNDeliveries: a message whose handler
// keeps failing (an error that is not poison, so it is retried) is
// dead-lettered after exactly natsx.DeadLetterDeliveries deliveries; the
// messages around it, in the same batches, are applied meanwhile; a replay
// before the fix leaves it dead with one more attempt, a replay after the
// fix applies it once and marks it replayed.
func TestFailingMessageDeadLetteredAfterNDeliveries(t *testing.T) {
	t.Parallel()
	pool, js, sink := setup(t)
	var got applied
	var fixed atomic.Bool
	var badTries atomic.Int32
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		for _, m := range msgs {
			if string(m.Data()) == "bad" && !fixed.Load() {
				badTries.Add(1)
				return errors.New("bad payload")
			}
		}
		for _, m := range msgs {
			got.add(natsx.MsgID(m))
		}
		return nil
	}
	for i := range 3 {
		publish(t, js, fmt.Sprintf("good-%d", i), "ok")
	}
	publish(t, js, "m-bad", "bad")
	for i := 3; i < 6; i++ {
		publish(t, js, fmt.Sprintf("good-%d", i), "ok")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)),
			natsx.ConsumerSpec{Stream: "T", Durable: "c", BatchMax: 10, MaxWait: 20 * time.Millisecond, DeadLetters: sink}, h)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()

	row := func() (attempts int, status string) {
		err := pool.QueryRow(context.Background(), `select attempts,
			case when replayed_at is not null then 'replayed' when replay_requested_at is not null then 'requested' else 'dead' end
			from dlt.dead_letters where consumer = 'c' and message_id = 'm-bad'`).Scan(&attempts, &status)
		if err != nil {
			return 0, err.Error()
		}
		return attempts, status
	}
	testkit.Eventually(t, 15*time.Second, func() bool { _, s := row(); return s == "dead" }, "m-bad dead-lettered")
	if a, _ := row(); a != natsx.DeadLetterDeliveries {
		t.Errorf("dead-lettered after %d deliveries, want %d", a, natsx.DeadLetterDeliveries)
	}
	for i := range 6 {
		if n := got.get(fmt.Sprintf("good-%d", i)); n != 1 {
			t.Errorf("good-%d applied %d times, want 1", i, n)
		}
	}
	if got.get("m-bad") != 0 {
		t.Error("m-bad applied while failing")
	}
	// The stream moved on: nothing pending or awaiting an ack.
	testkit.Eventually(t, 5*time.Second, func() bool {
		lags, err := natsx.ConsumerLags(context.Background(), js, "T")
		return err == nil && len(lags) == 1 && lags[0].Pending == 0 && lags[0].AckPending == 0
	}, "consumer drained")

	// Replay before the fix: still dead, one more attempt.
	tries := badTries.Load()
	if _, err := pool.Exec(context.Background(), `update dlt.dead_letters set replay_requested_at = now() where message_id = 'm-bad'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return badTries.Load() > tries }, "replay attempted")
	testkit.Eventually(t, 5*time.Second, func() bool {
		a, s := row()
		return s == "dead" && a == natsx.DeadLetterDeliveries+1
	}, "a failed replay leaves the letter dead with one more attempt")

	// After the fix: applied once, through the same handler, with its id.
	fixed.Store(true)
	if _, err := pool.Exec(context.Background(), `update dlt.dead_letters set replay_requested_at = now() where message_id = 'm-bad'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { _, s := row(); return s == "replayed" }, "m-bad replayed")
	if n := got.get("m-bad"); n != 1 {
		t.Errorf("m-bad applied %d times after the fix, want 1", n)
	}
}

// TestPoisonIsDeadLetteredAtOnce: a message the handler names poison is
// dead-lettered at its first delivery, and the rest of its batch applied.
func TestPoisonIsDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	pool, js, sink := setup(t)
	var got applied
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		var p natsx.PoisonError
		for _, m := range msgs {
			if string(m.Data()) == "poison" {
				p.Add(natsx.MsgID(m), errors.New("cannot decode"))
			}
		}
		if len(p.ByID) > 0 {
			return &p
		}
		for _, m := range msgs {
			got.add(natsx.MsgID(m))
		}
		return nil
	}
	publish(t, js, "a", "ok")
	publish(t, js, "p", "poison")
	publish(t, js, "b", "ok")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)),
			natsx.ConsumerSpec{Stream: "T", Durable: "c", BatchMax: 10, MaxWait: 50 * time.Millisecond, DeadLetters: sink}, h)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return got.get("a") == 1 && got.get("b") == 1 }, "a and b applied")
	var attempts int
	var errText, payload string
	testkit.Eventually(t, 5*time.Second, func() bool {
		return pool.QueryRow(context.Background(), `select attempts, error, convert_from(payload, 'UTF8') from dlt.dead_letters where message_id = 'p'`).
			Scan(&attempts, &errText, &payload) == nil
	}, "p dead-lettered")
	if attempts != 1 || errText != "cannot decode" || payload != "poison" {
		t.Errorf("dead letter: attempts %d, error %q, payload %q", attempts, errText, payload)
	}
}

// A second payload under a message id already kept (a stream recreated, its
// sequence numbers, the ids of messages without Nats-Msg-Id, counting again)
// is kept beside the first, under the id and its payload's digest; the same
// payload again adds its attempts. It was counted on the first letter and
// its body lost.
func TestLetterWithAnotherPayloadUnderAKeptID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, sink := setup(t)
	put := func(payload string) {
		t.Helper()
		if err := sink.PutLetter(ctx, pool, deadletter.Letter{Consumer: "c", MessageID: "T:5", Subject: "t.x", Payload: []byte(payload)}, 1, errors.New("bad "+payload)); err != nil {
			t.Fatal(err)
		}
	}
	put("old")
	put("new")
	put("new")
	put("old")
	rows, err := pool.Query(ctx, `select message_id, convert_from(payload, 'UTF8'), attempts from dlt.dead_letters order by id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id, payload string
		var attempts int
		if err := rows.Scan(&id, &payload, &attempts); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %d", id, payload, attempts))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("new"))
	want := []string{"T:5 old 2", "T:5#" + hex.EncodeToString(sum[:8]) + " new 2"}
	if !slices.Equal(got, want) {
		t.Fatalf("letters %q, want %q", got, want)
	}
}

// A letter dead-lettered again while its replay runs (the outbox relay's
// publish refused once more: requeue returns, the relay writes the letter
// back before the replay marks it) stays dead: marked replayed, it was in
// neither the outbox nor the stream, and no alert counted it.
func TestReplayDoesNotMarkALetterDeadAgain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, _, sink := setup(t)
	l := deadletter.Letter{Consumer: "relay", MessageID: "outbox:7", Subject: "t.x", Payload: []byte("too big")}
	if err := sink.PutLetter(ctx, pool, l, 1, errors.New("maximum payload exceeded")); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `update dlt.dead_letters set replay_requested_at = now()`); err != nil {
		t.Fatal(err)
	}
	var applies atomic.Int32
	go sink.ReplayLetters(ctx, "relay", func(ctx context.Context, got deadletter.Letter) error { //nolint:errcheck // ends with ctx
		applies.Add(1)
		return sink.PutLetter(ctx, pool, got, 1, errors.New("maximum payload exceeded, again"))
	})
	testkit.Eventually(t, 10*time.Second, func() bool { return applies.Load() == 1 }, "replay never applied")
	var replayed *time.Time
	var errText string
	testkit.Eventually(t, 5*time.Second, func() bool {
		if err := pool.QueryRow(ctx, `select replayed_at, error from dlt.dead_letters`).Scan(&replayed, &errText); err != nil {
			t.Fatal(err)
		}
		return errText == "maximum payload exceeded, again"
	}, "letter not written back")
	time.Sleep(300 * time.Millisecond) // the replay's mark, if any, is in
	if err := pool.QueryRow(ctx, `select replayed_at from dlt.dead_letters`).Scan(&replayed); err != nil {
		t.Fatal(err)
	}
	if replayed != nil {
		t.Fatalf("a letter dead-lettered again during its replay reads replayed at %s", replayed)
	}
	if n := replays(t, "relay", "failed"); n != 1 {
		t.Errorf("gpubill_dead_letter_replays_total{consumer=relay,outcome=failed} = %v, want 1", n)
	}
	if n := replays(t, "relay", "replayed"); n != 0 {
		t.Errorf("gpubill_dead_letter_replays_total{consumer=relay,outcome=replayed} = %v, want 0", n)
	}
}

// replays reads gpubill_dead_letter_replays_total of service dlt.
func replays(t *testing.T, consumer, outcome string) float64 {
	t.Helper()
	return counter(t, "gpubill_dead_letter_replays_total", map[string]string{"service": "dlt", "consumer": consumer, "outcome": outcome})
}

// consumerCount reads counter name of a JetStream consumer.
func consumerCount(t *testing.T, name, consumer string) float64 {
	t.Helper()
	return counter(t, name, map[string]string{"consumer": consumer})
}

// counter reads the default registry's counter name with labels want.
func counter(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if maps.Equal(labels, want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// letterRow reads a letter's attempts, error and status.
func letterRow(t *testing.T, pool *pgxpool.Pool, id string) (attempts int, errText, status string) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `select attempts, error,
		case when replayed_at is not null then 'replayed' when replay_requested_at is not null then 'requested' else 'dead' end
		from dlt.dead_letters where message_id = $1`, id).Scan(&attempts, &errText, &status)
	if err != nil {
		return 0, err.Error(), ""
	}
	return attempts, errText, status
}

// TestReplayOfAPanickingLetterKeepsTheProcess: a letter dead-lettered
// because its handler panicked, replayed before the fix, panics again; the
// replay is a failed one (one more attempt, the panic as its error, counted
// in gpubill_consumer_handler_panics_total) and the consumer goes on.
// Consume recovered a handler's panic on its pull path only: the replay
// called the handler bare, and the panic ended the process (under gpubill
// dev, every service).
func TestReplayOfAPanickingLetterKeepsTheProcess(t *testing.T) {
	t.Parallel()
	pool, js, sink := setup(t)
	var got applied
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		for _, m := range msgs {
			if string(m.Data()) == "boom" {
				fields := strings.Fields(string(m.Data()))
				_ = fields[1] // a handler's bug: index out of range
			}
		}
		for _, m := range msgs {
			got.add(natsx.MsgID(m))
		}
		return nil
	}
	publish(t, js, "m-boom", "boom")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)),
			natsx.ConsumerSpec{Stream: "T", Durable: "c-panic", BatchMax: 10, MaxWait: 20 * time.Millisecond, DeadLetters: sink}, h)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()
	testkit.Eventually(t, 30*time.Second, func() bool { _, _, s := letterRow(t, pool, "m-boom"); return s == "dead" }, "m-boom dead-lettered")
	panics := consumerCount(t, "gpubill_consumer_handler_panics_total", "c-panic")
	if _, err := pool.Exec(context.Background(), `update dlt.dead_letters set replay_requested_at = now() where message_id = 'm-boom'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		a, _, s := letterRow(t, pool, "m-boom")
		return s == "dead" && a == natsx.DeadLetterDeliveries+1
	}, "the panicking replay is not recorded as a failed replay")
	if _, errText, _ := letterRow(t, pool, "m-boom"); !strings.Contains(errText, "panicked") {
		t.Errorf("failed replay's error %q, want the panic", errText)
	}
	if n := consumerCount(t, "gpubill_consumer_handler_panics_total", "c-panic"); n != panics+1 {
		t.Errorf("handler panics %v after the replay, want %v", n, panics+1)
	}
	// The consumer lives on.
	publish(t, js, "m-after", "ok")
	testkit.Eventually(t, 10*time.Second, func() bool { return got.get("m-after") == 1 }, "m-after not applied after the replay")
}

// TestReplayOfAHangingLetterIsBounded: a replay whose handler call hangs
// (a statement that never answers) has its context cancelled after the
// consumer's HandleWithin, like any handler call: it is a failed replay
// (one more attempt, the bound as its error, counted in
// gpubill_consumer_handler_timeouts_total) and the next replay request is
// taken. It held the consumer's replay loop for as long as it hung.
func TestReplayOfAHangingLetterIsBounded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	pool, js, sink := setup(t)
	var got applied
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		for _, m := range msgs {
			if string(m.Data()) == "hangs" {
				<-ctx.Done()
				return fmt.Errorf("apply: %w", ctx.Err())
			}
		}
		for _, m := range msgs {
			got.add(natsx.MsgID(m))
		}
		return nil
	}
	for _, id := range []string{"m-hangs", "m-ok"} {
		data := "ok"
		if id == "m-hangs" {
			data = "hangs"
		}
		if err := sink.PutLetter(ctx, pool, deadletter.Letter{Consumer: "c-hang", MessageID: id, Subject: "t.x", Payload: []byte(data)}, 1, errors.New("old")); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		done <- natsx.Consume(ctx, js, slog.New(slog.NewTextHandler(io.Discard, nil)),
			natsx.ConsumerSpec{Stream: "T", Durable: "c-hang", HandleWithin: 300 * time.Millisecond, DeadLetters: sink}, h)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()
	timeouts := consumerCount(t, "gpubill_consumer_handler_timeouts_total", "c-hang")
	if _, err := pool.Exec(ctx, `update dlt.dead_letters set replay_requested_at = now() where message_id = 'm-hangs'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { a, _, s := letterRow(t, pool, "m-hangs"); return s == "dead" && a == 2 },
		"the hanging replay is not recorded as a failed replay")
	if _, errText, _ := letterRow(t, pool, "m-hangs"); !strings.Contains(errText, "exceeded its bound") {
		t.Errorf("failed replay's error %q, want the handler's bound", errText)
	}
	if n := consumerCount(t, "gpubill_consumer_handler_timeouts_total", "c-hang"); n != timeouts+1 {
		t.Errorf("handler timeouts %v after the replay, want %v", n, timeouts+1)
	}
	if _, err := pool.Exec(ctx, `update dlt.dead_letters set replay_requested_at = now() where message_id = 'm-ok'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { _, _, s := letterRow(t, pool, "m-ok"); return s == "replayed" && got.get("m-ok") == 1 },
		"the next replay request was not taken after the hanging one")
}
