package ports

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
)

// pendingStop is a ledger database whose webhook queue holds one stop, due.
func pendingStop(t *testing.T) (*pgxpool.Pool, context.Context) {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	ctx := testkit.Context(t)
	if err := pg.Migrate(ctx, pool, postgres.Schema, migrations.For("ledger")); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.lease_webhooks (event_id, renter_id, kind, payload, status, next_attempt_at, created_at)
		values ('lease-r-1-CNY-1-stop_requested', 'r-1', 'stop_requested', '{}', 'pending', now(), now())`); err != nil {
		t.Fatal(err)
	}
	return pool, ctx
}

// deliverUntilSettled runs a deliverer to url (attempts at most, 1 ms
// apart) until the queued stop is no longer pending, and returns its status.
func deliverUntilSettled(t *testing.T, ctx context.Context, pool *pgxpool.Pool, url string, attempts int) string {
	t.Helper()
	d := &LeaseWebhookDeliverer{Queue: &postgres.LeaseWebhooks{Pool: pool}, URL: url, Secret: []byte("k"), Clock: clock.System{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), BackoffFirst: time.Millisecond, AttemptsMax: attempts}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	var status string
	testkit.Eventually(t, 10*time.Second, func() bool {
		err := pool.QueryRow(ctx, `select status from ledger.lease_webhooks`).Scan(&status)
		return err == nil && status != "pending"
	}, "delivery settled")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return status
}

// TestLeaseWebhookGivesUpCounted: a receiver that never answers 2xx gets
// the delivery AttemptsMax times, each failure counted as a retry and the
// last as failed, and the row ends failed (never silently dropped).
func TestLeaseWebhookGivesUpCounted(t *testing.T) {
	pool, ctx := pendingStop(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	retryBefore := testutil.ToFloat64(leaseHookAttempts.WithLabelValues("retry"))
	failedBefore := testutil.ToFloat64(leaseHookAttempts.WithLabelValues("failed"))
	if status := deliverUntilSettled(t, ctx, pool, srv.URL, 3); status != "failed" {
		t.Fatalf("delivery %s, want failed", status)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("receiver called %d times, want 3", n)
	}
	if got := testutil.ToFloat64(leaseHookAttempts.WithLabelValues("retry")) - retryBefore; got != 2 {
		t.Errorf("retries counted %v, want 2", got)
	}
	if got := testutil.ToFloat64(leaseHookAttempts.WithLabelValues("failed")) - failedBefore; got != 1 {
		t.Errorf("failures counted %v, want 1", got)
	}
}

// A receiver that redirects (an http → https hop at a load balancer, say)
// does not get the event: the redirect is the delivery's answer, not 2xx,
// and the delivery is retried. Followed, the POST went on as a GET without
// its body, and the 200 to that GET marked the event delivered.
func TestLeaseWebhookRedirectIsNotDelivered(t *testing.T) {
	pool, ctx := pendingStop(t)
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			gets.Add(1)
			return // 200
		}
		http.Redirect(w, r, "/moved", http.StatusFound)
	}))
	defer srv.Close()
	status := deliverUntilSettled(t, ctx, pool, srv.URL, 2)
	if status != "failed" || gets.Load() != 0 {
		t.Fatalf("status %s, %d GETs at the redirect's target; want failed, none", status, gets.Load())
	}
}

// An error whose text is cut at the stored length inside a character (a
// TLS certificate's non-ASCII names quoted in it, say) is stored: cut by
// bytes it was invalid UTF-8, Postgres refused the row's update, and the
// delivery was re-sent every lease, its attempts never counted, never given
// up.
func TestLeaseWebhookErrorCutInsideACharacter(t *testing.T) {
	pool, ctx := pendingStop(t)
	const url = "http://127.0.0.1:1/hook"
	// The error reads `Post "<url, redacted>": <refused>`: 调 from byte 199 to 201.
	prefix := len(`Post "http://127.0.0.1:1/xxxxx": `)
	refused := errors.New(strings.Repeat("a", 199-prefix) + "调度服务不可用")
	d := &LeaseWebhookDeliverer{Queue: &postgres.LeaseWebhooks{Pool: pool}, URL: url, Secret: []byte("k"), Clock: clock.System{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), BackoffFirst: time.Millisecond, AttemptsMax: 2,
		HTTP: &http.Client{Transport: roundTrip(func(*http.Request) (*http.Response, error) { return nil, refused })}}
	for range 2 {
		time.Sleep(5 * time.Millisecond) // past the backoff
		if _, err := d.deliverOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var attempts int
	var status, lastError string
	if err := pool.QueryRow(ctx, `select status, attempts, last_error from ledger.lease_webhooks`).Scan(&status, &attempts, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || attempts != 2 || !utf8.ValidString(lastError) || !strings.Contains(lastError, "aaaa") {
		t.Fatalf("status %s after %d attempts, last error %q; want failed after 2", status, attempts, lastError)
	}
}

// roundTrip is an http.RoundTripper of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A delivery whose claim lapsed while it was being sent (a slow receiver;
// another ledger replica claimed it again and delivered it) does not
// record its own outcome over that one's: it turned the delivered row back
// to pending, sent again after the renter's later events, and counted its
// attempts twice.
func TestLeaseWebhookLapsedClaimRecordsNothing(t *testing.T) {
	pool, ctx := pendingStop(t)
	q := &postgres.LeaseWebhooks{Pool: pool}
	t0 := time.Now()
	a, err := q.Claim(ctx, t0, leaseHookLease, leaseHookBatchMax)
	if err != nil || len(a) != 1 {
		t.Fatalf("first claim: %v %v", a, err)
	}
	later := t0.Add(leaseHookLease + time.Second)
	b, err := q.Claim(ctx, later, leaseHookLease, leaseHookBatchMax)
	if err != nil || len(b) != 1 {
		t.Fatalf("claim after the lease: %v %v", b, err)
	}
	if err := q.Finish(ctx, b[0], "delivered", 204, "", later, later); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, a[0], "pending", 0, "timeout", later.Add(time.Minute), later); err != nil {
		t.Fatal(err)
	}
	var status string
	var attempts int
	if err := pool.QueryRow(ctx, `select status, attempts from ledger.lease_webhooks`).Scan(&status, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "delivered" || attempts != 1 {
		t.Fatalf("status %s after %d attempts; want delivered after 1", status, attempts)
	}
}

// The scheduler's URL often carries its credential in its path or query
// (a bot's token): a delivery given up logs its error at WARN per retry
// and ERROR at the end and stores it in the row, and none of them quotes
// the path or the query. The HTTP client's own error (*url.Error) quotes
// the URL whole.
func TestLeaseWebhookErrorHidesURLSecrets(t *testing.T) {
	pool, ctx := pendingStop(t)
	const url = "https://127.0.0.1:9/x/SECRET?t=SECRET2" // port 9: refused
	// deliverOnce logs from this goroutine: a plain buffer does.
	var logs bytes.Buffer
	d := &LeaseWebhookDeliverer{Queue: &postgres.LeaseWebhooks{Pool: pool}, URL: url, Secret: []byte("k"), Clock: clock.System{},
		Log: slog.New(slog.NewTextHandler(&logs, nil)), BackoffFirst: time.Millisecond, AttemptsMax: 2,
		HTTP: &http.Client{Timeout: leaseHookTimeout, CheckRedirect: noRedirects}} // as Run's
	for range 2 {
		time.Sleep(5 * time.Millisecond) // past the backoff
		if _, err := d.deliverOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var status, lastError string
	if err := pool.QueryRow(ctx, `select status, last_error from ledger.lease_webhooks`).Scan(&status, &lastError); err != nil {
		t.Fatal(err)
	}
	// Guards: the delivery was given up with an error, logged twice.
	if status != "failed" || lastError == "" || !strings.Contains(logs.String(), "will retry") || !strings.Contains(logs.String(), "given up") {
		t.Fatalf("status %s, last error %q, logs:\n%s\nwant failed after a logged retry", status, lastError, logs.String())
	}
	if strings.Contains(lastError, "SECRET") {
		t.Errorf("stored error quotes the URL's secret: %q", lastError)
	}
	if strings.Contains(logs.String(), "SECRET") {
		t.Errorf("log quotes the URL's secret:\n%s", logs.String())
	}
	if !strings.Contains(lastError, "127.0.0.1:9") {
		t.Errorf("stored error %q does not name the host", lastError)
	}
}
