package hostile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestEveryWriteRouteRefusesBadInputByField walks every write route with, in
// each field of a body the route accepts: a NUL byte, invalid UTF-8, a value
// of the wrong JSON type, and, where the field has a closed set of values, an
// unknown value; in each path parameter a NUL byte and invalid UTF-8. Each is
// a 400 whose BadRequest details name the field, never a 5xx; inside an
// element of a route's items (usage events) it may instead be a 200 that
// rejects that element alone, naming the field.
func TestEveryWriteRouteRefusesBadInputByField(t *testing.T) {
	for _, r := range writeRoutes {
		t.Run(r.name, func(t *testing.T) {
			// The valid body is accepted (or refused for a reason that is
			// not its shape: a replay of a finished close, a missing id).
			if a := send(r.method, r.url(r.arg), tokens[r.role], []byte(r.body)); a.code >= 500 || a.code == http.StatusBadRequest {
				t.Fatalf("valid body: HTTP %d %s", a.code, a.raw)
			}
			for _, c := range badInputs(t, r) {
				a := send(r.method, r.url(c.arg), tokens[r.role], c.body)
				if r.rejectsItem(a, c.field) {
					continue
				}
				if a.code != http.StatusBadRequest || !names(a.fields(), c.field) {
					t.Errorf("%s in %s: HTTP %d, fields %v, want 400 naming %s: %.300s", c.kind, c.field, a.code, a.fields(), c.field, a.raw)
				}
			}
		})
	}
}

// rejectsItem: a is a 200 rejecting the element of r's items that field is
// in, its reason naming the field (the leaf's name).
func (r route) rejectsItem(a answer, field string) bool {
	m := regexp.MustCompile(`^` + regexp.QuoteMeta(r.items) + `\[(\d+)\]\.(.+)$`).FindStringSubmatch(field)
	if r.items == "" || m == nil || a.code != http.StatusOK {
		return false
	}
	var got struct {
		Rejected []struct {
			Index  int    `json:"index"`
			Reason string `json:"reason"`
		} `json:"rejected"`
	}
	if json.Unmarshal(a.raw, &got) != nil {
		return false
	}
	for _, rej := range got.Rejected {
		if strconv.Itoa(rej.Index) == m[1] && strings.Contains(rej.Reason, m[2]) {
			return true
		}
	}
	return false
}

// TestMillionDigitDecimalIsCheap sends a 1 000 000-digit decimal in every
// decimal field of every write route: each is a 400 naming the field, in
// milliseconds (parsing it whole would take seconds of CPU). An exponent of
// 999 999 999 is refused the same way.
func TestMillionDigitDecimalIsCheap(t *testing.T) {
	huge := "1" + strings.Repeat("0", 999_999)
	for _, r := range writeRoutes {
		for _, f := range r.decimals {
			for _, v := range []string{huge, "1e999999999", "-0." + strings.Repeat("0", 5000) + "1"} {
				body := freshen(t, mutate(t, r.body, f, v), f)
				start := time.Now()
				a := send(r.method, r.url(r.arg), tokens[r.role], body)
				took := time.Since(start)
				if a.code != http.StatusBadRequest || !names(a.fields(), f) {
					t.Errorf("%s %s = %.20s…: HTTP %d, fields %v: %.300s", r.name, f, v, a.code, a.fields(), a.raw)
				}
				// A generous bound for a loaded 2-core machine: the point is
				// milliseconds, not the seconds an unbounded parse costs.
				if took > time.Second {
					t.Errorf("%s %s = %.20s…: took %s", r.name, f, v, took)
				}
				t.Logf("%s %s (%d bytes): HTTP %d in %s", r.name, f, len(body), a.code, took)
			}
		}
	}
}

type badInput struct {
	kind, field, arg string
	body             []byte
}

// replayKeys are the body fields that make a write idempotent: each bad
// input gets fresh values, so a replay of the valid body's answer cannot hide
// a check.
var replayKeys = []string{"idempotency_key", "external_ref", "rate_card_id", "statement_id"}

var freshSeq int

