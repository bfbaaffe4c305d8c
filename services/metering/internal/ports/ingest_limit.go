package ports

import (
	"bytes"
	"encoding/json"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/server"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// An ingest request's events are counted before anything decodes it, and
// a request of more than domain.BatchEventsMax is refused undecoded: 8 MiB
// of `{},` is 2.8 million events, which protojson decoded in 1.4 GB and
// 13 s of CPU (metering's memory limit is 1 GiB) before the guard's 401
// or the use case's "at most 5000" (ingest). The counts cost O(bytes) and
// allocate nothing per event.
func init() {
	server.LimitWith[*meteringv1.IngestUsageEventsRequest](limitIngestWire, limitIngestJSON)
}

// tooManyEvents refuses n events in one call (or NATS message).
func tooManyEvents(n int, unit string) error {
	return apperr.Invalid("events", "%d events in one %s; at most %d", n, unit, domain.BatchEventsMax)
}

// limitIngestWire refuses an encoded ingest request of more than
// domain.BatchEventsMax events.
func limitIngestWire(b []byte) error {
	if n := wireEvents(b); n > domain.BatchEventsMax {
		return tooManyEvents(n, "call")
	}
	return nil
}

// limitIngestJSON refuses an ingest body of more than
// domain.BatchEventsMax events.
func limitIngestJSON(b []byte) error {
	if n := jsonEvents(b); n > domain.BatchEventsMax {
		return tooManyEvents(n, "call")
	}
	return nil
}

// wireEvents counts the events of an encoded IngestUsageEventsRequest (its
// field 1, length-delimited, wherever it occurs), as far as b parses:
// protobuf decodes that far before it finds the fault.
func wireEvents(b []byte) int {
	n := 0
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			break
		}
		b = b[k:]
		if k = protowire.ConsumeFieldValue(num, typ, b); k < 0 {
			break
		}
		b = b[k:]
		if num == ingestEvents && typ == protowire.BytesType {
			n++
		}
	}
	return n
}

// jsonEvents counts the elements of a JSON body's top-level "events" array
// (of each, if the key repeats) without decoding them: a scan of the bytes
// that skips strings and counts the commas at the array's own depth. A
// body that is no JSON object counts 0, and one that breaks off what came
// before the break: the decoder then names the fault. Nothing is
// allocated but for a key spelled with escapes.
func jsonEvents(b []byte) int {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0
	}
	n := 0
	for i++; ; i++ {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return n // the object's end, or no JSON
		}
		end := stringEnd(b, i+1)
		key := b[i:end]
		if i = skipSpace(b, end); i >= len(b) || b[i] != ':' {
			return n
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '[' && isEventsKey(key) {
			var c int
			c, i = arrayElements(b, i)
			n += c
		} else {
			i = skipValue(b, i)
		}
		if i = skipSpace(b, i); i >= len(b) || b[i] != ',' {
			return n
		}
	}
}

// eventsKeyEscapedMax is the longest spelling of "events" with escapes
// (\u0065 for each letter), quotes included.
const eventsKeyEscapedMax = 2 + 6*len("events")

// isEventsKey reports whether the quoted key names the events field
// (protojson reads escapes in keys; the field's JSON name is its proto
// name).
func isEventsKey(quoted []byte) bool {
	if string(quoted) == `"events"` {
		return true
	}
	if len(quoted) > eventsKeyEscapedMax || bytes.IndexByte(quoted, '\\') < 0 {
		return false
	}
	var key string
	return json.Unmarshal(quoted, &key) == nil && key == "events"
}

// skipSpace is the index of the first byte at or after i that is no JSON
// whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// stringEnd is the index just past the quote that closes the string whose
// text starts at i (len(b) when none does).
func stringEnd(b []byte, i int) int {
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		i += q
		k := i // an odd run of backslashes before it escapes the quote
		for k > 0 && b[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1
		}
		i++
	}
}

// skipValue is the index just past the JSON value starting at i (at the
// comma or closing bracket that follows a scalar).
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i = stringEnd(b, i+1)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return i
}

// arrayElements counts the elements of the JSON array whose '[' is at i,
// and returns the index just past its ']'.
func arrayElements(b []byte, i int) (n, next int) {
	if i = skipSpace(b, i+1); i < len(b) && b[i] == ']' {
		return 0, i + 1
	}
	n = 1
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i = stringEnd(b, i+1)
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return n, i + 1
			}
			depth--
		case ',':
			if depth == 0 {
				n++
			}
		}
		i++
	}
	return n, i
}
