package adapters

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// CreateWebhook stores a subscription.
func (s *Store) CreateWebhook(ctx context.Context, w domain.Webhook) error {
	_, err := s.Pool.Exec(ctx, `insert into payout.webhooks (webhook_id, provider_id, url, secret, created_at) values ($1, $2, $3, $4, $5)`,
		w.ID, w.ProviderID, w.URL, w.Secret, w.CreatedAt)
	return err
}

// ListWebhooks lists a provider's subscriptions.
func (s *Store) ListWebhooks(ctx context.Context, provider string) ([]domain.Webhook, error) {
	rows, err := s.Pool.Query(ctx, `select webhook_id, provider_id, url, secret, created_at from payout.webhooks where provider_id = $1 order by created_at`, provider)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Webhook, error) {
		var w domain.Webhook
		return w, r.Scan(&w.ID, &w.ProviderID, &w.URL, &w.Secret, &w.CreatedAt)
	})
}

const deliveryCols = `d.delivery_id, d.webhook_id, d.event_id, d.payout_id, w.url, w.secret, d.payload, d.status, d.attempts,
	d.last_status_code, d.last_error, d.next_attempt_at, d.created_at, d.delivered_at`

func scanDelivery(r pgx.CollectableRow) (domain.Delivery, error) {
	var d domain.Delivery
	return d, r.Scan(&d.ID, &d.WebhookID, &d.EventID, &d.PayoutID, &d.URL, &d.Secret, &d.Payload, &d.Status, &d.Attempts,
		&d.LastStatusCode, &d.LastError, &d.NextAttemptAt, &d.CreatedAt, &d.DeliveredAt)
}

// ListDeliveries is a webhook's delivery log, newest first.
func (s *Store) ListDeliveries(ctx context.Context, provider, webhook string, limit int) ([]domain.Delivery, error) {
	rows, err := s.Pool.Query(ctx, `select `+deliveryCols+` from payout.webhook_deliveries d join payout.webhooks w using (webhook_id)
		where w.provider_id = $1 and d.webhook_id = $2 order by d.delivery_id desc limit $3`, provider, webhook, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDelivery)
}

// ClaimDeliveries takes up to limit due deliveries, oldest first, and
// leases them until now+lease (another process skips them meanwhile; a
// crash mid-send makes them due again after the lease).
func (s *Store) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]domain.Delivery, error) {
	rows, err := s.Pool.Query(ctx, `with due as (
			select delivery_id from payout.webhook_deliveries where status = 'pending' and next_attempt_at <= $1
			order by next_attempt_at limit $3 for update skip locked)
		update payout.webhook_deliveries d set next_attempt_at = $2 from due, payout.webhooks w
		where d.delivery_id = due.delivery_id and w.webhook_id = d.webhook_id
		returning `+deliveryCols, now, now.Add(lease), limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDelivery)
}

// FinishDelivery records one attempt: delivered, retry at next, or given up (failed).
func (s *Store) FinishDelivery(ctx context.Context, id int64, status string, code int, errText string, next, at time.Time) error {
	_, err := s.Pool.Exec(ctx, `update payout.webhook_deliveries set status = $2, attempts = attempts + 1, last_status_code = $3,
		last_error = $4, next_attempt_at = $5, delivered_at = case when $2 = 'delivered' then $6 else delivered_at end
		where delivery_id = $1`, id, status, code, errText, next, at)
	return err
}
