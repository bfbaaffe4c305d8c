package ports

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
)

// jsonStrings are the strings the tests below draw from: plain, empty,
// non-ASCII, and ones protojson escapes or refuses.
var jsonStrings = []string{"", "bank:client", "renter:r-001:wallet", "debit", "credit", "12.34", "USD", "FIN-7",
	"ünïcödé ✓", "say \"hi\"", `back\slash`, "tab\there", "ctl\x01", "del\x7f", "<b>&amp;</b>", "line\u2028sep",
	"bad \xff utf8", "\xc3"}

func pickString(r *rand.Rand) string { return jsonStrings[r.IntN(len(jsonStrings))] }

// requestJSON writes a CreateTransactionRequest body by hand: members in a
// random order under their proto or JSON names, random whitespace, strings
// as written (raw) or as encoding/json escapes them, and now and then
// something protojson treats otherwise: a repeated member, null, a number,
// an unknown member, effective_at, a truncated or extended body, a comma
// missing.
func requestJSON(r *rand.Rand) []byte {
	ws := func() string { return [...]string{"", "", " ", "\n\t", "\r\n  "}[r.IntN(5)] }
	str := func(s string) string {
		if r.IntN(4) == 0 {
			b, err := json.Marshal(s) // escapes <, >, & and invalid UTF-8
			if err != nil {
				panic(err) // a string always marshals
			}
			return string(b)
		}
		return `"` + s + `"` // raw: control characters and invalid UTF-8 as they are
	}
	odd := func() bool { return r.IntN(12) == 0 }
	value := func(v string) string {
		switch {
		case odd():
			return "null"
		case odd():
			return "12"
		}
		return v
	}
	obj := func(members []string) string {
		r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		return "{" + ws() + strings.Join(members, ws()+","+ws()) + ws() + "}"
	}
	member := func(name, v string) string { return str(name) + ws() + ":" + ws() + value(v) }
	var ms []string
	if r.IntN(5) > 0 {
		ms = append(ms, member([]string{"idempotency_key", "idempotencyKey"}[r.IntN(2)], str(fmt.Sprintf("key-%d", r.IntN(1000)))))
	}
	if r.IntN(3) > 0 {
		ms = append(ms, member("description", str(pickString(r))))
	}
	if r.IntN(3) > 0 {
		var kv []string
		for range r.IntN(4) {
			kv = append(kv, member(pickString(r), str(pickString(r))))
		}
		ms = append(ms, member("metadata", obj(kv)))
	}
	if r.IntN(5) > 0 {
		var ps []string
		for range r.IntN(4) {
			var fs []string
			for _, f := range []string{"account", "direction", "amount", "currency"} {
				if r.IntN(6) > 0 {
					fs = append(fs, member(f, str(pickString(r))))
				}
			}
			if odd() {
				fs = append(fs, member("account", str("again")))
			}
			ps = append(ps, value(obj(fs)))
		}
		ms = append(ms, member("postings", "["+ws()+strings.Join(ps, ws()+","+ws())+ws()+"]"))
	}
	if odd() {
		ms = append(ms, member([]string{"effective_at", "effectiveAt"}[r.IntN(2)], str("2026-12-01T10:00:00Z")))
	}
	if odd() {
		ms = append(ms, member([]string{"unknown", "Description", "idempotency_key", "idempotencyKey", "postings"}[r.IntN(5)], str("x")))
	}
	b := ws() + obj(ms) + ws()
	switch {
	case odd():
		b = b[:r.IntN(len(b)+1)]
	case odd():
		b += [...]string{"x", "{}", ",", "\x00"}[r.IntN(4)]
	case odd():
		b = strings.Replace(b, ",", " ", 1) // two values without a comma between
	}
	return []byte(b)
}

