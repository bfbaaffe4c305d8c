package hostile

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/auth"
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
	quote := writeRoutes[5]
	ingest := writeRoutes[3]
	if quote.name != "CreateQuote" || ingest.name != "IngestUsageEvents" {
		t.Fatal("writeRoutes order changed")
	}
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
