package ports

import (
	"sort"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/server"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
)

// The REST gateway's JSON for the ledger's most frequent write: protojson
// decoded a CreateTransactionRequest and encoded the Transaction answered
// by reflection, ~30 µs of the 300-350 µs of machine CPU a REST write cost
// in the ledger_api bench (DEVELOPERS.md). TestCreateTransactionJSONIsProtojson and
// TestTransactionJSONIsProtojson hold both to protojson.
func init() {
	server.DecodeJSONWith(decodeCreateTransactionJSON)
	server.EncodeJSONWith(appendTransactionJSON)
}

// decodeCreateTransactionJSON decodes a CreateTransactionRequest body as
// protojson would, when it is an object of the request's fields (by proto
// or JSON name, each at most once), every value of the type its field
// takes, and every string without escapes or control characters and valid
// UTF-8. Anything else (effective_at, which protojson parses as a
// timestamp; an unknown field; null; an escape; trailing bytes) returns
// false with r unchanged, and protojson decodes or refuses the body.
func decodeCreateTransactionJSON(b []byte, r *ledgerv1.CreateTransactionRequest) bool {
	s := jsonScan{b: b}
	var key, desc string
	var md map[string]string
	var postings []*ledgerv1.Posting
	var seen [4]bool // idempotency_key, description, metadata, postings
	if !s.next('{') {
		return false
	}
	for first := true; ; first = false {
		name, done, ok := s.member(first)
		if !ok {
			return false
		}
		if done {
			break
		}
		f := -1
		switch string(name) {
		case "idempotency_key", "idempotencyKey":
			f = 0
		case "description":
			f = 1
		case "metadata":
			f = 2
		case "postings":
			f = 3
		}
		if f < 0 || seen[f] {
			return false
		}
		seen[f] = true
		switch f {
		case 0:
			key, ok = s.str()
		case 1:
			desc, ok = s.str()
		case 2:
			md, ok = s.stringMap()
		case 3:
			postings, ok = s.postings()
		}
		if !ok {
			return false
		}
	}
	if !s.end() {
		return false
	}
	proto.Reset(r)
	r.IdempotencyKey, r.Description, r.Metadata, r.Postings = key, desc, md, postings
	return true
}

// jsonScan reads the JSON decodeCreateTransactionJSON takes; every method
// reports false on anything else.
type jsonScan struct {
	b []byte
	i int
}

// ws skips JSON whitespace.
func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c, after whitespace, if it is next.
func (s *jsonScan) next(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (s *jsonScan) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// raw reads a string without escapes or control characters, in valid
// UTF-8, and returns its bytes (b's own).
func (s *jsonScan) raw() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	for j := s.i; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[s.i:j]
			s.i = j + 1
			return v, utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// str is raw as a string.
func (s *jsonScan) str() (string, bool) {
	v, ok := s.raw()
	if !ok {
		return "", false
	}
	return string(v), true
}

// member reads the next member's name and colon of an object whose '{'
// has been read (first: no member read yet); done when the object closes
// instead.
func (s *jsonScan) member(first bool) (name []byte, done, ok bool) {
	if s.next('}') {
		return nil, true, true
	}
	if !first && !s.next(',') {
		return nil, false, false
	}
	name, ok = s.raw()
	return name, false, ok && s.next(':')
}

// stringMap reads a map<string, string>: an object of strings, no name
// twice.
func (s *jsonScan) stringMap() (map[string]string, bool) {
	if !s.next('{') {
		return nil, false
	}
	m := map[string]string{}
	for first := true; ; first = false {
		k, done, ok := s.member(first)
		if !ok {
			return nil, false
		}
		if done {
			return m, true
		}
		if _, dup := m[string(k)]; dup {
			return nil, false
		}
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		m[string(k)] = v
	}
}

// postings reads an array of Posting objects.
func (s *jsonScan) postings() ([]*ledgerv1.Posting, bool) {
	if !s.next('[') {
		return nil, false
	}
	var ps []*ledgerv1.Posting
	if s.next(']') {
		return ps, true
	}
	for {
		p, ok := s.posting()
		if !ok {
			return nil, false
		}
		ps = append(ps, p)
		if s.next(']') {
			return ps, true
		}
		if !s.next(',') {
			return nil, false
		}
	}
}

// posting reads a Posting object (its fields' proto and JSON names are the
// same).
func (s *jsonScan) posting() (*ledgerv1.Posting, bool) {
	if !s.next('{') {
		return nil, false
	}
	p := &ledgerv1.Posting{}
	var seen [4]bool
	for first := true; ; first = false {
		name, done, ok := s.member(first)
		if !ok {
			return nil, false
		}
		if done {
			return p, true
		}
		var f *string
		k := -1
		switch string(name) {
		case "account":
			f, k = &p.Account, 0
		case "direction":
			f, k = &p.Direction, 1
		case "amount":
			f, k = &p.Amount, 2
		case "currency":
			f, k = &p.Currency, 3
		}
		if k < 0 || seen[k] {
			return nil, false
		}
		seen[k] = true
		if *f, ok = s.str(); !ok {
			return nil, false
		}
	}
}

// appendTransactionJSON appends t as protojson writes it with the
// gateway's options (proto names, every field emitted, fields in number
// order, map keys sorted, an unset timestamp as null), compact; false for a
// nil transaction or posting, a timestamp protojson refuses, or a string
// of invalid UTF-8 (which protojson refuses too).
func appendTransactionJSON(b []byte, t *ledgerv1.Transaction) ([]byte, bool) {
	if t == nil {
		return b, false // protojson decides what a nil message is written as
	}
	w := jsonWriter{b: b}
	w.raw('{')
	w.key("transaction_id", true)
	w.str(t.GetTransactionId())
	w.field("idempotency_key", t.GetIdempotencyKey())
	w.field("description", t.GetDescription())
	if !w.timestamp("effective_at", t.GetEffectiveAt()) || !w.timestamp("created_at", t.GetCreatedAt()) {
		return b, false
	}
	w.key("metadata", false)
	w.raw('{')
	keys := make([]string, 0, len(t.GetMetadata()))
	for k := range t.GetMetadata() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		w.sep(i)
		w.str(k)
		w.raw(':')
		w.str(t.GetMetadata()[k])
	}
	w.raw('}')
	w.key("postings", false)
	w.raw('[')
	for i, p := range t.GetPostings() {
		if p == nil {
			return b, false
		}
		w.sep(i)
		w.raw('{')
		w.key("account", true)
		w.str(p.GetAccount())
		w.field("direction", p.GetDirection())
		w.field("amount", p.GetAmount())
		w.field("currency", p.GetCurrency())
		w.raw('}')
	}
	w.raw(']')
	w.field("reverses", t.GetReverses())
	w.field("reversed_by", t.GetReversedBy())
	w.field("hash", t.GetHash())
	w.key("postings_withheld", false)
	w.b = strconv.AppendBool(w.b, t.GetPostingsWithheld())
	w.raw('}')
	return w.b, w.err == nil
}

// timestamp writes the field name and ts (null when unset); false when
// protojson would refuse ts (seconds outside years 1-9999, nanos outside
// [0, 1e9)).
func (w *jsonWriter) timestamp(name string, ts *timestamppb.Timestamp) bool {
	w.key(name, false)
	switch {
	case ts == nil:
		w.b = append(w.b, "null"...)
	case !ts.IsValid():
		return false
	default:
		w.time(ts.AsTime())
	}
	return true
}
