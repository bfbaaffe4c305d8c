package postgres

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/apperr"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// CreateWebhook implements app.Store: its secret sealed, one provider's
// creations one at a time (two side by side both passed the count, and a
// retry made a second subscription of the URL: every delivery sent twice).
func (s *Store) CreateWebhook(ctx context.Context, w domain.Webhook, max int) (domain.Webhook, error) {
	out := w
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.payout.webhooks'), hashtext($1))`, w.ProviderID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `select `+webhookCols+` from payout.webhooks where provider_id = $1 and deleted_at is null order by created_at`, w.ProviderID)
		if err != nil {
			return err
		}
		have, err := pgx.CollectRows(rows, s.scanWebhook)
		if err != nil {
			return err
		}
		for _, h := range have {
			if h.URL != w.URL {
				continue
			}
			if subtle.ConstantTimeCompare([]byte(h.Secret), []byte(w.Secret)) != 1 {
				return fmt.Errorf("webhook %s already delivers to this url with another secret (rotate its secret instead): %w", h.ID, apperr.ErrConflict)
			}
			out = h
			return nil
		}
		if len(have) >= max {
			return fmt.Errorf("provider %s has %d webhooks, the most allowed: %w", w.ProviderID, len(have), apperr.ErrPrecondition)
		}
		sealed, err := s.Box.Seal(w.ID, slotCurrent, w.Secret)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `insert into payout.webhooks (webhook_id, provider_id, url, secret_sealed, secret_key_id, created_at)
			values ($1, $2, $3, $4, $5, $6)`, w.ID, w.ProviderID, w.URL, sealed, s.Box.KeyID, w.CreatedAt)
		return err
	})
	return out, err
}

const webhookCols = `webhook_id, provider_id, url, secret_sealed, created_at, secret_rotated_at, previous_secret_until`

// scanWebhook reads a webhook and opens its current secret.
func (s *Store) scanWebhook(r pgx.CollectableRow) (domain.Webhook, error) {
	var w domain.Webhook
	var sealed []byte
	if err := r.Scan(&w.ID, &w.ProviderID, &w.URL, &sealed, &w.CreatedAt, &w.RotatedAt, &w.PreviousUntil); err != nil {
		return w, err
	}
	var err error
	if w.Secret, err = s.Box.Open(w.ID, slotCurrent, sealed); err != nil {
		return w, fmt.Errorf("webhook %s: %w", w.ID, err)
	}
	return w, nil
}

// ListWebhooks lists a provider's subscriptions (not those removed).
func (s *Store) ListWebhooks(ctx context.Context, provider string) ([]domain.Webhook, error) {
	rows, err := s.Pool.Query(ctx, `select `+webhookCols+` from payout.webhooks where provider_id = $1 and deleted_at is null order by created_at`, provider)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, s.scanWebhook)
}

// RotateWebhookSecret replaces a provider's webhook's secret; the one it
// replaces keeps signing deliveries until previousUntil (no later than
// now: dropped at once). A previous secret still in its grace period is
// dropped. The secret the webhook has already changes nothing (a client's
// retry of the rotation: it made the new secret the previous one too, and
// the old one, which the grace period was for, was gone). ErrNotFound when
// the provider has no such webhook (or removed it).
func (s *Store) RotateWebhookSecret(ctx context.Context, provider, id, secret string, now, previousUntil time.Time) (domain.Webhook, error) {
	var w domain.Webhook
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		var sealed []byte
		err := tx.QueryRow(ctx, `select secret_sealed from payout.webhooks where webhook_id = $1 and provider_id = $2 and deleted_at is null for update`,
			id, provider).Scan(&sealed)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("webhook %s of %s: %w", id, provider, apperr.ErrNotFound)
		}
		if err != nil {
			return err
		}
		old, err := s.Box.Open(id, slotCurrent, sealed)
		if err != nil {
			return fmt.Errorf("webhook %s: %w", id, err)
		}
		if subtle.ConstantTimeCompare([]byte(old), []byte(secret)) == 1 {
			rows, err := tx.Query(ctx, `select `+webhookCols+` from payout.webhooks where webhook_id = $1 and provider_id = $2`, id, provider)
			if err != nil {
				return err
			}
			w, err = pgx.CollectExactlyOneRow(rows, s.scanWebhook)
			return err
		}
		cur, err := s.Box.Seal(id, slotCurrent, secret)
		if err != nil {
			return err
		}
		var prev []byte
		var until *time.Time
		if previousUntil.After(now) {
			if prev, err = s.Box.Seal(id, slotPrevious, old); err != nil {
				return err
			}
			until = &previousUntil
		}
		rows, err := tx.Query(ctx, `update payout.webhooks set secret_sealed = $3, secret_key_id = $4, secret_rotated_at = $5,
			previous_secret_sealed = $6, previous_secret_until = $7 where webhook_id = $1 and provider_id = $2 returning `+webhookCols,
			id, provider, cur, s.Box.KeyID, now, prev, until)
		if err != nil {
			return err
		}
		w, err = pgx.CollectExactlyOneRow(rows, s.scanWebhook)
		return err
	})
	return w, err
}

