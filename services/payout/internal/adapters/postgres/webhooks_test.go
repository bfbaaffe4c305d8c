package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// unshared is a share of the sends no claim of these tests reaches.
var unshared = domain.DeliveryShare{PerWebhook: 100, PerProvider: 100}

// A delivery whose claim lapsed while it was being sent (a slow receiver;
// another payout replica claimed it again and delivered it) does not record
// its own outcome over that one's: it turned the delivered row back to
// pending, sent again, its attempts counted twice.
func TestLapsedDeliveryClaimRecordsNothing(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	box, err := NewSecretBox(bytes.Repeat([]byte{7}, WebhookKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{Pool: pool, Box: box}
	t0 := time.Now()
	if _, err := s.CreateWebhook(ctx, domain.Webhook{ID: "wh-1", ProviderID: "p-1", URL: "https://example.test/hook", Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at)
		values ('wh-1', 'ev-1', 'po-1', '{}', $1, $1)`, t0); err != nil {
		t.Fatal(err)
	}
	const lease = 30 * time.Second
	a, err := s.ClaimDeliveries(ctx, t0, lease, 2, unshared)
	if err != nil || len(a) != 1 {
		t.Fatalf("first claim: %v %v", a, err)
	}
	later := t0.Add(lease + time.Second)
	b, err := s.ClaimDeliveries(ctx, later, lease, 2, unshared)
	if err != nil || len(b) != 1 {
		t.Fatalf("claim after the lease: %v %v", b, err)
	}
	if err := s.FinishDelivery(ctx, b[0], "delivered", 204, "", later, later); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishDelivery(ctx, a[0], "pending", 0, "timeout", later.Add(time.Minute), later); err != nil {
		t.Fatal(err)
	}
	var status string
	var attempts int
	if err := pool.QueryRow(ctx, `select status, attempts from payout.webhook_deliveries`).Scan(&status, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "delivered" || attempts != 1 {
		t.Fatalf("status %s after %d attempts; want delivered after 1", status, attempts)
	}
}

// A subscription's creation sent again (a client's retry) answers the one
// it made: it made a second subscription of the URL, every delivery then
// sent twice, and no way to remove it. The URL with another secret is a
// conflict. Creations side by side respect the cap (both passed the count).
func TestWebhookCreationReplaysAndKeepsItsCap(t *testing.T) {
	ctx := context.Background()
	box, err := NewSecretBox(bytes.Repeat([]byte{7}, WebhookKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{Pool: migratedPool(t), Box: box}
	hook := func(id, url, secret string) domain.Webhook {
		return domain.Webhook{ID: id, ProviderID: "p-1", URL: url, Secret: secret, CreatedAt: time.Now()}
	}
	first, err := s.CreateWebhook(ctx, hook("wh-1", "https://example.test/hook", "0123456789abcdef"), 10)
	if err != nil || first.ID != "wh-1" {
		t.Fatalf("create: %+v, %v", first, err)
	}
	again, err := s.CreateWebhook(ctx, hook("wh-2", "https://example.test/hook", "0123456789abcdef"), 10)
	if err != nil || again.ID != "wh-1" {
		t.Fatalf("the creation again: %+v, %v; want wh-1 answered", again, err)
	}
	if _, err := s.CreateWebhook(ctx, hook("wh-3", "https://example.test/hook", "another-secret-0123"), 10); !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("the url with another secret: %v, want a conflict", err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.CreateWebhook(ctx, hook(fmt.Sprintf("wh-c%d", i), fmt.Sprintf("https://example.test/c%d", i), "0123456789abcdef"), 10)
			if err != nil && !errors.Is(err, apperr.ErrPrecondition) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ws, err := s.ListWebhooks(ctx, "p-1")
	if err != nil || len(ws) != 10 {
		t.Fatalf("%d webhooks (%v), want 10: the first and 9 of the 20 side by side", len(ws), err)
	}
}

// A removed webhook is sent nothing more: its pending deliveries are
// canceled (kept in the log), a later status change queues none for it,
// and it no longer counts towards the provider's cap. Removing it again
// answers the same; another provider's webhook, or none, is not found.
// There was no removal: a lapsed domain kept receiving payout details and
// a provider at the cap could never subscribe another URL.
func TestWebhookRemovedIsSentNothingAndLeavesTheCap(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	box, err := NewSecretBox(bytes.Repeat([]byte{7}, WebhookKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{Pool: pool, Box: box, Event: func(p domain.Payout, _ string, c domain.Change) (outbox.Message, error) {
		return outbox.Message{ID: fmt.Sprintf("ev-%s-%s", p.ID, c.Status), Subject: "payout.status_changed." + p.ProviderID, Payload: []byte("{}")}, nil
	}}
	t0 := time.Now()
	for i := range 10 {
		if _, err := s.CreateWebhook(ctx, domain.Webhook{ID: fmt.Sprintf("wh-%d", i), ProviderID: "p-1", URL: fmt.Sprintf("https://example.test/%d", i),
			Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at) values ('wh-0', 'ev-a', 'po-0', '{}', $1, $1)`,
		`insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at) values ('wh-0', 'ev-b', 'po-0', '{}', $1, $1)`,
		`insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at, status) values ('wh-0', 'ev-c', 'po-9', '{}', $1, $1, 'delivered')`,
		`insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at) values ('wh-1', 'ev-a', 'po-0', '{}', $1, $1)`,
	} {
		if _, err := pool.Exec(ctx, q, t0); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := s.DeleteWebhook(ctx, "p-1", "wh-0", t0); err != nil {
			t.Fatalf("remove wh-0: %v", err)
		}
	}
	for _, give := range [][2]string{{"p-2", "wh-1"}, {"p-1", "wh-none"}} {
		if err := s.DeleteWebhook(ctx, give[0], give[1], t0); !errors.Is(err, apperr.ErrNotFound) {
			t.Errorf("remove %s of %s: %v, want not found", give[1], give[0], err)
		}
	}
	rows, err := pool.Query(ctx, `select event_id || ':' || status from payout.webhook_deliveries where webhook_id = 'wh-0' order by event_id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || fmt.Sprint(got) != "[ev-a:canceled ev-b:canceled ev-c:delivered]" {
		t.Errorf("wh-0's deliveries after its removal: %v (%v); want the pending ones canceled, the delivered one kept", got, err)
	}
	claimed, err := s.ClaimDeliveries(ctx, t0.Add(time.Minute), time.Minute, 10, unshared)
	if err != nil || len(claimed) != 1 || claimed[0].WebhookID != "wh-1" {
		t.Errorf("claimed %+v (%v); want wh-1's delivery alone", claimed, err)
	}
	// A status change after the removal queues a delivery for every
	// webhook of the provider but wh-0.
	if err := s.Tx(ctx, func(tx pgx.Tx) error {
		_, err := s.CreateFromSettled(ctx, tx, domain.Payout{ID: "po-new", ProviderID: "p-1", CycleID: "cyc-20260101", Currency: "CNY",
			Net: decimal.RequireFromString("250.00"), CreatedAt: t0}, domain.Minimums{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var queued, toRemoved int
	if err := pool.QueryRow(ctx, `select count(*), count(*) filter (where webhook_id = 'wh-0') from payout.webhook_deliveries where payout_id = 'po-new'`).
		Scan(&queued, &toRemoved); err != nil {
		t.Fatal(err)
	}
	if queued != 9 || toRemoved != 0 {
		t.Errorf("a status change after wh-0's removal queued %d deliveries, %d for wh-0; want 9, none for wh-0", queued, toRemoved)
	}
	if _, err := s.RotateWebhookSecret(ctx, "p-1", "wh-0", "fedcba9876543210", t0, t0); !errors.Is(err, apperr.ErrNotFound) {
		t.Errorf("rotating a removed webhook's secret: %v, want not found", err)
	}
	ws, err := s.ListWebhooks(ctx, "p-1")
	if err != nil || len(ws) != 9 || slices.ContainsFunc(ws, func(w domain.Webhook) bool { return w.ID == "wh-0" }) {
		t.Errorf("webhooks after the removal: %d (%v); want the 9 others", len(ws), err)
	}
	if _, err := s.CreateWebhook(ctx, domain.Webhook{ID: "wh-10", ProviderID: "p-1", URL: "https://example.test/0", Secret: "another-secret-0123",
		CreatedAt: t0}, 10); err != nil {
		t.Errorf("a 10th webhook after one of 10 was removed (its URL, another secret): %v", err)
	}
}

// A delivery given up is sent again on request: pending from then, due at
// once, its retries counted from the request (RedeliveredAt). One still
// pending answers as it is; a delivered or canceled one is a failed
// precondition; another provider's, or one of a removed webhook, not found.
func TestFailedDeliveryRedelivered(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	box, err := NewSecretBox(bytes.Repeat([]byte{7}, WebhookKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{Pool: pool, Box: box}
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	for _, id := range []string{"wh-1", "wh-2"} {
		if _, err := s.CreateWebhook(ctx, domain.Webhook{ID: id, ProviderID: "p-1", URL: "https://example.test/" + id, Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]int64{}
	for _, give := range [][3]string{{"wh-1", "ev-failed", "failed"}, {"wh-1", "ev-pending", "pending"}, {"wh-1", "ev-delivered", "delivered"},
		{"wh-2", "ev-failed-2", "failed"}} {
		var id int64
		if err := pool.QueryRow(ctx, `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at, status, attempts)
			values ($1, $2, 'po-1', '{}', $3, $3, $4, 80) returning delivery_id`, give[0], give[1], t0, give[2]).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[give[1]] = id
	}
	at := t0.Add(96 * time.Hour)
	d, err := s.RedeliverDelivery(ctx, "p-1", "wh-1", ids["ev-failed"], at)
	if err != nil || d.Status != "pending" || !d.NextAttemptAt.Equal(at) || d.RedeliveredAt == nil || !d.RedeliveredAt.Equal(at) || d.Attempts != 80 {
		t.Fatalf("redelivered: %+v, %v; want pending, due and redelivered at %s, its 80 attempts kept", d, err, at)
	}
	claimed, err := s.ClaimDeliveries(ctx, at, time.Minute, 10, unshared)
	if err != nil || len(claimed) != 2 { // the one redelivered and the one pending (another event of the payout: it waits behind the older)
		t.Logf("claimed %+v", claimed)
	}
	if !slices.ContainsFunc(claimed, func(c domain.Delivery) bool { return c.ID == ids["ev-failed"] }) {
		t.Errorf("the delivery redelivered was not claimed at %s: %+v (%v)", at, claimed, err)
	}
	if d, err := s.RedeliverDelivery(ctx, "p-1", "wh-1", ids["ev-pending"], at); err != nil || d.Status != "pending" || d.RedeliveredAt != nil {
		t.Errorf("a pending delivery redelivered: %+v, %v; want it answered as it is", d, err)
	}
	if _, err := s.RedeliverDelivery(ctx, "p-1", "wh-1", ids["ev-delivered"], at); !errors.Is(err, apperr.ErrPrecondition) {
		t.Errorf("a delivered one redelivered: %v, want a failed precondition", err)
	}
	for _, give := range []struct {
		provider, webhook string
		id                int64
	}{{"p-2", "wh-1", ids["ev-failed"]}, {"p-1", "wh-2", ids["ev-failed"]}, {"p-1", "wh-1", 1 << 40}} {
		if _, err := s.RedeliverDelivery(ctx, give.provider, give.webhook, give.id, at); !errors.Is(err, apperr.ErrNotFound) {
			t.Errorf("redeliver %d of %s of %s: %v, want not found", give.id, give.webhook, give.provider, err)
		}
	}
	if err := s.DeleteWebhook(ctx, "p-1", "wh-2", at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RedeliverDelivery(ctx, "p-1", "wh-2", ids["ev-failed-2"], at); !errors.Is(err, apperr.ErrNotFound) {
		t.Errorf("a removed webhook's delivery redelivered: %v, want not found", err)
	}
}

// A claim takes no more of a webhook's or a provider's deliveries than its
// share less what the sender already has in flight, oldest first, and
// takes the others' meanwhile: one webhook's queue, due first, filled every
// slot.
func TestDeliveryClaimKeepsEachShare(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	box, err := NewSecretBox(bytes.Repeat([]byte{7}, WebhookKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{Pool: pool, Box: box}
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	for _, give := range [][2]string{{"wh-a", "p-1"}, {"wh-b", "p-1"}, {"wh-c", "p-1"}, {"wh-d", "p-2"}} {
		if _, err := s.CreateWebhook(ctx, domain.Webhook{ID: give[0], ProviderID: give[1], URL: "https://example.test/" + give[0],
			Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
			t.Fatal(err)
		}
	}
	// wh-a's 6 are due first, then wh-b's, wh-c's and wh-d's: each of
	// another payout (none waits behind another change of its payout).
	for i, wh := range []string{"wh-a", "wh-b", "wh-c", "wh-d"} {
		for j := range 6 {
			at := t0.Add(time.Duration(i*6+j) * time.Second)
			if _, err := pool.Exec(ctx, `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at)
				values ($1, $2, $3, '{}', $4, $4)`, wh, fmt.Sprintf("ev-%s-%d", wh, j), fmt.Sprintf("po-%d", j), at); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := t0.Add(time.Hour)
	share := domain.DeliveryShare{PerWebhook: 2, PerProvider: 4, Webhooks: map[string]int{"wh-a": 1}, Providers: map[string]int{"p-1": 1}}
	claimed, err := s.ClaimDeliveries(ctx, now, time.Minute, 16, share)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, c := range claimed {
		got[c.WebhookID+"/"+c.ProviderID]++
	}
	// wh-a has 1 of its 2 in flight, p-1 1 of its 4: wh-a 1 more, wh-b 2
	// (p-1 then full, wh-c none), wh-d of p-2 its 2.
	if want := "map[wh-a/p-1:1 wh-b/p-1:2 wh-d/p-2:2]"; fmt.Sprint(got) != want {
		t.Errorf("claimed %v, want %s", got, want)
	}
	// A share already full is skipped whole: p-1 at 4 in flight, only
	// p-2's wh-d (2 more of it are due and not claimed).
	claimed, err = s.ClaimDeliveries(ctx, now, time.Minute, 16, domain.DeliveryShare{PerWebhook: 2, PerProvider: 4,
		Providers: map[string]int{"p-1": 4}})
	if err != nil || len(claimed) != 2 || claimed[0].WebhookID != "wh-d" || claimed[1].WebhookID != "wh-d" {
		t.Errorf("with p-1's share full: claimed %+v (%v), want 2 of wh-d", claimed, err)
	}
}

// A redelivery asked for while its webhook is being removed does not send
// after the removal: the request read the webhook as not removed, the
// removal canceled only the pending deliveries (not the failed one being
// redelivered), and the request then made it pending: claimed and sent to
// a webhook its provider had removed, and due forever in the sender's lag.
// The request is held (here, by a lock on the delivery taken first) after
// its statement read the webhook and before it locked the row.
func TestRedeliveryRacingRemovalSendsNothing(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	box, err := NewSecretBox(bytes.Repeat([]byte{7}, WebhookKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{Pool: pool, Box: box}
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	if _, err := s.CreateWebhook(ctx, domain.Webhook{ID: "wh-1", ProviderID: "p-1", URL: "https://example.test/hook", Secret: "0123456789abcdef", CreatedAt: t0}, 10); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := pool.QueryRow(ctx, `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at, status, attempts)
		values ('wh-1', 'ev-1', 'po-1', '{}', $1, $1, 'failed', 80) returning delivery_id`, t0).Scan(&id); err != nil {
		t.Fatal(err)
	}
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(ctx) }()
	if _, err := hold.Exec(ctx, `select 1 from payout.webhook_deliveries where delivery_id = $1 for update`, id); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(96 * time.Hour)
	redelivered := make(chan error, 1)
	go func() {
		_, err := s.RedeliverDelivery(ctx, "p-1", "wh-1", id, at)
		redelivered <- err
	}()
	testkit.Eventually(t, 5*time.Second, func() bool {
		var waiting int
		if err := pool.QueryRow(ctx, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`).
			Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting == 1
	}, "the redelivery waiting on the delivery's row")
	removed := make(chan error, 1)
	go func() { removed <- s.DeleteWebhook(ctx, "p-1", "wh-1", at) }()
	var removeErr error
	select { // the removal finishes, or waits for the redelivery (it holds the webhook)
	case removeErr = <-removed:
		removed = nil
	case <-time.After(time.Second):
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-redelivered; err != nil && !errors.Is(err, apperr.ErrNotFound) {
		t.Fatalf("redeliver: %v", err)
	}
	if removed != nil {
		removeErr = <-removed
	}
	if removeErr != nil {
		t.Fatalf("remove: %v", removeErr)
	}
	var status string
	if err := pool.QueryRow(ctx, `select status from payout.webhook_deliveries where delivery_id = $1`, id).Scan(&status); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimDeliveries(ctx, at.Add(time.Minute), time.Minute, 10, unshared)
	if err != nil || len(claimed) != 0 || status == "pending" {
		t.Errorf("after the removal: the delivery is %s, %d claimed (%v); want it not pending, nothing claimed", status, len(claimed), err)
	}
}
