package ports

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/subjects"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// Node agents publish the REST body to usage.ingest.{provider}.
const (
	ingestDurable   = "metering-ingest"
	ingestFetchMax  = 64
	ingestFetchWait = 100 * time.Millisecond
	ingestBodyMax   = 8 << 20
)

var decodeOpts = protojson.UnmarshalOptions{DiscardUnknown: true}

// DecodeIngestJSON decodes the ingest body {"events":[…]} as the REST API
// accepts it (proto field names, unknown fields ignored, at most
// domain.BatchEventsMax events, counted before anything is decoded: a
// message of more is dead-lettered as poison, as one too large is).
func DecodeIngestJSON(b []byte) ([]domain.EventInput, error) {
	if len(b) > ingestBodyMax {
		return nil, fmt.Errorf("body of %d bytes; at most %d", len(b), ingestBodyMax)
	}
	if n := jsonEvents(b); n > domain.BatchEventsMax {
		return nil, tooManyEvents(n, "message")
	}
	var req meteringv1.IngestUsageEventsRequest
	if err := decodeOpts.Unmarshal(b, &req); err != nil {
		if !decodeEventByEvent(b, &req) {
			return nil, fmt.Errorf("malformed ingest body: %w", err)
		}
	}
	return EventInputs(req.Events), nil
}

func init() { server.DecodeJSONWith(decodeIngestJSON) }

// decodeIngestJSON is the REST body's decoding: protojson's, or when that
// fails, decodeEventByEvent's. The gateway has counted the body's events
// first (limitIngestJSON): it decodes at most domain.BatchEventsMax.
func decodeIngestJSON(b []byte, req *meteringv1.IngestUsageEventsRequest) bool {
	if decodeOpts.Unmarshal(b, req) == nil {
		return true
	}
	proto.Reset(req)
	return decodeEventByEvent(b, req)
}

// decodeEventByEvent decodes a body {"events":[…]} whose events do not all
// decode, one event at a time: an event that does not decode (a field of
// the wrong type, null) is kept with the reason in its malformed field and
// its id when one can be read, and is rejected alone (DESIGN §2: malformed
// fields are a per-event rejection; one wrong type refused the whole
// batch, and on NATS dead-lettered the whole message). A body that is no
// such object, or whose events all decode (the fault is elsewhere), returns
// false with req unchanged: the request is refused whole, naming the fault.
func decodeEventByEvent(b []byte, req *meteringv1.IngestUsageEventsRequest) bool {
	var body map[string]json.RawMessage
	if json.Unmarshal(b, &body) != nil {
		return false
	}
	var raws []json.RawMessage
	if json.Unmarshal(body["events"], &raws) != nil {
		return false
	}
	evs := make([]*meteringv1.UsageEventInput, len(raws))
	bad := false
	for i, raw := range raws {
		ev := &meteringv1.UsageEventInput{}
		if err := decodeOpts.Unmarshal(raw, ev); err != nil {
			var id struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(raw, &id) != nil {
				id.ID = "" // not an object, or its id no string: the rejection names none
			}
			ev = &meteringv1.UsageEventInput{Id: id.ID, Malformed: apperr.Clip(eventFault(raw, err), 200)}
			bad = true
		}
		evs[i] = ev
	}
	if !bad {
		return false
	}
	req.Events = evs
	return true
}

// eventFault is why one event's JSON (raw) did not decode, naming the
// field as the body spells it ("gpu_count: invalid value for int32 field
// gpuCount: "two""; a fault of the whole event names none).
func eventFault(raw []byte, err error) string {
	field, reason := server.BodyFault(raw, err.Error())
	if field == "body" {
		return reason
	}
	return field + ": " + reason
}

// IngestConsumer records usage that node agents publish on NATS through the
// same use case as the REST API; the per-event id makes redelivery harmless.
// A body that cannot be decoded, or that the use case refuses whole, is
// dead-lettered, never dropped; so is a message with events rejected for a
// cause a fix removes, once its other events are recorded (handle).
type IngestConsumer struct {
	App         *app.App
	JS          jetstream.JetStream
	Log         *slog.Logger
	DeadLetters natsx.DeadLetters
}

// Run consumes until ctx ends.
func (c *IngestConsumer) Run(ctx context.Context) error {
	return natsx.Consume(ctx, c.JS, c.Log, natsx.ConsumerSpec{
		Stream: natsx.StreamUsage, Durable: ingestDurable, FilterSubjects: []string{subjects.UsageIngest.All()},
		BatchMax: ingestFetchMax, MaxWait: ingestFetchWait, DeadLetters: c.DeadLetters,
	}, c.handle)
}

