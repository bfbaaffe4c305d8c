package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

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
	a, err := s.ClaimDeliveries(ctx, t0, lease, 2)
	if err != nil || len(a) != 1 {
		t.Fatalf("first claim: %v %v", a, err)
	}
	later := t0.Add(lease + time.Second)
	b, err := s.ClaimDeliveries(ctx, later, lease, 2)
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