// freshen gives body fresh values in its replay keys (but field). body must
// be valid UTF-8: encoding/json would replace a bad byte.
func freshen(t *testing.T, body []byte, field string) []byte {
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range replayKeys {
		if _, ok := doc[k]; ok && k != field {
			freshSeq++
			body = mutate(t, string(body), k, fmt.Sprintf("fresh-%d", freshSeq))
		}
	}
	return body
}

// badInputs derives the bad inputs of r from its valid body.
func badInputs(t *testing.T, r route) []badInput {
	var out []badInput
	fresh := func() string { return string(freshen(t, []byte(r.body), "")) }
	var doc any
	if err := json.Unmarshal([]byte(r.body), &doc); err != nil {
		t.Fatal(err)
	}
	for _, l := range leaves(doc, "") {
		if _, ok := l.v.(string); ok {
			out = append(out,
				badInput{"NUL byte", l.path, r.arg, mutate(t, fresh(), l.path, "ab\x00cd")},
				badInput{"invalid UTF-8", l.path, r.arg, invalidUTF8(t, fresh(), l.path)},
				badInput{"wrong type (number)", l.path, r.arg, mutate(t, fresh(), l.path, 12345)})
		} else {
			out = append(out, badInput{"wrong type (string)", l.path, r.arg, mutate(t, fresh(), l.path, "not-a-number")})
		}
	}
	if m, ok := doc.(map[string]any); ok {
		for k, v := range m {
			switch v.(type) {
			case map[string]any, []any:
				out = append(out, badInput{"wrong type (number for a container)", k, r.arg, mutate(t, fresh(), k, 7)})
			}
		}
	}
	for _, f := range r.enums {
		out = append(out, badInput{"unknown value", f, r.arg, mutate(t, fresh(), f, "bogus-value")})
	}
	if r.param != "" {
		out = append(out,
			badInput{"NUL byte in path", r.param, r.arg + "\x00", []byte(fresh())},
			badInput{"invalid UTF-8 in path", r.param, r.arg + "\xff", []byte(fresh())})
	}
	return out
}

type leaf struct {
	path string
	v    any
}

func leaves(v any, path string) []leaf {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out []leaf
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			out = append(out, leaves(x[k], p)...)
		}
		return out
	case []any:
		var out []leaf
		for i, e := range x {
			out = append(out, leaves(e, fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	return []leaf{{path, v}}
}

var pathStep = regexp.MustCompile(`([^.\[\]]+)|\[(\d+)\]`)

// mutate returns body with the value at path ("postings[0].amount") set to v.
func mutate(t *testing.T, body, path string, v any) []byte {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	steps := pathStep.FindAllStringSubmatch(path, -1)
	cur := doc
	for i, s := range steps {
		last := i == len(steps)-1
		if s[2] != "" {
			n, err := strconv.Atoi(s[2])
			if err != nil {
				t.Fatalf("index %q in %s: %v", s[2], path, err)
			}
			arr := cur.([]any)
			if last {
				arr[n] = v
			} else {
				cur = arr[n]
			}
			continue
		}
		obj := cur.(map[string]any)
		if last {
			obj[s[1]] = v
		} else {
			cur = obj[s[1]]
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// invalidUTF8 sets the string at path to one holding a lone 0xFF byte (JSON
// encoders refuse to write it, so it is spliced in).
func invalidUTF8(t *testing.T, body, path string) []byte {
	const marker = "@@INVALID-UTF8@@"
	b := mutate(t, body, path, "ab"+marker)
	return bytes.Replace(b, []byte(marker), []byte{0xff}, 1)
}

var mapKey = regexp.MustCompile(`\["([^"]*)"\]`)

// names reports whether one of fields names want (a body field may be named
// from the request message, "provider.name" for the PATCH body's "name", and
// a map entry as metadata["k"] or metadata.k).
func names(fields []string, want string) bool {
	norm := func(s string) string { return mapKey.ReplaceAllString(s, ".$1") }
	w := norm(want)
	for _, f := range fields {
		f = norm(f)
		if f == w || strings.HasSuffix(f, "."+w) {
			return true
		}
	}
	return false
}
