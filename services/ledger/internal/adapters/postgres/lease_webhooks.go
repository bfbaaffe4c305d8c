package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// LeaseWebhooks is the webhook queue (ledger.lease_webhooks).
type LeaseWebhooks struct{ Pool *pgxpool.Pool }

var _ app.LeaseWebhookQueue = (*LeaseWebhooks)(nil)

// Claim takes up to limit due deliveries, oldest first, at most one per
// renter: the renter's earliest still pending (a resume never overtakes the
// stop before it that is being retried). It leases them until now+lease
// (another process skips them meanwhile; a crash mid-send makes them due
// again after the lease).
func (w *LeaseWebhooks) Claim(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]domain.LeaseWebhook, error) {
	until := now.Add(lease).Truncate(time.Microsecond) // as Postgres keeps it: Finish compares it
	rows, err := w.Pool.Query(ctx, `with due as (
			select d.event_id from ledger.lease_webhooks d
			where d.status = 'pending' and d.next_attempt_at <= $1
				and not exists (select 1 from ledger.lease_webhooks e
					where e.renter_id = d.renter_id and e.status = 'pending' and e.seq < d.seq)
			order by d.seq limit $3 for update skip locked)
		update ledger.lease_webhooks d set next_attempt_at = $2 from due where d.event_id = due.event_id
		returning d.event_id, d.renter_id, d.kind, d.payload, d.attempts`, now, until, limit)
	if err != nil {
		return nil, fmt.Errorf("claim lease webhooks: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.LeaseWebhook, error) {
		d := domain.LeaseWebhook{ClaimedUntil: until}
		return d, r.Scan(&d.EventID, &d.RenterID, &d.Kind, &d.Payload, &d.Attempts)
	})
}

// Finish records one attempt: delivered, retry at next, or given up
// (failed), while the row still holds the claim that read d (pending, its
// next attempt the claim's end). A claim that lapsed while its delivery was
// being sent (a slow receiver) and was claimed again records nothing: it
// turned the other claim's delivered row back to pending.
func (w *LeaseWebhooks) Finish(ctx context.Context, d domain.LeaseWebhook, status string, code int, errText string, next, at time.Time) error {
	_, err := w.Pool.Exec(ctx, `update ledger.lease_webhooks set status = $2, attempts = attempts + 1, last_status_code = $3,
		last_error = $4, next_attempt_at = $5, delivered_at = case when $2 = 'delivered' then $6 else delivered_at end
		where event_id = $1 and status = 'pending' and next_attempt_at = $7`, d.EventID, status, code, errText, next, at, d.ClaimedUntil)
	if err != nil {
		return fmt.Errorf("finish lease webhook %s: %w", d.EventID, err)
	}
	return nil
}
