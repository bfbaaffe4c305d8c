package postgres

import (
	"bytes"
	"context"
	"testing"
	"time"

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
	if err := s.CreateWebhook(ctx, domain.Webhook{ID: "wh-1", ProviderID: "p-1", URL: "https://example.test/hook", Secret: "0123456789abcdef", CreatedAt: t0}); err != nil {
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
