package ports

import (
	"strings"
	"testing"
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
