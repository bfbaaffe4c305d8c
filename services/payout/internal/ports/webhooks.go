package ports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/webhook"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Webhook delivery limits.
const (
	// Sends at once per process, each claimed as a slot frees and sent at
	// once (deliveryTimeout < deliveryLease). Sent 2 at a time one after
	// another, a receiver that hangs cost deliveryTimeout of the whole
	// sender: ~11 of them held every other provider's notice for hours.
	deliveryInFlightMax  = 16
	deliveryLease        = 30 * time.Second // a claimed delivery is retried after this if its sender died
	deliveryTimeout      = 10 * time.Second
	deliveryRetryFor     = 72 * time.Hour // from the change, then failed (logged, counted, redeliverable); 15 attempts (3 h 08 min) left a receiver down for a day untold
	deliveryBackoffFirst = time.Second    // doubling per attempt
	deliveryBackoffMax   = time.Hour
	deliveryIdle         = 500 * time.Millisecond
	webhookSecretLenMin  = 16
	webhookURLLenMax     = 2048
	webhooksPerProvider  = 10
	deliveryPageMax      = 200
	deliveriesListing    = "payout.webhook_deliveries" // in its page tokens (pkg/cursor)
	deliveryErrorLenMax  = 200
	webhookGraceDefault  = 24 * time.Hour // a rotated-out secret signs beside the new one
	webhookGraceMax      = domain.WebhookRotationGraceMax
)

// A webhook's and a provider's share of the deliveryInFlightMax sends: a
// receiver that hangs (each send running to deliveryTimeout) with many
// payouts queued was claimed into every slot, and every other provider's
// paid notice waited for its timeouts. N webhooks hanging hold at most 2N
// slots; one provider's (up to webhooksPerProvider) at most 4.
const (
	deliveryPerWebhookMax  = 2
	deliveryPerProviderMax = 4
)

// A webhook whose receiver did not answer (a timeout, a refused
// connection) rests: this process claims none of its deliveries for
// deliveryRestFirst, doubled per attempt unanswered in a row up to
// deliveryRestMax, and the first answer ends it. With its share alone, 8
// receivers hanging held every slot; each delivery still keeps its own
// backoff and 3-day window (one given up is so at its next attempt).
const (
	deliveryRestFirst = deliveryTimeout
	deliveryRestMax   = 5 * time.Minute
)

// webhookDeliveries counts delivery attempts by outcome: a delivery given up
// was seen only in its provider's delivery log, and a receiver down for
// longer than the retries never learned of a change (a paid payout
// returned).
var webhookDeliveries = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_payout_webhook_deliveries_total",
	Help: "Payout webhook delivery attempts by outcome: delivered, retry (failed, will be retried), " +
		"failed (given up: its retry window passed; the provider can redeliver it).",
}, []string{"outcome"})

// Every outcome's series exists from the start (at 0), so increase() sees the first.
func init() {
	for _, o := range []string{"delivered", "retry", "failed"} {
		webhookDeliveries.WithLabelValues(o)
	}
}

// Deliverer sends webhook deliveries until they get a 2xx, with backoff.
type Deliverer struct {
	Store app.Store
	Clock clock.Clock
	HTTP  *http.Client
	Log   *slog.Logger
	// Guard refuses forbidden receiver addresses at each connection
	// (used when HTTP is nil).
	Guard WebhookGuard
	// BackoffFirst overrides deliveryBackoffFirst (tests).
	BackoffFirst time.Duration

	mu      sync.Mutex
	sending domain.DeliveryShare   // sends in flight by webhook and provider
	resting map[string]webhookRest // by webhook: receivers that did not answer
}

// webhookRest is a webhook resting: its deliveries are not claimed until
// until; unanswered is how many rests in a row it has had.
type webhookRest struct {
	until      time.Time
	unanswered int
}

