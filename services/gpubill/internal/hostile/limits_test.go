package hostile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/auth"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
)

// Mirrors of pkg/server's limits (the contract DEVELOPERS.md documents).
const (
	bodyBytesMax       = 1 << 20
	ingestBodyBytesMax = 8 << 20
)

// padded returns a JSON body of exactly n bytes that decodes to valid (an
// unknown field carries the padding).
func padded(valid string, n int) []byte {
	head := strings.TrimSuffix(valid, "}") + `,"pad":"`
	tail := `"}`
	return []byte(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
}

// TestBodyLimits: a body over its route's limit is a 413 with a gRPC status
// JSON body (code 8, RESOURCE_EXHAUSTED) and the request id, whether or not
// the client announced its length; ingest takes bodies other routes refuse.
func TestBodyLimits(t *testing.T) {
	byName := func(name string) route {
		i := slices.IndexFunc(writeRoutes, func(r route) bool { return r.name == name })
		if i < 0 {
			t.Fatalf("no write route %s", name)
		}
		return writeRoutes[i]
	}
	quote, ingest := byName("CreateQuote"), byName("IngestUsageEvents")
	tests := []struct {
		name    string
		r       route
		body    []byte
		chunked bool
		want    int
	}{
		{"quote at the limit", quote, padded(quote.body, bodyBytesMax), false, http.StatusOK},
		{"quote one byte over", quote, padded(quote.body, bodyBytesMax+1), false, http.StatusRequestEntityTooLarge},
		{"quote over, chunked", quote, padded(quote.body, bodyBytesMax+1), true, http.StatusRequestEntityTooLarge},
		{"ingest of 4 MiB", ingest, padded(ingest.body, 4<<20), false, http.StatusOK},
		{"ingest one byte over", ingest, padded(ingest.body, ingestBodyBytesMax+1), false, http.StatusRequestEntityTooLarge},
		{"ingest over, chunked", ingest, padded(ingest.body, ingestBodyBytesMax+1), true, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rd io.Reader = bytes.NewReader(tt.body)
			if tt.chunked {
				rd = io.MultiReader(rd) // hides the length: Transfer-Encoding chunked
			}
			req, err := http.NewRequest(tt.r.method, base+tt.r.url(tt.r.arg), rd)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tokens[tt.r.role])
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("HTTP %d, body: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tt.want {
				t.Fatalf("HTTP %d, want %d: %.300s", resp.StatusCode, tt.want, raw)
			}
			if tt.want != http.StatusRequestEntityTooLarge {
				return
			}
			a := answer{code: resp.StatusCode, raw: raw}
			if err := json.Unmarshal(raw, &a.status); err != nil || a.status.Code != 8 || a.requestID() == "" || a.requestID() != resp.Header.Get("X-Request-Id") {
				t.Fatalf("413 body %s (header id %q): want gRPC status JSON, code 8, the request id", raw, resp.Header.Get("X-Request-Id"))
			}
		})
	}
}

// TestInternalErrorTellsOnlyTheRequestID breaks the database under a read
// (the rate cards table renamed away): the client gets a 500 whose message is
// generic and carries the request id, in the body and the X-Request-Id
// header, and no word of the database's error; the log has the detail under
// that id.
func TestInternalErrorTellsOnlyTheRequestID(t *testing.T) {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `alter table pricing.rate_cards rename to rate_cards_away`); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := db.Exec(ctx, `alter table pricing.rate_cards_away rename to rate_cards`); err != nil {
			t.Fatal(err)
		}
	}()
	a := send(http.MethodGet, "/v1/rate-cards", tokens[auth.RoleFinance], nil)
	id := a.header.Get("X-Request-Id")
	switch {
	case a.code != http.StatusInternalServerError:
		t.Fatalf("HTTP %d: %s", a.code, a.raw)
	case id == "" || a.requestID() != id || !strings.Contains(a.status.Message, id):
		t.Fatalf("request id: header %q, body %s", id, a.raw)
	case strings.Contains(string(a.raw), "rate_cards") || strings.Contains(string(a.raw), "SQLSTATE") || strings.Contains(string(a.raw), "exist"):
		t.Fatalf("the database's error reached the client: %s", a.raw)
	}
	logged := logs.lines(id)
	if len(logged) == 0 || !strings.Contains(strings.Join(logged, "\n"), "rate_cards") {
		t.Fatalf("log lines with request id %s: %q; want the database error", id, logged)
	}
}

// TestEveryAnswerHasARequestID: success and refusal alike carry
// X-Request-Id; a refusal names it in its body too.
func TestEveryAnswerHasARequestID(t *testing.T) {
	ok := send(http.MethodGet, "/v1/renters/r-001", tokens[auth.RoleFinance], nil)
	bad := send(http.MethodPost, "/v1/quotes", tokens[auth.RoleFinance], []byte(`{"hours":"x"}`))
	noToken := send(http.MethodGet, "/v1/renters/r-001", "", nil)
	for _, a := range []answer{ok, bad, noToken} {
		if a.header.Get("X-Request-Id") == "" {
			t.Errorf("HTTP %d without X-Request-Id", a.code)
		}
	}
	for _, a := range []answer{bad, noToken} {
		if a.requestID() != a.header.Get("X-Request-Id") {
			t.Errorf("HTTP %d: body request id %q, header %q", a.code, a.requestID(), a.header.Get("X-Request-Id"))
		}
	}
	if ok.header.Get("X-Request-Id") == bad.header.Get("X-Request-Id") {
		t.Error("two requests share an id")
	}
}

// ingestEventsMax mirrors metering's domain.BatchEventsMax.
const ingestEventsMax = 5000