func (c *IngestConsumer) handle(ctx context.Context, msgs []jetstream.Msg) error {
	// Retrying cannot fix a malformed body: it is poison, named before any
	// message of the batch is applied.
	bodies := make([][]domain.EventInput, len(msgs))
	var poison natsx.PoisonError
	for i, m := range msgs {
		evs, err := DecodeIngestJSON(m.Data())
		if err != nil {
			poison.Add(natsx.MsgID(m), err)
		}
		bodies[i] = evs
	}
	if len(poison.ByID) > 0 {
		return &poison
	}
	// A node agent publishing here reads no answer. An event rejected for a
	// cause that passes (a write conflicting on its lease) is retried: the
	// message is delivered again, its recorded events then duplicates. A
	// message with an event rejected for a cause a fix removes (a GPU
	// model or party not known yet, an end ahead of the clock) is applied
	// (its other events recorded) and kept in dead letters with the
	// rejections, to replay after the fix; the rest of the batch is applied
	// again, as duplicates. Rejections no fix or retry changes (malformed,
	// overlapping, too late, another body under a recorded id) are counted
	// by class, as on the REST path, and the message is kept in dead
	// letters too, naming them: the agent that sent it learns of them
	// nowhere else (they were logged, the first one only, and the events
	// were gone). A replay of such a letter closes it: what could be
	// applied is, and the rest is final. (Every rejected event was once
	// logged and its message acknowledged: usage a fix would have billed,
	// and usage refused only by a conflicting write, was lost.)
	var fixable natsx.PoisonError
	for i, m := range msgs {
		rej, err := c.ingest(ctx, m, bodies[i])
		if err != nil {
			return err
		}
		if len(rej) == 0 {
			continue
		}
		c.Log.Warn("usage events rejected", "subject", m.Subject(), "msg_id", natsx.MsgID(m),
			"events", len(bodies[i]), "rejected", len(rej), "first", rej[0].Reason)
		switch rejectionKind(rej) {
		case rejectionPasses:
			return fmt.Errorf("ingest %s: %w", m.Subject(), rejections(len(bodies[i]), rej))
		case rejectionFixable:
			fixable.Add(natsx.MsgID(m), rejections(len(bodies[i]), rej))
		case rejectionFinal:
			if _, err := m.Metadata(); err == nil { // delivered by the stream, not a replayed letter
				fixable.Add(natsx.MsgID(m), finalRejections(len(bodies[i]), rej))
			}
		}
	}
	if len(fixable.ByID) > 0 {
		return &fixable
	}
	return nil
}

// ingest records a message's events (evs) and answers their rejections.
func (c *IngestConsumer) ingest(ctx context.Context, m jetstream.Msg, evs []domain.EventInput) ([]app.Rejection, error) {
	opt := app.IngestOptions{OnlyProvider: strings.TrimPrefix(m.Subject(), subjects.UsageIngest.Prefix())}
	opt.Arrived, _ = natsx.StoredAt(m) // unknown (an old letter): now
	// One call: DecodeIngestJSON refused a message of more than
	// domain.BatchEventsMax events before decoding it.
	res, err := c.App.Ingest(ctx, evs, opt)
	var inv *apperr.InvalidError
	if errors.As(err, &inv) {
		return nil, natsx.Poison(natsx.MsgID(m), err) // refused whole
	}
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", m.Subject(), err)
	}
	return res.Rejected, nil
}

// What the rejections of a message call for.
const (
	rejectionFinal   = iota // counted and kept in dead letters: no fix or retry changes them
	rejectionFixable        // dead-lettered, to replay after a fix
	rejectionPasses         // delivered again
)

// rejectionKind is what a message's rejections call for: the most that any
// of them does.
func rejectionKind(rej []app.Rejection) int {
	kind := rejectionFinal
	for _, r := range rej {
		switch app.RejectionClass(r.Reason) {
		case "conflict_retry":
			return rejectionPasses
		case "unknown_gpu_model", "unknown_party", "in_future":
			kind = rejectionFixable
		}
	}
	return kind
}

// rejectionsShown is how many rejections a dead letter's error names.
const rejectionsShown = 5

// rejections is a dead letter's error for a message of n events of which
// rej were rejected, for a cause a fix removes.
func rejections(n int, rej []app.Rejection) error {
	return fmt.Errorf("%d of %d usage events rejected (the others recorded; replay once the cause is fixed): %s",
		len(rej), n, rejectionList(rej))
}

// finalRejections is a dead letter's error for a message of n events of
// which rej were rejected for good.
func finalRejections(n int, rej []app.Rejection) error {
	return fmt.Errorf("%d of %d usage events rejected for good (the others recorded; no fix changes these: "+
		"the agent must send them corrected under new ids; a replay closes this letter): %s", len(rej), n, rejectionList(rej))
}

// rejectionList names the first rejectionsShown rejections and counts the rest.
func rejectionList(rej []app.Rejection) string {
	parts := make([]string, 0, rejectionsShown+1)
	for i, r := range rej {
		if i == rejectionsShown {
			parts = append(parts, fmt.Sprintf("and %d more", len(rej)-i))
			break
		}
		parts = append(parts, r.ID+": "+r.Reason)
	}
	return strings.Join(parts, "; ")
}