// Run delivers until ctx ends: up to deliveryInFlightMax sends at once, a
// slot claiming the next due delivery as soon as its send is recorded.
func (d *Deliverer) Run(ctx context.Context) error {
	if d.HTTP == nil {
		d.HTTP = d.Guard.Client()
	}
	var sends sync.WaitGroup
	defer sends.Wait()
	slots := make(chan struct{}, deliveryInFlightMax) // one per send in flight
	// A send ended: a delivery its webhook's or provider's share held back
	// may be claimed now, not after deliveryIdle (a healthy provider's
	// queue went 2 at a time per idle wait).
	ended := make(chan struct{}, 1)
	done := func(err error) {
		<-slots
		if err != nil && ctx.Err() == nil {
			d.Log.Warn("webhook deliveries", "err", err)
		}
		select {
		case ended <- struct{}{}:
		default:
		}
	}
	for {
		free := takeSlots(ctx, slots)
		if free == 0 {
			return nil
		}
		n, err := d.start(ctx, free, &sends, done)
		if err != nil && ctx.Err() == nil {
			d.Log.Warn("webhook deliveries", "err", err)
		}
		for range free - n {
			<-slots
		}
		if n > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ended:
		case <-time.After(deliveryIdle):
		}
	}
}

// takeSlots takes every free send slot, waiting for one; 0 once ctx ends.
func takeSlots(ctx context.Context, slots chan struct{}) int {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < cap(slots) {
		select {
		case slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// start claims up to limit due deliveries, within each webhook's and
// provider's share of the sends, and sends each at once, side by side,
// calling done with the error of each once it is recorded. Only as many
// are claimed as are sent at once: a claimed delivery waiting for a send
// slot would see its lease run out (and be sent twice).
func (d *Deliverer) start(ctx context.Context, limit int, sends *sync.WaitGroup, done func(error)) (int, error) {
	ds, err := d.Store.ClaimDeliveries(ctx, d.Clock.Now(), deliveryLease, limit, d.share())
	if err != nil {
		return 0, err
	}
	for _, dl := range ds {
		d.count(dl, 1)
		sends.Go(func() {
			err := d.deliver(ctx, dl)
			d.count(dl, -1) // before its slot frees: the next claim sees it ended
			done(err)
		})
	}
	return len(ds), nil
}

// share is what the sender has in flight, for a claim. Only start adds
// to it, after its claim: between the two it only shrinks, so no claim
// takes more than a share.
func (d *Deliverer) share() domain.DeliveryShare {
	d.mu.Lock()
	defer d.mu.Unlock()
	share := domain.DeliveryShare{PerWebhook: deliveryPerWebhookMax, PerProvider: deliveryPerProviderMax,
		Webhooks: maps.Clone(d.sending.Webhooks), Providers: maps.Clone(d.sending.Providers)}
	now := d.Clock.Now()
	for id, r := range d.resting {
		if now.Before(r.until) { // its share taken: none of its deliveries claimed
			if share.Webhooks == nil {
				share.Webhooks = map[string]int{}
			}
			share.Webhooks[id] = max(share.Webhooks[id], deliveryPerWebhookMax)
		}
	}
	return share
}

// rest starts (or lengthens) the rest of a webhook whose receiver did not
// answer an attempt at at, or ends it once it answered.
func (d *Deliverer) rest(webhookID string, answered bool, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if answered {
		delete(d.resting, webhookID)
		return
	}
	if d.resting == nil {
		d.resting = map[string]webhookRest{}
	}
	r := d.resting[webhookID]
	if at.Before(r.until) { // another of its sends, in flight as the rest began
		return
	}
	r.unanswered++
	r.until = at.Add(webhook.Backoff(deliveryRestFirst, deliveryRestMax, r.unanswered))
	d.resting[webhookID] = r
}

// count adds n to the sends in flight of dl's webhook and provider.
func (d *Deliverer) count(dl domain.Delivery, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sending.Webhooks == nil {
		d.sending.Webhooks, d.sending.Providers = map[string]int{}, map[string]int{}
	}
	addSending(d.sending.Webhooks, dl.WebhookID, n)
	addSending(d.sending.Providers, dl.ProviderID, n)
}

func addSending(m map[string]int, id string, n int) {
	if m[id] += n; m[id] <= 0 {
		delete(m, id)
	}
}

// deliver sends one claimed delivery and records its outcome: delivered,
// retried after backoff, or given up once its retry window has passed.
func (d *Deliverer) deliver(ctx context.Context, dl domain.Delivery) error {
	code, sendErr := d.send(ctx, dl)
	if dl.SecretErr != "" {
		d.Log.Error("webhook delivery not sent: its secret does not open", "webhook_id", dl.WebhookID, "delivery_id", dl.ID, "err", dl.SecretErr)
	}
	now := d.Clock.Now()
	var answerErr error
	if ctx.Err() == nil { // not the process stopping
		d.rest(dl.WebhookID, code != 0, now)
		// Kept on the webhook's row too, for the sender's lag on every
		// replica; a secret that does not open is the sender's, not the
		// receiver's (its deliveries count in the lag).
		if dl.SecretErr == "" {
			answerErr = d.Store.RecordWebhookAnswer(ctx, dl.WebhookID, code != 0, now)
		}
	}
	status, errText, next := "delivered", "", now
	if sendErr != nil {
		// Cut whole characters (deliveryError): cut inside one,
		// Postgres refused the text and the delivery's row was never
		// updated (re-sent every lease, its attempts never counted,
		// never given up).
		errText = deliveryError(sendErr)
		status, next = "pending", now.Add(d.backoff(dl.Attempts+1))
		since := dl.CreatedAt
		if dl.RedeliveredAt != nil { // sent again on request: retried as long again
			since = *dl.RedeliveredAt
		}
		if !now.Before(since.Add(deliveryRetryFor)) {
			status = "failed"
		}
	}
	if err := d.Store.FinishDelivery(ctx, dl, status, code, errText, next, now); err != nil {
		return errors.Join(fmt.Errorf("webhook delivery %d: %w", dl.ID, err), answerErr)
	}
	switch status {
	case "delivered":
		webhookDeliveries.WithLabelValues("delivered").Inc()
	case "pending":
		webhookDeliveries.WithLabelValues("retry").Inc()
	default:
		d.Log.Error("payout webhook delivery given up", "webhook_id", dl.WebhookID, "delivery_id", dl.ID, "payout_id", dl.PayoutID,
			"event_id", dl.EventID, "attempts", dl.Attempts+1, "err", errText)
		webhookDeliveries.WithLabelValues("failed").Inc()
	}
	return answerErr
}

func (d *Deliverer) backoff(attempt int) time.Duration {
	first := deliveryBackoffFirst
	if d.BackoffFirst > 0 {
		first = d.BackoffFirst
	}
	return webhook.Backoff(first, deliveryBackoffMax, attempt)
}

// send posts one delivery, signed with the webhook's secret and, during a
// rotation's grace period, the previous one too.
func (d *Deliverer) send(ctx context.Context, dl domain.Delivery) (int, error) {
	if dl.SecretErr != "" {
		return 0, errors.New(dl.SecretErr)
	}
	secrets := [][]byte{[]byte(dl.Secret)}
	if dl.PreviousSecret != "" {
		secrets = append(secrets, []byte(dl.PreviousSecret))
	}
	return webhook.PostSigned(ctx, d.HTTP, dl.URL, secrets, d.Clock.Now().Unix(), dl.EventID, dl.Payload, deliveryTimeout)
}

func webhookProto(w domain.Webhook) *payoutv1.Webhook {
	out := &payoutv1.Webhook{WebhookId: w.ID, ProviderId: w.ProviderID, Url: w.URL, Secret: apperr.Mask(w.Secret), CreatedAt: timestamppb.New(w.CreatedAt)}
	if w.RotatedAt != nil {
		out.SecretRotatedAt = timestamppb.New(*w.RotatedAt)
	}
	if w.PreviousUntil != nil {
		out.PreviousSecretExpiresAt = timestamppb.New(*w.PreviousUntil)
	}
	return out
}

// CreateWebhook implements PayoutService.
func (s *Server) CreateWebhook(ctx context.Context, req *payoutv1.CreateWebhookRequest) (*payoutv1.CreateWebhookResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var v apperr.Validator
	checkProviderID(&v, req.ProviderId)
	if err := s.Webhooks.CheckURL(ctx, req.Url); err != nil {
		v.Add("url", "%s", err.Error())
	}
	v.Check(len(req.Secret) >= webhookSecretLenMin, "secret", "at least 16 characters")
	if err := v.Err(); err != nil {
		return nil, err
	}
	w, err := s.Store.CreateWebhook(ctx, domain.Webhook{ID: ids.New("wh"), ProviderID: req.ProviderId, URL: req.Url, Secret: req.Secret,
		CreatedAt: s.Clock.Now()}, webhooksPerProvider)
	if err != nil {
		return nil, err
	}
	return &payoutv1.CreateWebhookResponse{Webhook: webhookProto(w)}, nil
}

// RotateWebhookSecret implements PayoutService: a new secret, the previous
// one signing beside it for the grace period.
func (s *Server) RotateWebhookSecret(ctx context.Context, req *payoutv1.RotateWebhookSecretRequest) (*payoutv1.RotateWebhookSecretResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var v apperr.Validator
	checkProviderID(&v, req.ProviderId)
	v.Check(req.WebhookId != "", "webhook_id", "required")
	v.Check(len(req.Secret) >= webhookSecretLenMin, "secret", "at least 16 characters")
	grace, err := s.rotationGrace(ctx)
	if err != nil {
		return nil, err
	}
	if g := req.GracePeriod; g != nil {
		d := g.AsDuration()
		switch {
		case !g.IsValid() || d < 0:
			v.Add("grace_period", "want a duration of 0s or more")
		case d > webhookGraceMax:
			v.Add("grace_period", "at most %s", webhookGraceMax)
		default:
			grace = d
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	now := s.Clock.Now()
	w, err := s.Store.RotateWebhookSecret(ctx, req.ProviderId, req.WebhookId, req.Secret, now, now.Add(grace))
	if err != nil {
		return nil, err
	}
	return &payoutv1.RotateWebhookSecretResponse{Webhook: webhookProto(w)}, nil
}

// ListWebhooks implements PayoutService.
func (s *Server) ListWebhooks(ctx context.Context, req *payoutv1.ListWebhooksRequest) (*payoutv1.ListWebhooksResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	ws, err := s.Store.ListWebhooks(ctx, req.ProviderId)
	if err != nil {
		return nil, err
	}
	resp := &payoutv1.ListWebhooksResponse{}
	for _, w := range ws {
		resp.Webhooks = append(resp.Webhooks, webhookProto(w))
	}
	return resp, nil
}

// ListWebhookDeliveries implements PayoutService.
func (s *Server) ListWebhookDeliveries(ctx context.Context, req *payoutv1.ListWebhookDeliveriesRequest) (*payoutv1.ListWebhookDeliveriesResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	n := deliveryPageMax
	if req.PageSize > 0 {
		n = min(int(req.PageSize), deliveryPageMax)
	}
	// A webhook id the provider has none of: a 404, not the empty log of a
	// webhook never called (a mistyped id read as "nothing was sent").
	ws, err := s.Store.ListWebhooks(ctx, req.ProviderId)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(ws, func(w domain.Webhook) bool { return w.ID == req.WebhookId }) {
		return nil, fmt.Errorf("webhook %s of %s: %w", apperr.Clip(req.WebhookId, 64), req.ProviderId, apperr.ErrNotFound)
	}
	// Paged by delivery id, newest first: a webhook's older deliveries
	// (past the newest 200, once the only ones listed) are reachable.
	listing := cursor.Scoped(deliveriesListing, req.ProviderId, req.WebhookId)
	var before int64
	if req.PageToken != "" {
		pos, err := cursor.Decode(listing, req.PageToken, 1)
		if err != nil {
			return nil, err
		}
		if before, err = pos.Int64(0); err != nil || before <= 0 {
			return nil, cursor.Malformed()
		}
	}
	ds, err := s.Store.ListDeliveries(ctx, req.ProviderId, req.WebhookId, before, n+1)
	if err != nil {
		return nil, err
	}
	resp := &payoutv1.ListWebhookDeliveriesResponse{}
	if len(ds) > n {
		ds = ds[:n]
		resp.NextPageToken = cursor.Encode(listing, cursor.FormatInt64(ds[n-1].ID))
	}
	for _, d := range ds {
		resp.Deliveries = append(resp.Deliveries, deliveryProto(d))
	}
	return resp, nil
}

func deliveryProto(d domain.Delivery) *payoutv1.WebhookDelivery {
	out := &payoutv1.WebhookDelivery{DeliveryId: strconv.FormatInt(d.ID, 10), WebhookId: d.WebhookID, EventId: d.EventID, PayoutId: d.PayoutID,
		Status: d.Status, Attempts: int32(d.Attempts), LastStatusCode: int32(d.LastStatusCode), LastError: d.LastError,
		NextAttemptAt: timestamppb.New(d.NextAttemptAt), CreatedAt: timestamppb.New(d.CreatedAt)}
	if d.DeliveredAt != nil {
		out.DeliveredAt = timestamppb.New(*d.DeliveredAt)
	}
	if d.RedeliveredAt != nil {
		out.RedeliveredAt = timestamppb.New(*d.RedeliveredAt)
	}
	return out
}

// DeleteWebhook implements PayoutService: nothing more is sent to the
// webhook, its pending deliveries are canceled, and it leaves the
// provider's cap. Removing it again answers the same.
func (s *Server) DeleteWebhook(ctx context.Context, req *payoutv1.DeleteWebhookRequest) (*payoutv1.DeleteWebhookResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var v apperr.Validator
	checkProviderID(&v, req.ProviderId)
	v.Check(req.WebhookId != "", "webhook_id", "required")
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := s.Store.DeleteWebhook(ctx, req.ProviderId, req.WebhookId, s.Clock.Now()); err != nil {
		return nil, err
	}
	return &payoutv1.DeleteWebhookResponse{}, nil
}

// RedeliverWebhookDelivery implements PayoutService: a delivery given up
// is pending again from now, retried for deliveryRetryFor.
func (s *Server) RedeliverWebhookDelivery(ctx context.Context, req *payoutv1.RedeliverWebhookDeliveryRequest) (*payoutv1.RedeliverWebhookDeliveryResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var v apperr.Validator
	checkProviderID(&v, req.ProviderId)
	v.Check(req.WebhookId != "", "webhook_id", "required")
	// As the log spells it: "+7" or "07" are not ids, though they parse to 7.
	id, err := strconv.ParseInt(req.DeliveryId, 10, 64)
	v.Check(err == nil && id > 0 && strconv.FormatInt(id, 10) == req.DeliveryId, "delivery_id", "want a delivery_id of the delivery log")
	if err := v.Err(); err != nil {
		return nil, err
	}
	d, err := s.Store.RedeliverDelivery(ctx, req.ProviderId, req.WebhookId, id, s.Clock.Now())
	if err != nil {
		return nil, err
	}
	return &payoutv1.RedeliverWebhookDeliveryResponse{Delivery: deliveryProto(d)}, nil
}
