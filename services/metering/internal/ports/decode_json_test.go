package ports

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// A NATS body whose events do not all decode is taken event by event, as
// the REST body is: the bad one carries why, the others are whole (the
// whole message was dead-lettered for one wrong type). A body that is no
// {"events":[…]} is still refused.
func TestDecodeIngestJSONEventByEvent(t *testing.T) {
	evs, err := DecodeIngestJSON([]byte(`{"events":[{"id":"a","gpu_count":2},{"id":"b","gpu_count":"two"},null]}`))
	if err != nil || len(evs) != 3 {
		t.Fatalf("decode: %v %+v", err, evs)
	}
	if evs[0].ID != "a" || evs[0].GPUCount != 2 || evs[0].Malformed != "" {
		t.Errorf("event 0: %+v", evs[0])
	}
	t.Logf("malformed: %q, %q", evs[1].Malformed, evs[2].Malformed)
	if evs[1].ID != "b" || !strings.Contains(evs[1].Malformed, "gpu_count") || evs[2].Malformed == "" {
		t.Errorf("events 1, 2: %+v %+v; want them malformed, naming why", evs[1], evs[2])
	}
	for _, body := range []string{`{"events":{"id":"x"}}`, `[1]`, `{"events":[{"id":"a"}],"x":`} {
		if _, err := DecodeIngestJSON([]byte(body)); err == nil {
			t.Errorf("%s: decoded, want it refused whole", body)
		}
	}
}

// emptyEventsJSON is a body of n empty events (three bytes each: 2.8
// million in the REST API's 8 MiB).
func emptyEventsJSON(n int) []byte {
	return []byte(`{"events":[{}` + strings.Repeat(`,{}`, n-1) + `]}`)
}

// TestIngestJSONOfTooManyEventsIsRefusedUndecoded: an ingest body's events
// are counted before anything decodes it, and more than
// domain.BatchEventsMax refused as invalid events, on NATS (DecodeIngestJSON:
// the message is dead-lettered) and on the REST API (limitIngestJSON, which
// the gateway runs before decodeIngestJSON), without allocating per event.
// 2.8 million empty events in 8 MiB were decoded by protojson, 1.4 GB and
// 13 s of CPU, before the guard's 401 or the use case's "at most 5000".
func TestIngestJSONOfTooManyEventsIsRefusedUndecoded(t *testing.T) {
	if evs, err := DecodeIngestJSON(emptyEventsJSON(domain.BatchEventsMax)); err != nil || len(evs) != domain.BatchEventsMax {
		t.Fatalf("%d events: %d decoded, %v", domain.BatchEventsMax, len(evs), err)
	}
	if err := limitIngestJSON(emptyEventsJSON(domain.BatchEventsMax)); err != nil {
		t.Fatalf("%d events: %v", domain.BatchEventsMax, err)
	}
	n := (8<<20 - len(`{"events":[{}]}`)) / 3
	for _, b := range [][]byte{emptyEventsJSON(domain.BatchEventsMax + 1), emptyEventsJSON(n)} {
		count := jsonEvents(b)
		for name, check := range map[string]func() error{
			"NATS": func() error { _, err := DecodeIngestJSON(b); return err },
			"REST": func() error { return limitIngestJSON(b) },
		} {
			err := check()
			var inv *apperr.InvalidError
			if !errors.As(err, &inv) || inv.Violations[0].Field != "events" || !strings.Contains(err.Error(), fmt.Sprintf("%d events in one", count)) ||
				!strings.Contains(err.Error(), fmt.Sprintf("at most %d", domain.BatchEventsMax)) {
				t.Fatalf("%s, %d events: %v, want events refused", name, count, err)
			}
			if allocs := testing.AllocsPerRun(3, func() {
				if check() == nil {
					t.Fatal("passed")
				}
			}); allocs > 10 {
				t.Errorf("%s, %d events: %.0f allocations to refuse, want a few (none per event)", name, count, allocs)
			}
		}
	}
	if got := jsonEvents(emptyEventsJSON(n)); got != n {
		t.Errorf("jsonEvents of %d empty events = %d", n, got)
	}
}

// TestJSONEventsCountsAsProtojsonReads: the count is that of the elements
// protojson would decode as events: escaped keys, strings holding brackets,
// commas and escaped quotes, nested values and other fields do not fool
// it; a body that is no object, or whose events are elsewhere, counts 0.
func TestJSONEventsCountsAsProtojsonReads(t *testing.T) {
	for body, want := range map[string]int{
		`{"events":[]}`:                       0,
		` { "events" : [ ] } `:                0,
		`{"events":[{}]}`:                     1,
		"{\n\t\"events\": [ {} ,\r\n {} ]\n}": 2,
		`{"\u0065vents":[{},{},{}]}`:          3,
		`{"ev\u0065nts":[{}],"x":1}`:          1,
		`{"events":[{"id":"a,b]}[{\"",  "x":[1,[2,3],{"y":","}]},{}]}`:      2,
		`{"id":"\\","events":[{"id":"\\\"],"},null,1,"s",[1,2]]}`:           5,
		`{"pad":{"events":[{},{}]},"more":[{"events":[{}]}],"events":[{}]}`: 1,
		`{"events":[{}],"events":[{},{}]}`:                                  3, // protojson refuses the repeat: counted as sent
		`{"eventsx":[{},{}],"Events":[{}]}`:                                 0,
		`[{"events":[{}]}]`:                                                 0,
		`"events"`:                                                          0,
		``:                                                                  0,
		`{"events":[{},{},{`:                                                3, // broken off: what came before
		`{"events":[{},{"id":"unterminated`:                                 2,
		`{"a":"\"","events":[{},{}]}`:                                       2,
	} {
		if got := jsonEvents([]byte(body)); got != want {
			t.Errorf("jsonEvents(%s) = %d, want %d", body, got, want)
		}
	}
}