// cost is what a call cost the process (the stack is in process, so the
// server's share is counted): wall time, CPU time (user and system, of
// every goroutine, the stack's background work included) and bytes
// allocated, whether or not collected since.
type cost struct {
	took, cpu time.Duration
	allocated uint64
}

func (c cost) String() string {
	return fmt.Sprintf("%s (%s of CPU), %.1f MiB allocated", c.took, c.cpu, float64(c.allocated)/(1<<20))
}

// cheap reports whether c is within the bounds of a cheap call.
func (c cost) cheap() bool { return c.cpu < cheapCPUMax && c.allocated < cheapAllocatedMax }

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs call and reports its cost.
func measure(t *testing.T, call func()) cost {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cpu, start := cpuTime(t), time.Now()
	call()
	c := cost{took: time.Since(start), cpu: cpuTime(t) - cpu}
	runtime.ReadMemStats(&after)
	c.allocated = after.TotalAlloc - before.TotalAlloc
	return c
}

// Bounds of TestIngestOfManyEmptyEventsIsCheap. CPU time, not wall time:
// the 2-core machine the tests share is often loaded tenfold, and wall
// time then says little. The body itself is 8 MiB, read once by the
// server.
const (
	cheapCPUMax       = time.Second
	cheapAllocatedMax = 64 << 20
)

// preEncoded is a request's protobuf, sent as it is (preEncodedCodec).
type preEncoded []byte

// preEncodedCodec sends a preEncoded request's bytes as they are; anything
// else (the answers) goes through protobuf's codec.
type preEncodedCodec struct{ encoding.CodecV2 }

func (c preEncodedCodec) Marshal(v any) (mem.BufferSlice, error) {
	if p, ok := v.(preEncoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(p)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// TestIngestOfManyEmptyEventsIsCheap sends the ingest body that costs the
// most to decode per byte: empty events, `{}`, 2.8 million of them padded
// to just under the 8 MiB limit (4 million on the gRPC listener). Without
// a token it is a 401, with a finance token a 400 naming events (at most
// 5 000 per call), each for a few MiB and well under a second of CPU (the
// 8 MiB read, and the events counted): the server counts
// the events before it decodes anything and answers after the guard. It
// decoded them all first: 1.4 GB and 13 s of CPU for one call, before the
// 401 (metering's memory limit is 1 GiB).
func TestIngestOfManyEmptyEventsIsCheap(t *testing.T) {
	n := (ingestBodyBytesMax-len(`{"events":[{}]}`))/3 + 1
	body := []byte(`{"events":[{}` + strings.Repeat(`,{}`, n-1) + `]}`)
	if len(body) > ingestBodyBytesMax {
		t.Fatalf("body of %d bytes", len(body))
	}
	for _, tt := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"finance", tokens[auth.RoleFinance], http.StatusBadRequest},
	} {
		var a answer
		c := measure(t, func() { a = send(http.MethodPost, "/v1/usage-events", tt.token, body) })
		t.Logf("REST, %s: %d events (%d bytes): HTTP %d in %s", tt.name, n, len(body), a.code, c)
		if a.code != tt.want {
			t.Errorf("REST, %s: HTTP %d, want %d: %.300s", tt.name, a.code, tt.want, a.raw)
		}
		if tt.want == http.StatusBadRequest && (!names(a.fields(), "events") || !strings.Contains(a.status.Message, fmt.Sprintf("at most %d", ingestEventsMax))) {
			t.Errorf("REST, %s: fields %v, message %q; want events named, at most %d", tt.name, a.fields(), a.status.Message, ingestEventsMax)
		}
		if !c.cheap() {
			t.Errorf("REST, %s: %s; want under %s of CPU and %d MiB", tt.name, c, cheapCPUMax, cheapAllocatedMax>>20)
		}
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const events = 4_000_000 // two bytes each
	wire := preEncoded(bytes.Repeat([]byte{0x0a, 0x00}, events))
	codec := grpc.ForceCodecV2(preEncodedCodec{encoding.GetCodecV2(protocodec.Name)})
	for _, tt := range []struct {
		name, token string
		want        codes.Code
	}{
		{"no token", "", codes.Unauthenticated},
		{"finance", tokens[auth.RoleFinance], codes.InvalidArgument},
	} {
		opts := []grpc.CallOption{codec}
		if tt.token != "" {
			opts = append(opts, grpc.PerRPCCredentials(auth.BearerCreds(tt.token)))
		}
		var err error
		c := measure(t, func() {
			err = conn.Invoke(context.Background(), meteringv1.UsageService_IngestUsageEvents_FullMethodName, wire, &meteringv1.IngestUsageEventsResponse{}, opts...)
		})
		t.Logf("gRPC, %s: %d events (%d bytes): %v in %s", tt.name, events, len(wire), status.Code(err), c)
		st := status.Convert(err)
		if st.Code() != tt.want {
			t.Errorf("gRPC, %s: %v, want %v", tt.name, err, tt.want)
		}
		if tt.want == codes.InvalidArgument && !grpcNames(st, "events") {
			t.Errorf("gRPC, %s: %v; want events named", tt.name, err)
		}
		if !c.cheap() {
			t.Errorf("gRPC, %s: %s; want under %s of CPU and %d MiB", tt.name, c, cheapCPUMax, cheapAllocatedMax>>20)
		}
	}
}

// grpcNames reports whether st's BadRequest details name field.
func grpcNames(st *status.Status, field string) bool {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.FieldViolations {
				if v.Field == field {
					return true
				}
			}
		}
	}
	return false
}
