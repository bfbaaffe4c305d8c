package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/testkit"
)

type letterJSON struct {
	ID, Service, Consumer, Status, Error string
	MessageID                            string `json:"message_id"`
	Attempts                             int
	Payload                              []byte
}

type listJSON struct {
	DeadLetters   []letterJSON `json:"dead_letters"`
	NextPageToken string       `json:"next_page_token"`
}

// TestDeadLettersREST: GET /v1/ops/dead-letters lists the letters of every
// service the server covers (as gpubill dev does), page by page, with ids
// that name the owning service; finance and admin only. POST
// /v1/ops/dead-letters/{id}:replay reapplies one through its consumer's
// handler after a fix and answers it replayed; a second replay answers it
// as it is and applies nothing.
func TestDeadLettersREST(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, js, sinkA := setup(t)
	if _, err := pool.Exec(ctx, strings.ReplaceAll(ddl, "dlt", "dlu")); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sinkB := deadletter.New(pool, "dlu", log)
	// Three letters in dlt, two in dlu.
	for _, id := range []string{"a1", "a2", "a3"} {
		if err := sinkA.PutLetter(ctx, pool, deadletter.Letter{Consumer: "c", MessageID: id, Subject: "t.x", Payload: []byte(id)}, 1, errors.New("boom "+id)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"b1", "b2"} {
		if err := sinkB.PutLetter(ctx, pool, deadletter.Letter{Consumer: "c", MessageID: id, Subject: "t.y", Payload: []byte(id)}, 2, errors.New("bang")); err != nil {
			t.Fatal(err)
		}
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	srv, err := server.Start(ctx, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: secret, Log: log,
		Services: []server.Service{deadletter.NewServer(sinkB, sinkA)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	call := func(role, method, path string) (int, []byte) {
		t.Helper()
		tok := testkit.Token(t, secret, role, "someone", time.Hour)
		req, err := http.NewRequest(method, "http://"+srv.HTTPAddr+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, b
	}

	// Pages of two: dlt first (services in name order), then dlu.
	var ids []string
	token := ""
	for page := 0; page < 5; page++ {
		code, body := call(auth.RoleFinance, "GET", "/v1/ops/dead-letters?page_size=2&page_token="+token)
		if code != http.StatusOK {
			t.Fatalf("list: %d %s", code, body)
		}
		var l listJSON
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		for _, d := range l.DeadLetters {
			ids = append(ids, d.ID+"/"+d.MessageID+"/"+string(d.Payload))
		}
		if token = l.NextPageToken; token == "" {
			break
		}
	}
	if got := strings.Join(ids, " "); got != "dlt-1/a1/a1 dlt-2/a2/a2 dlt-3/a3/a3 dlu-1/b1/b1 dlu-2/b2/b2" {
		t.Errorf("pages listed %s", got)
	}
	if code, body := call(auth.RoleAdmin, "GET", "/v1/ops/dead-letters?service=dlu&status=dead"); code != http.StatusOK || strings.Count(string(body), `"service":"dlu"`) != 2 || strings.Contains(string(body), `"dlt"`) {
		t.Errorf("filtered by service: %d %s", code, body)
	}
	for _, role := range []string{auth.RoleRenter, auth.RoleProvider, auth.RoleAuditor, auth.RoleMeter} {
		if code, _ := call(role, "GET", "/v1/ops/dead-letters"); code != http.StatusForbidden {
			t.Errorf("%s listed dead letters: %d, want 403", role, code)
		}
		if code, _ := call(role, "POST", "/v1/ops/dead-letters/dlt-1:replay"); code != http.StatusForbidden {
			t.Errorf("%s replayed a dead letter: %d, want 403", role, code)
		}
	}
	for _, give := range []string{"nope-1", "dlt-x", "dlt-99"} {
		if code, _ := call(auth.RoleFinance, "POST", "/v1/ops/dead-letters/"+give+":replay"); code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("replay of %s: %d, want 400 or 404", give, code)
		}
	}
	// The number is written as the letter's id reads: another spelling of
	// dlt-1 is a 400 and asks nothing of dlt-1 (its replay was requested).
	for _, give := range []string{"dlt-+1", "dlt-01", "dlt-00000000000000000001", "dlt-1%20"} {
		if code, body := call(auth.RoleFinance, "POST", "/v1/ops/dead-letters/"+give+":replay"); code != http.StatusBadRequest {
			t.Errorf("replay of %s: %d, want 400: %s", give, code, body)
		}
	}
	var requested bool
	if err := pool.QueryRow(ctx, `select replay_requested_at is not null from dlt.dead_letters where id = 1`).Scan(&requested); err != nil || requested {
		t.Errorf("dlt-1 replay requested by another spelling of its id: %v (%v)", requested, err)
	}

	// dlt's consumer "c" runs with a handler that fails until fixed.
	var fixed atomic.Bool
	var applied atomic.Int32
	h := func(ctx context.Context, msgs []jetstream.Msg) error {
		if !fixed.Load() {
			return errors.New("still broken")
		}
		// A slow apply: the replay call must answer its outcome, not the
		// row as it reads while the consumer applies it ("dead").
		time.Sleep(1500 * time.Millisecond)
		applied.Add(int32(len(msgs)))
		return nil
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T2", Subjects: []string{"t2.>"}}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- natsx.Consume(cctx, js, log, natsx.ConsumerSpec{Stream: "T2", Durable: "c", DeadLetters: sinkA}, h)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()

	replay := func() letterJSON {
		t.Helper()
		code, body := call(auth.RoleFinance, "POST", "/v1/ops/dead-letters/dlt-2:replay")
		if code != http.StatusOK {
			t.Fatalf("replay: %d %s", code, body)
		}
		var d letterJSON
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := replay(); d.Status != "dead" || d.Error != "still broken" || d.Attempts != 2 || applied.Load() != 0 {
		t.Errorf("replay before the fix: %+v, applied %d", d, applied.Load())
	}
	fixed.Store(true)
	if d := replay(); d.Status != "replayed" || applied.Load() != 1 {
		t.Errorf("replay after the fix: %+v, applied %d", d, applied.Load())
	}
	// The replay sent again (a client's retry after a lost answer) answers
	// the replayed letter and applies nothing: it was a 400.
	if d := replay(); d.Status != "replayed" || d.Attempts != 2 {
		t.Errorf("second replay: %+v, want the replayed letter as it was", d)
	}
	if applied.Load() != 1 {
		t.Errorf("applied %d times, want 1", applied.Load())
	}
}
