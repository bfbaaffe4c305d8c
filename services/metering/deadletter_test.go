package metering_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/metering"
)

func ingestBody(id string, name string) string {
	return `{"events":[{"id":"` + id + `","lease_id":"l-` + id + `","provider_id":"p-001","renter_id":"r-001","gpu_model":"H100","gpu_count":1,` +
		`"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z","workload":"` + name + `"}]}`
}

func publishIngest(t *testing.T, js jetstream.JetStream, msgID, body string) {
	t.Helper()
	m := nats.NewMsg("usage.ingest.p-001")
	m.Data = []byte(body)
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func parties(t *testing.T, s *metering.Service) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Parties().CreateProvider(ctx, &meteringv1.CreateProviderRequest{ProviderId: "p-001", Tier: "standard", TaxProfile: "enterprise", Jurisdiction: "US"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Parties().CreateRenter(ctx, &meteringv1.CreateRenterRequest{RenterId: "r-001", Currency: "USD"}); err != nil {
		t.Fatal(err)
	}
}

// TestIngestPoisonIsDeadLetteredNotDropped: an undecodable body is kept in
// metering.dead_letters at its first delivery (retrying cannot fix it), and
// the good messages published after it are recorded meanwhile: nothing
// blocks, nothing vanishes. An event with an escaped NUL byte (\\u0000,
// which PostgreSQL text refuses) is rejected alone, with its reason: its
// message is applied (the other events recorded) and kept in dead letters
// naming the event (no fix makes it valid; it is counted by class). (It
// failed its message's insert on every delivery, and so every event beside
// it, until it was dead-lettered after natsx.DeadLetterDeliveries
// deliveries; that path is pkg/deadletter's tests'.)
func TestIngestPoisonIsDeadLetteredNotDropped(t *testing.T) {
	t.Parallel()
	s, d := newService(t)
	ctx := context.Background()
	parties(t, s)
	publishIngest(t, d.JS, "m-garbage", `{"events":[{"id":`)
	publishIngest(t, d.JS, "m-nul", ingestBody("evt-nul", `train\u0000ing`))
	publishIngest(t, d.JS, "m-good", ingestBody("evt-good", "training"))

	testkit.Eventually(t, 10*time.Second, func() bool {
		res, err := s.Usage().ListUsageEvents(ctx, &meteringv1.ListUsageEventsRequest{RenterId: "r-001"})
		return err == nil && len(res.UsageEvents) == 1 && res.UsageEvents[0].Id == "evt-good"
	}, "the good message behind the poisoned one and the rejected event is recorded")
	var n int
	testkit.Eventually(t, 15*time.Second, func() bool {
		err := d.Pool.QueryRow(ctx, `select count(*) from metering.dead_letters`).Scan(&n)
		return err == nil && n == 2
	}, "the undecodable message and the rejected event's dead-lettered")
	rows, err := d.Pool.Query(ctx, `select message_id, consumer, subject, attempts, payload, error, first_seen_at <= last_seen_at
		from metering.dead_letters order by message_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type row struct {
		id, consumer, subject string
		attempts              int
		payload               []byte
		errText               string
		seenOrder             bool
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.consumer, &r.subject, &r.attempts, &r.payload, &r.errText, &r.seenOrder); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[0].id != "m-garbage" || got[1].id != "m-nul" || !strings.Contains(got[1].errText, "evt-nul: ") {
		t.Fatalf("dead letters %+v, want m-garbage, and m-nul naming its event", got)
	}
	if got[0].attempts != 1 || string(got[0].payload) != `{"events":[{"id":` || got[0].subject != "usage.ingest.p-001" || got[0].consumer != "metering-ingest" {
		t.Errorf("undecodable body kept as %+v; want its first delivery, payload and subject", got[0])
	}
	// The stream moved on: nothing left pending or unacknowledged.
	testkit.Eventually(t, 5*time.Second, func() bool {
		lags, err := natsx.ConsumerLags(ctx, d.JS, natsx.StreamUsage)
		if err != nil {
			return false
		}
		for _, l := range lags {
			if l.Consumer == "metering-ingest" {
				return l.Pending == 0 && l.AckPending == 0
			}
		}
		return false
	}, "metering-ingest drained")
}

// A node agent publishing on NATS reads no answer: an event rejected for a
// cause that a fix removes (here a renter not created yet) kept its usage
// only in a log line, and its message was acknowledged. Its message is now
// applied (the good event recorded) and kept in dead letters naming the
// rejection; replayed once the renter exists, the event is recorded and
// the good one, a duplicate, is not recorded twice. A message whose
// rejection no fix changes (an end before its start) is kept too, naming
// it, and its replay closes the letter.
func TestNATSIngestRejectedEventsAreKeptForReplay(t *testing.T) {
	t.Parallel()
	s, d := newService(t)
	ctx := context.Background()
	parties(t, s)
	body := `{"events":[` +
		`{"id":"evt-ok","lease_id":"l-ok","provider_id":"p-001","renter_id":"r-001","gpu_model":"H100","gpu_count":1,"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z"},` +
		`{"id":"evt-new","lease_id":"l-new","provider_id":"p-001","renter_id":"r-new","gpu_model":"H100","gpu_count":1,"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z"}]}`
	publishIngest(t, d.JS, "m-final", `{"events":[{"id":"evt-bad","lease_id":"l-bad","provider_id":"p-001","renter_id":"r-001","gpu_model":"H100","gpu_count":1,`+
		`"start_time":"2026-11-20T10:00:00Z","end_time":"2026-11-20T09:00:00Z"}]}`)
	publishIngest(t, d.JS, "m-mixed", body)
	var errText string
	testkit.Eventually(t, 15*time.Second, func() bool {
		return d.Pool.QueryRow(ctx, `select error from metering.dead_letters where message_id = 'm-mixed'`).Scan(&errText) == nil
	}, "the message with a rejected event dead-lettered")
	if !strings.Contains(errText, "1 of 2 usage events rejected") || !strings.Contains(errText, "evt-new: ") {
		t.Fatalf("dead letter error %q; want the rejected event named", errText)
	}
	// A rejection no fix changes is kept too, naming the event: the agent
	// learns of it nowhere else (it was logged, and the event gone).
	var finalText string
	testkit.Eventually(t, 15*time.Second, func() bool {
		return d.Pool.QueryRow(ctx, `select error from metering.dead_letters where message_id = 'm-final'`).Scan(&finalText) == nil
	}, "the message with an event rejected for good dead-lettered")
	if !strings.Contains(finalText, "1 of 1 usage events rejected for good") || !strings.Contains(finalText, "evt-bad: end_time before start_time") {
		t.Fatalf("dead letter error %q; want the event rejected for good named", finalText)
	}
	events := func(renter string) []string {
		t.Helper()
		res, err := s.Usage().ListUsageEvents(ctx, &meteringv1.ListUsageEventsRequest{RenterId: renter})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range res.UsageEvents {
			ids = append(ids, e.Id)
		}
		return ids
	}
	if got := events("r-001"); len(got) != 1 || got[0] != "evt-ok" {
		t.Fatalf("r-001's usage %v; want evt-ok recorded", got)
	}
	if _, err := s.Parties().CreateRenter(ctx, &meteringv1.CreateRenterRequest{RenterId: "r-new", Currency: "USD"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool.Exec(ctx, `update metering.dead_letters set replay_requested_at = now() where message_id = 'm-mixed'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		var replayed bool
		err := d.Pool.QueryRow(ctx, `select replayed_at is not null from metering.dead_letters where message_id = 'm-mixed'`).Scan(&replayed)
		return err == nil && replayed
	}, "the dead letter replayed")
	if got := events("r-new"); len(got) != 1 || got[0] != "evt-new" {
		t.Fatalf("r-new's usage after the replay %v; want evt-new", got)
	}
	if got := events("r-001"); len(got) != 1 {
		t.Fatalf("r-001's usage after the replay %v; want evt-ok once", got)
	}
	// Replaying the letter of a final rejection closes it: nothing more can
	// be applied.
	if _, err := d.Pool.Exec(ctx, `update metering.dead_letters set replay_requested_at = now() where message_id = 'm-final'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		var replayed bool
		err := d.Pool.QueryRow(ctx, `select replayed_at is not null from metering.dead_letters where message_id = 'm-final'`).Scan(&replayed)
		return err == nil && replayed
	}, "the final rejection's letter closed by its replay")
}

// The late-arrival limit is measured from when usage reached gpubill: a
// NATS message's stream time, kept with its dead letter. A message with a
// 34-day-old event for a renter not created yet is dead-lettered; replayed
// two days later, once the renter exists, the event is recorded (it was
// refused as older than the limit, a final rejection: the letter marked
// replayed and the usage never billed).
func TestReplayJudgesLateArrivalByTheMessagesArrival(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Now().UTC())
	s, d := newServiceAt(t, clk)
	ctx := context.Background()
	parties(t, s)
	start := clk.Now().Add(-34 * 24 * time.Hour).Truncate(time.Second)
	m := nats.NewMsg("usage.ingest.p-001")
	m.Data = []byte(`{"events":[{"id":"evt-34d","lease_id":"l-34d","provider_id":"p-001","renter_id":"r-later","gpu_model":"H100","gpu_count":1,` +
		`"start_time":"` + start.Format(time.RFC3339) + `","end_time":"` + start.Add(time.Hour).Format(time.RFC3339) + `"}]}`)
	m.Header.Set(jetstream.MsgIDHeader, "m-late")
	m.Header.Set(natsx.HeaderStoredAt, "2000-01-01T00:00:00Z") // a publisher's: not believed
	if _, err := d.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	var kept time.Time
	testkit.Eventually(t, 15*time.Second, func() bool {
		return d.Pool.QueryRow(ctx, `select (headers->'`+natsx.HeaderStoredAt+`'->>0)::timestamptz from metering.dead_letters where message_id = 'm-late'`).Scan(&kept) == nil
	}, "the message naming an unknown renter dead-lettered")
	if d := time.Since(kept); d < 0 || d > time.Minute {
		t.Fatalf("the letter keeps %s as the message's arrival; want the stream's time", kept)
	}
	clk.Advance(2 * 24 * time.Hour)
	if _, err := s.Parties().CreateRenter(ctx, &meteringv1.CreateRenterRequest{RenterId: "r-later", Currency: "USD"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool.Exec(ctx, `update metering.dead_letters set replay_requested_at = now() where message_id = 'm-late'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		var replayed bool
		err := d.Pool.QueryRow(ctx, `select replayed_at is not null or attempts > 1 from metering.dead_letters where message_id = 'm-late'`).Scan(&replayed)
		return err == nil && replayed
	}, "the replay's outcome")
	res, err := s.Usage().ListUsageEvents(ctx, &meteringv1.ListUsageEventsRequest{RenterId: "r-later"})
	if err != nil || len(res.UsageEvents) != 1 || res.UsageEvents[0].Id != "evt-34d" {
		t.Fatalf("r-later's usage after the replay: %v %v; want evt-34d recorded", res, err)
	}
}

// TestNATSIngestOfTooManyEventsIsDeadLettered: a message of more than
// metering.BatchEventsMax events is refused whole before anything decodes
// it (8 MiB of empty events, 2.8 million, took 1.4 GB to decode) and kept
// in dead letters at its first delivery, naming the limit, never dropped;
// the message after it is recorded.
func TestNATSIngestOfTooManyEventsIsDeadLettered(t *testing.T) {
	t.Parallel()
	s, d := newService(t)
	ctx := context.Background()
	parties(t, s)
	big := `{"events":[` + strings.Repeat(`{"id":"evt-many"},`, metering.BatchEventsMax) + `{"id":"evt-many"}]}`
	publishIngest(t, d.JS, "m-many", big)
	publishIngest(t, d.JS, "m-after", ingestBody("evt-after", "training"))

	testkit.Eventually(t, 10*time.Second, func() bool {
		res, err := s.Usage().ListUsageEvents(ctx, &meteringv1.ListUsageEventsRequest{RenterId: "r-001"})
		return err == nil && len(res.UsageEvents) == 1 && res.UsageEvents[0].Id == "evt-after"
	}, "the message after the too large one is recorded")
	var id, errText string
	var attempts int
	testkit.Eventually(t, 15*time.Second, func() bool {
		return d.Pool.QueryRow(ctx, `select message_id, attempts, error from metering.dead_letters`).Scan(&id, &attempts, &errText) == nil
	}, "the too large message dead-lettered")
	want := fmt.Sprintf("%d events in one message; at most %d", metering.BatchEventsMax+1, metering.BatchEventsMax)
	if id != "m-many" || attempts != 1 || !strings.Contains(errText, want) {
		t.Errorf("dead letter %s (attempts %d): %s; want m-many at its first delivery, %q", id, attempts, errText, want)
	}
}