// decodeCreateTransactionJSON takes a body only as protojson (the
// gateway's options) reads it, leaves the request as it was when it
// declines, and takes the bodies clients send.
func TestCreateTransactionJSONIsProtojson(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	valid, taken := 0, 0
	for i := range 20000 {
		body := requestJSON(r)
		want := &ledgerv1.CreateTransactionRequest{}
		werr := protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(body, want)
		got := &ledgerv1.CreateTransactionRequest{IdempotencyKey: "before", EffectiveAt: timestamppb.New(time.Unix(1, 0)),
			Postings: []*ledgerv1.Posting{{Account: "before"}}}
		before := proto.Clone(got)
		ok := decodeCreateTransactionJSON(body, got)
		if werr == nil {
			valid++
		}
		switch {
		case ok && werr != nil:
			t.Fatalf("body %d %q: taken, protojson refuses it: %v", i, body, werr)
		case ok && !proto.Equal(got, want):
			t.Fatalf("body %d %q: decoded %v, protojson %v", i, body, got, want)
		case ok && (got.Metadata == nil) != (want.Metadata == nil):
			// The request hash tells an absent map (null) from an empty one ({}).
			t.Fatalf("body %d %q: metadata %#v, protojson %#v", i, body, got.Metadata, want.Metadata)
		case ok:
			taken++
		case !proto.Equal(got, before):
			t.Fatalf("body %d %q: declined but changed the request to %v", i, body, got)
		}
	}
	t.Logf("%d bodies protojson reads, %d of them taken", valid, taken)
	if taken < valid/4 {
		t.Fatalf("only %d of %d readable bodies taken", taken, valid)
	}
	// What clients send (protojson's own JSON, JSON names) is taken.
	req := &ledgerv1.CreateTransactionRequest{IdempotencyKey: "api-3-17", Description: "manual", Metadata: map[string]string{"ticket": "FIN-17"},
		Postings: []*ledgerv1.Posting{{Account: "bank:client", Direction: "debit", Amount: "12.34", Currency: "USD"},
			{Account: "renter:r-001:wallet", Direction: "credit", Amount: "12.34", Currency: "USD"}}}
	for _, o := range []protojson.MarshalOptions{{}, {UseProtoNames: true}, {Multiline: true}} {
		body, err := o.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got := &ledgerv1.CreateTransactionRequest{}
		if !decodeCreateTransactionJSON(body, got) || !proto.Equal(got, req) {
			t.Fatalf("%q: not taken as %v (got %v)", body, req, got)
		}
	}
}

// appendTransactionJSON writes what protojson writes (the gateway's
// options), up to the whitespace protojson may add, and declines what
// protojson refuses.
func TestTransactionJSONIsProtojson(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	ts := func() *timestamppb.Timestamp {
		switch r.IntN(8) {
		case 0:
			return nil
		case 1:
			return &timestamppb.Timestamp{Seconds: -62135596801} // before year 1
		case 2:
			return &timestamppb.Timestamp{Seconds: 1, Nanos: 1e9}
		}
		at := time.Unix(r.Int64N(253402300799), 0).Add(time.Duration([...]int64{0, 1e6, 1e3, 1, 123456789}[r.IntN(5)] * int64(r.IntN(999)+1)))
		return timestamppb.New(at)
	}
	mo := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	valid, taken := 0, 0
	for i := range 20000 {
		tx := &ledgerv1.Transaction{TransactionId: pickString(r), IdempotencyKey: pickString(r), Description: pickString(r),
			EffectiveAt: ts(), CreatedAt: ts(), Reverses: pickString(r), ReversedBy: pickString(r), Hash: pickString(r),
			PostingsWithheld: r.IntN(2) == 0}
		if r.IntN(2) == 0 {
			tx.Metadata = map[string]string{}
			for range r.IntN(4) {
				tx.Metadata[pickString(r)] = pickString(r)
			}
		}
		for range r.IntN(4) {
			tx.Postings = append(tx.Postings, &ledgerv1.Posting{Account: pickString(r), Direction: pickString(r), Amount: pickString(r), Currency: pickString(r)})
		}
		want, werr := mo.Marshal(tx)
		got, ok := appendTransactionJSON([]byte("prefix"), tx)
		if werr == nil {
			valid++
		}
		switch {
		case ok && werr != nil:
			t.Fatalf("transaction %d %v: written, protojson refuses it: %v", i, tx, werr)
		case !ok && werr == nil:
			continue // declined: protojson writes it
		case ok:
			taken++
			var compact bytes.Buffer
			if err := json.Compact(&compact, want); err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(got, []byte("prefix")) || string(got[len("prefix"):]) != compact.String() {
				t.Fatalf("transaction %d:\n got %s\nwant %s", i, got, compact.Bytes())
			}
		}
	}
	if _, ok := appendTransactionJSON(nil, nil); ok {
		t.Fatal("a nil transaction written, not left to protojson")
	}
	t.Logf("%d transactions protojson writes, %d of them written", valid, taken)
	if taken != valid {
		t.Fatalf("declined %d transactions protojson writes", valid-taken)
	}
}