// DeleteWebhook removes a provider's webhook: a status change queues
// nothing more for it (record), its deliveries still pending are canceled
// (kept in its log, never sent) and it leaves the provider's cap. The row
// stays: its deliveries refer to it. Removing it again changes nothing;
// ErrNotFound when the provider has no such webhook.
func (s *Store) DeleteWebhook(ctx context.Context, provider, id string, at time.Time) error {
	return s.Tx(ctx, func(tx pgx.Tx) error {
		var deleted *time.Time
		err := tx.QueryRow(ctx, `select deleted_at from payout.webhooks where webhook_id = $1 and provider_id = $2 for update`, id, provider).Scan(&deleted)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("webhook %s of %s: %w", apperr.Clip(id, 64), provider, apperr.ErrNotFound)
		}
		if err != nil || deleted != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update payout.webhooks set deleted_at = $2 where webhook_id = $1`, id, at); err != nil {
			return err
		}
		// A status change queuing one side by side holds the webhook's row
		// (record: for share) until it commits: its delivery is canceled
		// here, or it sees the webhook removed and queues none.
		_, err = tx.Exec(ctx, `update payout.webhook_deliveries set status = 'canceled' where webhook_id = $1 and status = 'pending'`, id)
		return err
	})
}

// SealLegacySecrets seals the plaintext secrets of webhooks made before
// secrets were sealed (migration 0008) and clears them; it reports how many.
func (s *Store) SealLegacySecrets(ctx context.Context) (int, error) {
	n := 0
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `select webhook_id, secret from payout.webhooks where secret is not null for update`)
		if err != nil {
			return err
		}
		type legacy struct{ id, secret string }
		ls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (legacy, error) {
			var l legacy
			return l, r.Scan(&l.id, &l.secret)
		})
		if err != nil {
			return err
		}
		for _, l := range ls {
			sealed, err := s.Box.Seal(l.id, slotCurrent, l.secret)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `update payout.webhooks set secret = null, secret_sealed = $2, secret_key_id = $3 where webhook_id = $1`,
				l.id, sealed, s.Box.KeyID); err != nil {
				return err
			}
		}
		n = len(ls)
		return nil
	})
	return n, err
}

// CheckWebhookKey refuses a key other than the one that sealed the stored
// secrets (they would not open: no delivery could be signed).
func (s *Store) CheckWebhookKey(ctx context.Context) error {
	var n int
	var others []string
	if err := s.Pool.QueryRow(ctx, `select count(*), coalesce(array_agg(distinct secret_key_id) filter (where secret_key_id is not null), '{}')
		from payout.webhooks where secret_sealed is not null and secret_key_id is distinct from $1`, s.Box.KeyID).Scan(&n, &others); err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%d webhook secrets were sealed with webhook key %v, not the configured key %s: start with the key that sealed them "+
			"(GPUBILL_WEBHOOK_KEY_FILE, GPUBILL_WEBHOOK_KEY or the data dir's webhook.key)", n, others, s.Box.KeyID)
	}
	return nil
}

const deliveryCols = `d.delivery_id, d.webhook_id, d.event_id, d.payout_id, w.url, d.payload, d.status, d.attempts,
	d.last_status_code, d.last_error, d.next_attempt_at, d.created_at, d.delivered_at, d.redelivered_at`

// deliveryFields are the destinations of deliveryCols in d.
func deliveryFields(d *domain.Delivery) []any {
	return []any{&d.ID, &d.WebhookID, &d.EventID, &d.PayoutID, &d.URL, &d.Payload, &d.Status, &d.Attempts,
		&d.LastStatusCode, &d.LastError, &d.NextAttemptAt, &d.CreatedAt, &d.DeliveredAt, &d.RedeliveredAt}
}

func scanDelivery(r pgx.CollectableRow) (domain.Delivery, error) {
	var d domain.Delivery
	return d, r.Scan(deliveryFields(&d)...)
}

// ListDeliveries implements app.Store.
func (s *Store) ListDeliveries(ctx context.Context, provider, webhook string, before int64, limit int) ([]domain.Delivery, error) {
	rows, err := s.Pool.Query(ctx, `select `+deliveryCols+` from payout.webhook_deliveries d join payout.webhooks w using (webhook_id)
		where w.provider_id = $1 and d.webhook_id = $2 and ($3 = 0 or d.delivery_id < $3)
		order by d.delivery_id desc limit $4`, provider, webhook, before, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDelivery)
}

// ClaimDeliveries takes up to limit due deliveries, oldest first, at most
// one per webhook and payout: the earliest still pending (a payout's
// "returned" never overtakes its "paid" being retried, nor do two replicas
// send one payout's changes at once), and leases them until now+lease (another process skips them meanwhile; a
// crash mid-send makes them due again after the lease). Each comes with
// its webhook's secret, and the previous one while a rotation's grace
// period lasts; a secret that does not open is named in SecretErr. A
// removed webhook's are never claimed (its removal cancels them; one left
// pending beside it is not sent).
//
// With what the caller already sends (share), no webhook gets more than
// share.PerWebhook in flight nor any provider more than share.PerProvider:
// one webhook hanging with many payouts queued (due first, none waiting
// behind another) took every slot, and other providers' notices waited for
// its timeouts. The share is ranked among the oldest candidates only
// (deliveryClaimScanPerSlot per delivery taken: a claim's cost does not
// grow with the backlog); the oldest of them is always within its share,
// so a claim finding any still takes one.
func (s *Store) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int, share domain.DeliveryShare) ([]domain.Delivery, error) {
	webhooks, webhooksSending := shareArrays(share.Webhooks)
	providers, providersSending := shareArrays(share.Providers)
	rows, err := s.Pool.Query(ctx, `with sending_w as (select * from unnest($4::text[], $5::int[]) as b(webhook_id, n)),
			sending_p as (select * from unnest($6::text[], $7::int[]) as b(provider_id, n)),
			candidate as (
				select d.delivery_id, d.webhook_id, w.provider_id, d.next_attempt_at
				from payout.webhook_deliveries d join payout.webhooks w using (webhook_id)
				where d.status = 'pending' and d.next_attempt_at <= $1 and w.deleted_at is null
					and not exists (select 1 from payout.webhook_deliveries e where e.webhook_id = d.webhook_id
						and e.payout_id = d.payout_id and e.status = 'pending' and e.delivery_id < d.delivery_id)
					and coalesce((select n from sending_w b where b.webhook_id = d.webhook_id), 0) < $8
					and coalesce((select n from sending_p b where b.provider_id = w.provider_id), 0) < $9
				order by d.next_attempt_at, d.delivery_id limit $10),
			by_webhook as (
				select c.*, row_number() over (partition by c.webhook_id order by c.next_attempt_at, c.delivery_id) + coalesce(b.n, 0) as nth
				from candidate c left join sending_w b using (webhook_id)),
			by_provider as (
				select c.delivery_id, row_number() over (partition by c.provider_id order by c.next_attempt_at, c.delivery_id) + coalesce(b.n, 0) as nth
				from by_webhook c left join sending_p b using (provider_id) where c.nth <= $8),
			due as (
				select d.delivery_id from payout.webhook_deliveries d join by_provider r using (delivery_id)
				where r.nth <= $9 and d.status = 'pending' and d.next_attempt_at <= $1
				order by d.next_attempt_at, d.delivery_id limit $3 for update of d skip locked)
		update payout.webhook_deliveries d set next_attempt_at = $2 from due, payout.webhooks w
		where d.delivery_id = due.delivery_id and w.webhook_id = d.webhook_id
		returning `+deliveryCols+`, w.provider_id, w.secret_sealed, case when w.previous_secret_until > $1 then w.previous_secret_sealed end`,
		now, now.Add(lease), limit, webhooks, webhooksSending, providers, providersSending, share.PerWebhook, share.PerProvider,
		limit*deliveryClaimScanPerSlot)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Delivery, error) {
		var d domain.Delivery
		var cur, prev []byte
		if err := r.Scan(append(deliveryFields(&d), &d.ProviderID, &cur, &prev)...); err != nil {
			return d, err
		}
		var err error
		if d.Secret, err = s.Box.Open(d.WebhookID, slotCurrent, cur); err != nil {
			d.SecretErr = err.Error()
		} else if prev != nil {
			if d.PreviousSecret, err = s.Box.Open(d.WebhookID, slotPrevious, prev); err != nil {
				d.SecretErr = err.Error()
			}
		}
		return d, nil
	})
}

// deliveryClaimScanPerSlot is how many candidates a claim ranks per
// delivery it may take: enough that one webhook's queue does not fill a
// claim's view; a claim that takes fewer leaves the rest to the next.
const deliveryClaimScanPerSlot = 4

// shareArrays are the ids and counts of a share's map, as SQL arrays.
func shareArrays(sending map[string]int) ([]string, []int) {
	ids := make([]string, 0, len(sending))
	ns := make([]int, 0, len(sending))
	for id, n := range sending {
		ids = append(ids, id)
		ns = append(ns, n)
	}
	return ids, ns
}

// FinishDelivery records one attempt of a claimed delivery: delivered,
// retry at next, or given up (failed), while the row still holds the claim
// that read d (pending, its next attempt the claim's end, as
// ClaimDeliveries returned it). A claim that lapsed while its delivery was
// being sent (a slow receiver) and was claimed again records nothing: it
// turned the other claim's delivered row back to pending.
func (s *Store) FinishDelivery(ctx context.Context, d domain.Delivery, status string, code int, errText string, next, at time.Time) error {
	_, err := s.Pool.Exec(ctx, `update payout.webhook_deliveries set status = $2, attempts = attempts + 1, last_status_code = $3,
		last_error = $4, next_attempt_at = $5, delivered_at = case when $2 = 'delivered' then $6 else delivered_at end
		where delivery_id = $1 and status = 'pending' and next_attempt_at = $7`, d.ID, status, code, errText, next, at, d.NextAttemptAt)
	return err
}

// RecordWebhookAnswer implements app.Store. An attempt unanswered sets
// the webhook's unanswered_at (and unanswered_since, the first of a run);
// an answered one clears both, unless an attempt unanswered ended after it
// (two of its sends side by side). Answered attempts of a webhook that
// answers write nothing.
func (s *Store) RecordWebhookAnswer(ctx context.Context, webhookID string, answered bool, at time.Time) error {
	var err error
	if answered {
		_, err = s.Pool.Exec(ctx, `update payout.webhooks set unanswered_since = null, unanswered_at = null
			where webhook_id = $1 and unanswered_at <= $2`, webhookID, at)
	} else {
		_, err = s.Pool.Exec(ctx, `update payout.webhooks set unanswered_since = coalesce(unanswered_since, $2),
			unanswered_at = greatest(unanswered_at, $2) where webhook_id = $1`, webhookID, at)
	}
	if err != nil {
		return fmt.Errorf("record webhook %s answered %t: %w", webhookID, answered, err)
	}
	return nil
}

// RedeliverDelivery sends a delivery given up (failed) again: pending, due
// at, its retries counted from at (RedeliveredAt). One still pending is
// answered as it is; a delivered or canceled one is ErrPrecondition;
// ErrNotFound when the provider has no such webhook (or removed it) or the
// webhook no such delivery.
func (s *Store) RedeliverDelivery(ctx context.Context, provider, webhook string, id int64, at time.Time) (domain.Delivery, error) {
	var d domain.Delivery
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		// The webhook's row held first, as its removal holds it (then
		// cancels its pending deliveries): one side by side is seen
		// removed here, or waits and cancels this one made pending.
		// Read without it, a removal in between canceled the pending
		// ones, this one was failed still, and it was then made pending:
		// sent to a webhook removed.
		var status string
		err := tx.QueryRow(ctx, `select 1 from payout.webhooks where webhook_id = $1 and provider_id = $2 and deleted_at is null for share`,
			webhook, provider).Scan(new(int))
		if err == nil {
			err = tx.QueryRow(ctx, `select status from payout.webhook_deliveries where delivery_id = $1 and webhook_id = $2 for update`,
				id, webhook).Scan(&status)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("delivery %d of webhook %s of %s: %w", id, apperr.Clip(webhook, 64), provider, apperr.ErrNotFound)
		}
		if err != nil {
			return err
		}
		switch status {
		case "pending":
		case "failed":
			if _, err := tx.Exec(ctx, `update payout.webhook_deliveries set status = 'pending', next_attempt_at = $2, redelivered_at = $2
				where delivery_id = $1`, id, at); err != nil {
				return err
			}
		default:
			return fmt.Errorf("delivery %d is %s, only a failed one is sent again: %w", id, status, apperr.ErrPrecondition)
		}
		rows, err := tx.Query(ctx, `select `+deliveryCols+` from payout.webhook_deliveries d join payout.webhooks w using (webhook_id)
			where d.delivery_id = $1`, id)
		if err != nil {
			return err
		}
		d, err = pgx.CollectExactlyOneRow(rows, scanDelivery)
		return err
	})
	return d, err
}
