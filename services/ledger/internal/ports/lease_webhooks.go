package ports

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/webhook"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Lease control webhook delivery limits.
const (
	leaseHookBatchMax     = 2                // sent one after another: a claimed batch ends within its lease (2 × leaseHookTimeout < leaseHookLease)
	leaseHookLease        = 30 * time.Second // a claimed delivery is retried after this if its sender died
	leaseHookTimeout      = 10 * time.Second
	leaseHookAttemptsMax  = 20 // then failed: logged as an error and counted
	leaseHookBackoffFirst = time.Second
	leaseHookBackoffMax   = 5 * time.Minute
	leaseHookIdle         = 250 * time.Millisecond
	leaseHookErrorLenMax  = 200
)

var leaseHookAttempts = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_lease_control_webhooks_total",
	Help: "Lease control webhook attempts by outcome: delivered, retry (failed, will be retried), failed (given up after the last attempt).",
}, []string{"outcome"})

func init() {
	for _, o := range []string{"delivered", "retry", "failed"} {
		leaseHookAttempts.WithLabelValues(o)
	}
}

// LeaseWebhookDeliverer posts queued lease control events to the
// marketplace scheduler (GPUBILL_LEASE_CONTROL_URL), signed, until a 2xx,
// with backoff; the event id (Gpubill-Event-Id) lets the receiver apply each
// crossing once however often it is sent.
type LeaseWebhookDeliverer struct {
	Queue  app.LeaseWebhookQueue
	URL    string
	Secret []byte
	Clock  clock.Clock
	HTTP   *http.Client
	Log    *slog.Logger
	// BackoffFirst and AttemptsMax override leaseHookBackoffFirst and
	// leaseHookAttemptsMax (tests).
	BackoffFirst time.Duration
	AttemptsMax  int
}

// Run delivers until ctx ends.
func (d *LeaseWebhookDeliverer) Run(ctx context.Context) error {
	if d.HTTP == nil {
		d.HTTP = &http.Client{Timeout: leaseHookTimeout, CheckRedirect: noRedirects}
	}
	for {
		n, err := d.deliverOnce(ctx)
		if err != nil && ctx.Err() == nil {
			d.Log.Error("lease control webhooks", "err", err)
		}
		if n > 0 && err == nil {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(leaseHookIdle):
		}
	}
}

func (d *LeaseWebhookDeliverer) deliverOnce(ctx context.Context) (int, error) {
	ds, err := d.Queue.Claim(ctx, d.Clock.Now(), leaseHookLease, leaseHookBatchMax)
	if err != nil {
		return 0, err
	}
	for _, dl := range ds {
		code, sendErr := d.send(ctx, dl)
		if ctx.Err() != nil {
			return len(ds), nil // the lease makes it due again
		}
		now := d.Clock.Now()
		status, errText, next := "delivered", "", now
		if sendErr != nil {
			// Cut whole characters: cut inside one, Postgres refused the
			// text and the delivery's row was never updated (re-sent every
			// lease, its attempts never counted, never given up).
			errText = apperr.Clip(sendErr.Error(), leaseHookErrorLenMax)
			status, next = "pending", now.Add(d.backoff(dl.Attempts+1))
			if dl.Attempts+1 >= d.attemptsMax() {
				status = "failed"
			}
		}
		switch status {
		case "delivered":
			d.Log.Info("lease control webhook delivered", "event_id", dl.EventID, "renter", dl.RenterID, "kind", dl.Kind, "attempts", dl.Attempts+1)
			leaseHookAttempts.WithLabelValues("delivered").Inc()
		case "pending":
			d.Log.Warn("lease control webhook failed; will retry", "event_id", dl.EventID, "renter", dl.RenterID, "kind", dl.Kind,
				"attempt", dl.Attempts+1, "next_attempt_at", next, "err", errText)
			leaseHookAttempts.WithLabelValues("retry").Inc()
		default:
			d.Log.Error("lease control webhook given up", "event_id", dl.EventID, "renter", dl.RenterID, "kind", dl.Kind,
				"attempts", dl.Attempts+1, "err", errText)
			leaseHookAttempts.WithLabelValues("failed").Inc()
		}
		if err := d.Queue.Finish(ctx, dl, status, code, errText, next, now); err != nil {
			return len(ds), err
		}
	}
	return len(ds), nil
}

func (d *LeaseWebhookDeliverer) attemptsMax() int {
	if d.AttemptsMax > 0 {
		return d.AttemptsMax
	}
	return leaseHookAttemptsMax
}

func (d *LeaseWebhookDeliverer) backoff(attempt int) time.Duration {
	first := leaseHookBackoffFirst
	if d.BackoffFirst > 0 {
		first = d.BackoffFirst
	}
	return webhook.Backoff(first, leaseHookBackoffMax, attempt)
}

func (d *LeaseWebhookDeliverer) send(ctx context.Context, dl domain.LeaseWebhook) (int, error) {
	return webhook.Post(ctx, d.HTTP, d.URL, d.Secret, d.Clock.Now().Unix(), dl.EventID, dl.Payload, leaseHookTimeout)
}

// noRedirects answers a redirect as the delivery's response (not 2xx:
// retried): followed, a 301/302/303 sent the POST on as a GET without its
// body, and a 2xx to that GET marked the event delivered, the scheduler
// never told.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