// BenchmarkTransactionJSON: a bench-shaped CreateTransaction body decoded
// and its answer encoded, by the codec and by protojson.
func BenchmarkTransactionJSON(b *testing.B) {
	req := &ledgerv1.CreateTransactionRequest{IdempotencyKey: "api-3-1234", Description: "manual", Metadata: map[string]string{"ticket": "FIN-1234"},
		Postings: []*ledgerv1.Posting{{Account: "bank:client", Direction: "debit", Amount: "12.34", Currency: "USD"},
			{Account: "renter:r-001:wallet", Direction: "credit", Amount: "12.34", Currency: "USD"}}}
	body, err := protojson.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	now := timestamppb.New(time.Date(2026, 12, 4, 18, 0, 0, 123456000, time.UTC))
	tx := &ledgerv1.Transaction{TransactionId: "0193a3c2-5b1e-7c4d-9e2f-123456789abc", IdempotencyKey: req.IdempotencyKey, Description: req.Description,
		EffectiveAt: now, CreatedAt: now, Metadata: req.Metadata, Postings: req.Postings}
	b.Run("decode/codec", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var m ledgerv1.CreateTransactionRequest
			if !decodeCreateTransactionJSON(body, &m) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("decode/protojson", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var m ledgerv1.CreateTransactionRequest
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode/codec", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, ok := appendTransactionJSON(nil, tx); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("encode/protojson", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := (protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}).Marshal(tx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzCreateTransactionJSON: whatever the body, the decoder takes it only
// as protojson reads it and leaves the request untouched when it declines
// (`go test -run '^$' -fuzz FuzzCreateTransactionJSON ./services/ledger/internal/ports`).
func FuzzCreateTransactionJSON(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 9))
	for range 40 {
		f.Add(requestJSON(r))
	}
	for _, b := range []string{
		`{"idempotencyKey":"k","postings":[{"account":"bank:client","direction":"debit","amount":"1","currency":"USD"}]}`,
		`{"idempotency_key":"a","idempotencyKey":"b"}`, `{"postings":[{"account":"a","account":"b"}]}`,
		`{"metadata":{"k":"a","k":"b"}}`, `{"metadata":{}}`, `{"description":"x"} x`, `{"description":"x" "idempotencyKey":"y"}`,
		`{"description":"\u00e9"}`, `{"effectiveAt":"2026-12-01T00:00:00Z"}`, `{"description":null}`, "{\"description\":\"\xff\"}",
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want := &ledgerv1.CreateTransactionRequest{}
		werr := protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(body, want)
		got := &ledgerv1.CreateTransactionRequest{IdempotencyKey: "before", EffectiveAt: timestamppb.New(time.Unix(1, 0))}
		before := proto.Clone(got)
		switch ok := decodeCreateTransactionJSON(body, got); {
		case ok && werr != nil:
			t.Fatalf("%q: taken, protojson refuses it: %v", body, werr)
		case ok && (!proto.Equal(got, want) || (got.Metadata == nil) != (want.Metadata == nil)):
			t.Fatalf("%q: decoded %v, protojson %v", body, got, want)
		case !ok && !proto.Equal(got, before):
			t.Fatalf("%q: declined but changed the request to %v", body, got)
		}
	})
}
