package ports

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// deliveryRig is a deliverer over a migrated database of its own, with one
// webhook (wh-1 of p-1) posting to a receiver that always answers 503, and
// a manual clock.
type deliveryRig struct {
	pool  *pgxpool.Pool
	store *postgres.Store
	clk   *clock.Manual
	d     *Deliverer
	hits  int
}

func newDeliveryRig(t *testing.T, t0 time.Time) *deliveryRig {
	t.Helper()
	ctx := context.Background()
	pool, _ := testkit.NewPool(t)
	if err := pg.Migrate(ctx, pool, postgres.Schema, migrations.For(postgres.Schema)); err != nil {
		t.Fatal(err)
	}
	box, err := postgres.NewSecretBox(bytes.Repeat([]byte{7}, postgres.WebhookKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	r := &deliveryRig{pool: pool, store: &postgres.Store{Pool: pool, Box: box}, clk: clock.NewManual(t0)}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.hits++
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(recv.Close)
	if _, err := r.store.CreateWebhook(ctx, domain.Webhook{ID: "wh-1", ProviderID: "p-1", URL: recv.URL, Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
		t.Fatal(err)
	}
	r.d = &Deliverer{Store: r.store, Clock: r.clk, HTTP: recv.Client(), Log: slog.New(slog.DiscardHandler)}
	return r
}

// addDelivery queues a delivery of wh-1 as a status change does.
func (r *deliveryRig) addDelivery(t *testing.T, event string, at time.Time) int64 {
	t.Helper()
	return r.addDeliveryOf(t, "wh-1", "po-1", event, at)
}

// addDeliveryOf queues a delivery of webhook's change of payout, due at.
func (r *deliveryRig) addDeliveryOf(t *testing.T, webhook, payout, event string, at time.Time) int64 {
	t.Helper()
	var id int64
	if err := r.pool.QueryRow(context.Background(), `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at)
		values ($1, $2, $3, '{}', $4, $4) returning delivery_id`, webhook, event, payout, at).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// deliverOnce claims the due deliveries Run would (deliveryInFlightMax),
// sends them and waits until each is recorded.
func (r *deliveryRig) deliverOnce(ctx context.Context) (int, error) {
	var sends sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	n, err := r.d.start(ctx, deliveryInFlightMax, &sends, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	})
	sends.Wait()
	return n, errors.Join(append(errs, err)...)
}

// attemptUntilSettled sends delivery id at each of its next attempts until
// it is no longer pending (at most n attempts) and returns its status,
// attempts and the clock when it settled.
func (r *deliveryRig) attemptUntilSettled(t *testing.T, id int64, n int) (string, int, time.Time) {
	t.Helper()
	ctx := context.Background()
	var status string
	var attempts int
	var next time.Time
	for range n {
		if err := r.pool.QueryRow(ctx, `select status, attempts, next_attempt_at from payout.webhook_deliveries where delivery_id = $1`, id).
			Scan(&status, &attempts, &next); err != nil {
			t.Fatal(err)
		}
		if status != "pending" {
			return status, attempts, r.clk.Now()
		}
		r.clk.Set(next)
		if got, err := r.deliverOnce(ctx); err != nil || got != 1 {
			t.Fatalf("attempt %d at %s: %d sent, %v", attempts+1, next, got, err)
		}
	}
	t.Fatalf("delivery %d still %s after %d attempts", id, status, n)
	return "", 0, time.Time{}
}

// A receiver down for a day still learns of the change: a delivery is
// retried for deliveryRetryFor (3 days) from the change, not 15 times
// (3 h 08 min of backoff, then failed for good, seen nowhere). Every
// attempt is counted by outcome; the one given up is counted failed once
// (GpubillPayoutWebhookGivenUp pages on it).
func TestWebhookDeliveryRetriedForDaysThenGivenUpCounted(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	r := newDeliveryRig(t, t0)
	id := r.addDelivery(t, "ev-1", t0)
	retries, failed := testutil.ToFloat64(webhookDeliveries.WithLabelValues("retry")), testutil.ToFloat64(webhookDeliveries.WithLabelValues("failed"))

	const window = 72 * time.Hour // the provider's expectation, set independently of deliveryRetryFor
	status, attempts, at := r.attemptUntilSettled(t, id, 500)
	if status != "failed" || at.Sub(t0) < window || at.Sub(t0) > window+deliveryBackoffMax {
		t.Fatalf("%s after %d attempts, %s after the change; want failed once %s had passed (within one backoff)", status, attempts, at.Sub(t0), window)
	}
	if r.hits != attempts {
		t.Errorf("receiver called %d times for %d attempts", r.hits, attempts)
	}
	if got := testutil.ToFloat64(webhookDeliveries.WithLabelValues("failed")) - failed; got != 1 {
		t.Errorf("gpubill_payout_webhook_deliveries_total{outcome=failed} rose by %v, want 1", got)
	}
	if got := testutil.ToFloat64(webhookDeliveries.WithLabelValues("retry")) - retries; got != float64(attempts-1) {
		t.Errorf("gpubill_payout_webhook_deliveries_total{outcome=retry} rose by %v, want %d", got, attempts-1)
	}
}

// A delivery given up and sent again on request (RedeliverDelivery) gets
// its 3 days of retries from the request: counted from its change, it was
// given up again after one attempt.
func TestWebhookDeliveryRedeliveredRetriedForDaysAgain(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	r := newDeliveryRig(t, t0)
	id := r.addDelivery(t, "ev-1", t0)
	if _, err := r.pool.Exec(context.Background(), `update payout.webhook_deliveries set status = 'failed', attempts = 80 where delivery_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(5 * 24 * time.Hour)
	if _, err := r.store.RedeliverDelivery(context.Background(), "p-1", "wh-1", id, at); err != nil {
		t.Fatal(err)
	}
	const window = 72 * time.Hour
	status, attempts, settled := r.attemptUntilSettled(t, id, 500)
	if status != "failed" || settled.Sub(at) < window || settled.Sub(at) > window+deliveryBackoffMax {
		t.Fatalf("redelivered at %s: %s after %d attempts, %s after the request; want failed once %s had passed", at, status, attempts-80, settled.Sub(at), window)
	}
}

// Receivers that hang (accept, never answer) do not hold up a healthy
// provider's delivery: sent two at a time, one after another, each hanging
// one cost deliveryTimeout (10 s) ahead of it, so 4 of them, due first,
// delayed a healthy webhook's paid notice by 20 s (and ~11 saturated a
// replica). A payout's changes to one webhook are still sent one at a
// time: its second is not sent while its first hangs.
func TestHangingWebhooksDoNotDelayAHealthyOne(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	r := newDeliveryRig(t, t0)
	ctx := context.Background()
	var mu sync.Mutex
	hung := map[string]int{} // requests by webhook
	hang := func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		hung[req.URL.Query().Get("wh")]++
		mu.Unlock()
		if _, err := io.Copy(io.Discard, req.Body); err != nil { // read: its context then ends when the sender hangs up
			return
		}
		select { // longer than deliveryTimeout; ends when the sender hangs up
		case <-time.After(15 * time.Second):
		case <-req.Context().Done():
		}
	}
	slow := httptest.NewServer(http.HandlerFunc(hang))
	t.Cleanup(slow.Close)
	healthy := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(healthy.Close)

	const hanging = 4
	var stuck []int64
	for i := range hanging {
		wh, provider := fmt.Sprintf("wh-hang-%d", i), fmt.Sprintf("p-hang-%d", i)
		if _, err := r.store.CreateWebhook(ctx, domain.Webhook{ID: wh, ProviderID: provider, URL: slow.URL + "?wh=" + wh,
			Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
			t.Fatal(err)
		}
		// Due before the healthy one (claimed oldest first); the payout's
		// next change waits behind its first.
		at := t0.Add(-time.Duration(hanging-i) * time.Second)
		stuck = append(stuck, r.addDeliveryOf(t, wh, "po-"+wh, "ev-"+wh, at))
		r.addDeliveryOf(t, wh, "po-"+wh, "ev-"+wh+"-next", at)
	}
	if _, err := r.store.CreateWebhook(ctx, domain.Webhook{ID: "wh-ok", ProviderID: "p-ok", URL: healthy.URL, Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
		t.Fatal(err)
	}
	ok := r.addDeliveryOf(t, "wh-ok", "po-ok", "ev-ok", t0)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.d.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	status := func(id int64) (s string) {
		if err := r.pool.QueryRow(ctx, `select status from payout.webhook_deliveries where delivery_id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	testkit.Eventually(t, 3*time.Second, func() bool { return status(ok) == "delivered" }, "the healthy webhook's delivery delivered")
	testkit.Eventually(t, time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(hung) == hanging
	}, "every hanging receiver called")
	for _, id := range stuck {
		if s := status(id); s != "pending" {
			t.Errorf("hanging delivery %d is %s before its timeout; want pending (still being sent)", id, s)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for wh, n := range hung {
		if n != 1 {
			t.Errorf("%s called %d times while its first delivery hung; want once (a payout's changes in order)", wh, n)
		}
	}
}

// One provider whose receivers hang, with many payouts queued, holds only
// its share of the sender's slots: each send to one of its webhooks ran to
// deliveryTimeout, and its 60 queued deliveries (one per payout, so none
// waited behind another) were claimed oldest first into all 16 slots, so
// another provider's paid notice, due just after, waited a whole timeout
// (10 s an attempt). At most deliveryPerWebhookMax of a webhook's
// deliveries and deliveryPerProviderMax of a provider's are sent at once;
// the rest keep flowing.
func TestHangingWebhookHoldsOnlyItsShare(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	r := newDeliveryRig(t, t0)
	ctx := context.Background()
	var mu sync.Mutex
	inFlight, most := map[string]int{}, map[string]int{} // by webhook and by "provider", now and at most
	enter := func(keys ...string) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			inFlight[k]++
			most[k] = max(most[k], inFlight[k])
		}
	}
	leave := func(keys ...string) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			inFlight[k]--
		}
	}
	slow := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		wh := req.URL.Query().Get("wh")
		enter(wh, "provider")
		defer leave(wh, "provider")
		if _, err := io.Copy(io.Discard, req.Body); err != nil { // read: its context then ends when the sender hangs up
			return
		}
		select { // longer than deliveryTimeout; ends when the sender hangs up
		case <-time.After(15 * time.Second):
		case <-req.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	healthy := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(healthy.Close)

	const webhooks, payouts = 3, 20 // of the provider whose receivers hang
	for i := range webhooks {
		wh := fmt.Sprintf("wh-hang-%d", i)
		if _, err := r.store.CreateWebhook(ctx, domain.Webhook{ID: wh, ProviderID: "p-hang", URL: slow.URL + "?wh=" + wh,
			Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
			t.Fatal(err)
		}
		for j := range payouts { // all due before the healthy one (claimed oldest first)
			at := t0.Add(-time.Duration((webhooks-i)*payouts-j) * time.Second)
			r.addDeliveryOf(t, wh, fmt.Sprintf("po-%d", j), fmt.Sprintf("ev-%s-%d", wh, j), at)
		}
	}
	if _, err := r.store.CreateWebhook(ctx, domain.Webhook{ID: "wh-ok", ProviderID: "p-ok", URL: healthy.URL, Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
		t.Fatal(err)
	}
	ok := r.addDeliveryOf(t, "wh-ok", "po-ok", "ev-ok", t0)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.d.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	const prompt = 2 * time.Second // well under deliveryTimeout: not waiting for a hanging send to end
	var status string
	for time.Since(start) < deliveryTimeout+5*time.Second {
		if err := r.pool.QueryRow(ctx, `select status from payout.webhook_deliveries where delivery_id = $1`, ok).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status == "delivered" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if took := time.Since(start); status != "delivered" || took > prompt {
		t.Errorf("the healthy provider's delivery %s after %s; want delivered within %s", status, took.Round(100*time.Millisecond), prompt)
	}
	testkit.Eventually(t, time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inFlight["provider"] > 0
	}, "a hanging receiver called")
	mu.Lock()
	defer mu.Unlock()
	for i := range webhooks {
		if wh := fmt.Sprintf("wh-hang-%d", i); most[wh] > deliveryPerWebhookMax {
			t.Errorf("%s had %d sends in flight at once; want at most %d", wh, most[wh], deliveryPerWebhookMax)
		}
	}
	if most["provider"] > deliveryPerProviderMax || deliveryPerProviderMax >= deliveryInFlightMax {
		t.Errorf("p-hang had %d sends in flight at once (its share %d of %d)", most["provider"], deliveryPerProviderMax, deliveryInFlightMax)
	}
}

// A healthy provider's queue drains at the speed of its receiver, not of
// the sender's idle wait: its webhook's share held the rest of it back,
// and a claim finding nothing else waited deliveryIdle before the next (40
// deliveries took 10 s, 2 per wait) though each send took a millisecond.
func TestWebhookQueueDrainsPastItsShare(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	r := newDeliveryRig(t, t0)
	ctx := context.Background()
	healthy := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(healthy.Close)
	if _, err := r.store.CreateWebhook(ctx, domain.Webhook{ID: "wh-ok", ProviderID: "p-ok", URL: healthy.URL, Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
		t.Fatal(err)
	}
	const queued = 40
	for i := range queued {
		r.addDeliveryOf(t, "wh-ok", fmt.Sprintf("po-%d", i), fmt.Sprintf("ev-%d", i), t0)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.d.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	delivered := func() (n int) {
		if err := r.pool.QueryRow(ctx, `select count(*) from payout.webhook_deliveries where status = 'delivered'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// 40 idle waits' worth is 20 s; a queue sent as each send ends, well under.
	testkit.Eventually(t, queued/deliveryPerWebhookMax*deliveryIdle/4, func() bool { return delivered() == queued }, "all %d delivered", queued)
}

// A webhook whose receiver does not answer rests: the process claims none
// of its deliveries for a while (doubling while it stays unanswered), so
// receivers down or hanging do not keep taking their share of the slots
// at every claim; another webhook's deliveries go on, and its first answer
// ends the rest.
func TestUnansweringWebhookRests(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	r := newDeliveryRig(t, t0)
	ctx := context.Background()
	down := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	downURL := down.URL
	down.Close() // connections refused: no answer
	if _, err := r.store.CreateWebhook(ctx, domain.Webhook{ID: "wh-down", ProviderID: "p-down", URL: downURL, Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		r.addDeliveryOf(t, "wh-down", fmt.Sprintf("po-%d", i), fmt.Sprintf("ev-%d", i), t0)
	}
	claimed := func(at time.Time) (down, other int) {
		t.Helper()
		r.clk.Set(at)
		hits := r.hits
		n, err := r.deliverOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n - (r.hits - hits), r.hits - hits
	}
	if d, _ := claimed(t0); d != deliveryPerWebhookMax {
		t.Fatalf("first claim: %d of wh-down sent, want its share %d", d, deliveryPerWebhookMax)
	}
	// Its 4 others are due, but it rests deliveryRestFirst; wh-1 (503,
	// answered) is sent meanwhile.
	r.addDelivery(t, "ev-other", t0)
	if d, o := claimed(t0.Add(deliveryRestFirst - time.Second)); d != 0 || o != 1 {
		t.Errorf("while wh-down rests: %d of it sent, %d of wh-1; want 0 and 1", d, o)
	}
	if d, _ := claimed(t0.Add(deliveryRestFirst)); d != deliveryPerWebhookMax {
		t.Errorf("after its rest: %d of wh-down sent, want %d", d, deliveryPerWebhookMax)
	}
	// Unanswered again: twice as long.
	if d, _ := claimed(t0.Add(deliveryRestFirst + 2*deliveryRestFirst - time.Second)); d != 0 {
		t.Errorf("in its second rest: %d of wh-down sent, want 0", d)
	}
	if d, _ := claimed(t0.Add(3 * deliveryRestFirst)); d == 0 {
		t.Errorf("after its second rest: none of wh-down sent")
	}
}

// A provider's webhook URL is often its credential (a chat bot's
// /hook/<token>, ?access_token=): a delivery given up logs its error at
// ERROR in the platform's log and stores it in the provider's delivery
// listing, and neither quotes the path or the query. The HTTP client's
// own error (*url.Error) quotes the URL whole.
func TestWebhookDeliveryErrorHidesURLSecrets(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	r := newDeliveryRig(t, t0)
	ctx := context.Background()
	var logs bytes.Buffer // deliverOnce waits for its sends
	r.d.Log = slog.New(slog.NewTextHandler(&logs, nil))
	const url = "https://127.0.0.1:9/x/SECRET?t=SECRET2" // port 9: refused
	if _, err := r.store.CreateWebhook(ctx, domain.Webhook{ID: "wh-bot", ProviderID: "p-bot", URL: url, Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
		t.Fatal(err)
	}
	id := r.addDeliveryOf(t, "wh-bot", "po-1", "ev-1", t0)
	for _, at := range []time.Time{t0, t0.Add(deliveryRetryFor)} { // a retry, then given up
		r.clk.Set(at)
		if n, err := r.deliverOnce(ctx); err != nil || n != 1 {
			t.Fatalf("at %s: %d sent, %v", at, n, err)
		}
	}
	var status, lastError string
	if err := r.pool.QueryRow(ctx, `select status, last_error from payout.webhook_deliveries where delivery_id = $1`, id).Scan(&status, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || lastError == "" || !strings.Contains(logs.String(), "given up") {
		t.Fatalf("status %s, last error %q, logs:\n%s\nwant failed and logged", status, lastError, logs.String())
	}
	if strings.Contains(lastError, "SECRET") {
		t.Errorf("stored error quotes the URL's secret: %q", lastError)
	}
	if strings.Contains(logs.String(), "SECRET") {
		t.Errorf("log quotes the URL's secret:\n%s", logs.String())
	}
}
