// Package natsx holds the JetStream conventions every service shares: the
// stream table (explicit limits, retention by arrival age), publishing with
// Nats-Msg-Id, batched pull consumers, and the embedded server.
package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	otelcodes "go.opentelemetry.io/otel/codes"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// Limits every stream gets. MaxAge, where a stream has one, is measured by
// JetStream on arrival, not on event time, so a late event is never aged out
// before it is consumed.
const (
	feedMaxAge          = 14 * 24 * time.Hour
	partyVersionsMax    = 100 // per party id: its last versions, enough to rebuild any read model
	modelVersionsMax    = 100 // per GPU model id, likewise
	streamMaxMsgSize    = 8 << 20
	streamDupWindow     = 10 * time.Minute
	consumerMaxDeliver  = -1 // natsx bounds deliveries itself (DeadLetterDeliveries): NATS never drops
	consumerMaxAckPend  = 20000
	fetchMaxWaitDefault = 250 * time.Millisecond
)

// DefaultStreamMaxBytes is a stream's byte cap unless GPUBILL_STREAM_MAX_BYTES says otherwise.
const DefaultStreamMaxBytes = 1 << 30

// DefaultAckWait is how long a delivered message may stay unacknowledged
// before JetStream redelivers it (a consumer that died mid-batch), unless a
// ConsumerSpec sets its own AckWait. A handler that runs longer is not
// redelivered meanwhile: Consume reports its batch in progress every
// AckWait/4, so the wait only bounds how long a killed consumer's batch waits.
const DefaultAckWait = 20 * time.Second

// DefaultHandleWithin bounds one handler call unless a ConsumerSpec sets its
// own HandleWithin. A batch takes milliseconds; a call still running after
// this is stuck (a statement that never answers, a lock never granted), and
// its in-progress heartbeat would otherwise hold its messages from every
// consumer for as long as it hangs. Its context is cancelled instead, which
// fails the call: the messages are tried again like any failed batch, and a
// message whose call outruns the bound at every delivery is dead-lettered
// (a deadline is no outage: apperr.Transient).
const DefaultHandleWithin = 2 * time.Minute

// Stream names and the subjects they hold (DESIGN §1: <domain>.<event>.<key>).
const (
	StreamUsage      = "USAGE"
	StreamCharges    = "CHARGES"
	StreamLedger     = "LEDGER"
	StreamBilling    = "BILLING"
	StreamParty      = "PARTY"
	StreamSettlement = "SETTLEMENT"
	StreamPayout     = "PAYOUT"
	StreamAudit      = "AUDIT"     // audit.recorded.{service}: every write, stored by the ledger
	StreamGPUModel   = "GPU_MODEL" // gpu_model.updated.{id}: the GPU catalogue (metering's), read by pricing
	StreamLease      = "LEASE"     // lease.{runway.low,stop.requested,resume.allowed}.{renter}: the ledger's lease control, for the scheduler
)

// streamSpec is how a stream keeps its messages.
//
//   - Work queues (USAGE, CHARGES, SETTLEMENT): each subject has one durable
//     consumer that owns its messages (metering-ingest, pricing-rating,
//     ledger-charges, payout-settled); a message is removed when that consumer
//     acks it, and kept, never aged, until it does. The byte cap only bounds a
//     backlog; when it is reached a publish is refused (DiscardNew) and the
//     outbox holds the message in Postgres until there is room: backpressure,
//     never loss. Observers must use explicit-ack consumers on other subjects.
//   - PARTY: every party's last partyVersionsMax versions, never aged, so a new
//     read model replays every party from the start. GPU_MODEL likewise, per
//     model of the GPU catalogue. Neither takes the byte cap: their size is
//     the parties' (models') versions kept, and at a cap every later party
//     would be refused for good (DiscardNew), its outbox stuck behind it.
//   - Feeds (LEDGER, BILLING, PAYOUT, LEASE): limits by arrival age and
//     bytes, oldest dropped first (DiscardOld), so they never refuse a
//     publish; their source of truth is the producer's tables. The ledger's
//     lease control reads ledger.posted.renter only as a prompt to re-read
//     the wallets from its tables, so a dropped message costs nothing the
//     next write to the wallet does not heal.
type streamSpec struct {
	subjects      []string
	retention     jetstream.RetentionPolicy
	discard       jetstream.DiscardPolicy
	maxAge        time.Duration
	maxPerSubject int64
	owners        []string // the durable consumers that own a work queue's messages
	// uncapped: no byte cap (Limits.MaxBytes bounds backlogs; a stream of
	// every party's last versions holds state, and refused at a cap every
	// later party, for good, holding up the outbox behind it).
	uncapped bool
}

var streamSpecs = map[string]streamSpec{
	// USAGE takes only the subjects its consumers take: bound to usage.>, a
	// node agent's usage published to usage.ingest (no provider) or a
	// misspelt subject was acknowledged, never delivered, never
	// dead-lettered, and kept until the stream's cap refused every
	// usage.recorded. Now such a publish fails at the agent.
	StreamUsage: {subjects: []string{"usage.ingest.>", "usage.recorded.>"}, retention: jetstream.WorkQueuePolicy, discard: jetstream.DiscardNew,
		owners: []string{"metering-ingest", "pricing-rating"}},
	StreamCharges: {subjects: []string{"charges.>"}, retention: jetstream.WorkQueuePolicy, discard: jetstream.DiscardNew,
		owners: []string{"ledger-charges"}},
	StreamSettlement: {subjects: []string{"settlement.>"}, retention: jetstream.WorkQueuePolicy, discard: jetstream.DiscardNew,
		owners: []string{"payout-settled"}},
	StreamParty: {subjects: []string{"party.>"}, retention: jetstream.LimitsPolicy, discard: jetstream.DiscardNew,
		maxPerSubject: partyVersionsMax, uncapped: true},
	StreamGPUModel: {subjects: []string{"gpu_model.>"}, retention: jetstream.LimitsPolicy, discard: jetstream.DiscardNew,
		maxPerSubject: modelVersionsMax, uncapped: true},
	StreamLedger:  {subjects: []string{"ledger.>"}, retention: jetstream.LimitsPolicy, discard: jetstream.DiscardOld, maxAge: feedMaxAge},
	StreamBilling: {subjects: []string{"billing.>"}, retention: jetstream.LimitsPolicy, discard: jetstream.DiscardOld, maxAge: feedMaxAge},
	StreamLease:   {subjects: []string{"lease.>"}, retention: jetstream.LimitsPolicy, discard: jetstream.DiscardOld, maxAge: feedMaxAge},
	StreamPayout:  {subjects: []string{"payout.>"}, retention: jetstream.LimitsPolicy, discard: jetstream.DiscardOld, maxAge: feedMaxAge},
	// AUDIT: every service's writes, owned by the ledger's audit consumer
	// (the log's source of truth is ledger.audit_events once stored).
	StreamAudit: {subjects: []string{"audit.>"}, retention: jetstream.WorkQueuePolicy, discard: jetstream.DiscardNew,
		owners: []string{"ledger-audit"}},
}

// Limits are the per-stream settings an operator chooses
// (GPUBILL_STREAM_MAX_BYTES, GPUBILL_STREAM_REPLICAS); zero means the default.
type Limits struct {
	MaxBytes int64 // per stream
	Replicas int   // in a JetStream cluster
}

// StreamConfig returns the canonical configuration of a named stream with
// the default limits.
func StreamConfig(name string) (jetstream.StreamConfig, error) {
	return Limits{}.StreamConfig(name)
}

// StreamConfig returns the canonical configuration of a named stream.
func (l Limits) StreamConfig(name string) (jetstream.StreamConfig, error) {
	sp, ok := streamSpecs[name]
	if !ok {
		return jetstream.StreamConfig{}, fmt.Errorf("unknown stream %q", name)
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultStreamMaxBytes
	}
	if l.Replicas <= 0 {
		l.Replicas = 1
	}
	maxBytes := l.MaxBytes
	if sp.uncapped {
		maxBytes = -1
	}
	return jetstream.StreamConfig{
		Name:              name,
		Subjects:          sp.subjects,
		Retention:         sp.retention,
		Storage:           jetstream.FileStorage,
		MaxAge:            sp.maxAge,
		MaxBytes:          maxBytes,
		MaxMsgsPerSubject: sp.maxPerSubject,
		MaxMsgSize:        int32(min(streamMaxMsgSize, l.MaxBytes)),
		Discard:           sp.discard,
		Duplicates:        streamDupWindow,
		Replicas:          l.Replicas,
	}, nil
}

// EnsureStreams creates or updates the named streams with the default limits.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, names ...string) error {
	return Limits{}.EnsureStreams(ctx, js, nil, names...)
}

// EnsureStreams creates the named streams or brings them to their canonical
// configuration (a changed byte cap or replica count is applied in place).
// JetStream cannot change a stream's retention in place: a stream made by an
// older gpubill (limits retention) is recreated with the new retention (see
// migrateRetention) once its owning consumers have acknowledged everything,
// which is always so after a clean stop of `gpubill dev`; otherwise it keeps
// its old retention, with a warning naming the backlog, until a later start
// finds it drained.
func (l Limits) EnsureStreams(ctx context.Context, js jetstream.JetStream, log *slog.Logger, names ...string) error {
	if log == nil {
		log = slog.Default()
	}
	for _, n := range names {
		cfg, err := l.StreamConfig(n)
		if err != nil {
			return err
		}
		retentionDeferred.WithLabelValues(n) // a series from 0, so the alert sees a first deferral
		retentionStillDeferred.WithLabelValues(n)
		st, err := js.Stream(ctx, n)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return fmt.Errorf("create stream %s: %w", n, err)
			}
			retentionStillDeferred.WithLabelValues(n).Set(0)
			continue
		}
		if err != nil {
			return fmt.Errorf("stream %s: %w", n, err)
		}
		// A stream another start left with its placeholder subjects
		// (retiredSubject) still has its old retention: it is finished here.
		if old := st.CachedInfo().Config.Retention; old != cfg.Retention {
			if err := l.migrateRetention(ctx, js, cfg, log); err != nil {
				return err
			}
			continue
		}
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("update stream %s: %w", n, err)
		}
		retentionStillDeferred.WithLabelValues(n).Set(0)
	}
	return nil
}

// How a retention change is guarded.
const (
	// retentionLockBucket holds one key per stream whose retention a
	// process is changing; a second process (another service's start)
	// waits for it, or else it deleted the stream the first had just
	// recreated, with new messages in it.
	retentionLockBucket = "gpubill_retention_locks"
	// retentionLockTTL frees the lock of a process that died holding it.
	// A change holds it for retentionDrainWait and a few API calls, at
	// most retentionSettleTimeout after the drain wait.
	retentionLockTTL = 30 * time.Second
	// retentionLockWait is how long a start waits for another's change:
	// past the TTL, so a dead holder's lock has expired by then.
	retentionLockWait = 40 * time.Second
	retentionLockPoll = 250 * time.Millisecond
	// retentionDrainWait bounds how long publishes are refused while the
	// owners consume what arrived before the stream stopped taking them.
	retentionDrainWait = 2 * time.Second
	retentionDrainPoll = 50 * time.Millisecond
	// retentionSettleTimeout bounds the calls that put a stream whose
	// subjects were moved back into a working state after its start was
	// cancelled (see settling).
	retentionSettleTimeout = 10 * time.Second
)

// retiredSubject is the only subject of a stream while its retention
// changes: no publisher uses it, so every later publish to the stream's own
// subjects is refused (no stream takes it; the outbox relays try again).
// Those the stream had queued before are still stored and acknowledged:
// flushInbound publishes to it to see them all stored before the delete.
func retiredSubject(stream string) string { return "gpubill.retired." + stream }

// retentionDeferred counts retention changes given up over a backlog.
var retentionDeferred = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_stream_retention_deferred_total",
	Help: "Starts that left a stream made by an older gpubill with its old retention because its owning consumers had not acknowledged everything (the log names the backlog); a later start changes it once they have.",
}, []string{"stream"})

// retentionStillDeferred is 1 for a stream this process's start left with
// its old retention over a backlog, until the process finds it changed (a
// later EnsureStreams): the deferral counter's increase cleared its alert an
// hour after the start, while the stream kept its old retention, consumed
// messages piling up toward its byte cap. A change only ever goes from the
// old retention to the new, so one process's 0 is the truth over another's
// stale 1 (the alert takes the min over instances).
var retentionStillDeferred = promauto.NewGaugeVec(prometheus.GaugeOpts{
	Name: "gpubill_stream_retention_still_deferred",
	Help: "1 while a stream made by an older gpubill keeps its old retention because this process's start deferred its change over a backlog; 0 once this process found it changed or changed it.",
}, []string{"stream"})

// migrateRetention recreates a stream whose retention changed, if nothing in
// it is left to consume; otherwise it keeps the old retention, applies what
// it can and explains. One process at a time changes a stream (a lock in
// KV bucket retentionLockBucket), and the stream takes no new publish while
// it changes (its subjects moved to retiredSubject) and is deleted only once
// a flush shows nothing was stored after the last drained check (see
// waitDrainedForDelete), so no acknowledged publish is deleted with it.
func (l Limits) migrateRetention(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, log *slog.Logger) error {
	release, err := l.lockRetention(ctx, js, cfg.Name, log)
	if err != nil {
		return err
	}
	defer release()
	st, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) { // a change that died between delete and create
		if err := createStream(ctx, js, cfg); err != nil {
			return err
		}
		retentionStillDeferred.WithLabelValues(cfg.Name).Set(0)
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	before := st.CachedInfo()
	if before.Config.Retention == cfg.Retention { // another process changed it while this one waited
		retentionStillDeferred.WithLabelValues(cfg.Name).Set(0)
		return nil
	}
	keep := keepRetention(cfg, before.Config)
	retired := keep
	retired.Subjects = []string{retiredSubject(cfg.Name)}
	if _, err := js.UpdateStream(ctx, retired); err != nil {
		// A cancel can land after the server moved the subjects.
		return giveSubjectsBack(ctx, js, keep, fmt.Errorf("stop its publishes to change its retention: %w", err))
	}
	backlog, err := waitDrainedForDelete(ctx, js, st, streamSpecs[cfg.Name].owners)
	if err != nil {
		return giveSubjectsBack(ctx, js, keep, err)
	}
	if backlog != "" {
		if err := giveSubjectsBack(ctx, js, keep, nil); err != nil {
			return err
		}
		retentionDeferred.WithLabelValues(cfg.Name).Inc()
		retentionStillDeferred.WithLabelValues(cfg.Name).Set(1)
		log.Warn("stream keeps its old retention until its backlog is consumed; restart once it is (consumer lag 0)",
			"stream", cfg.Name, "retention", before.Config.Retention.String(), "want", cfg.Retention.String(), "backlog", backlog)
		return nil
	}
	if err := recreateStream(ctx, js, cfg); err != nil {
		return err
	}
	retentionStillDeferred.WithLabelValues(cfg.Name).Set(0)
	log.Info("stream recreated with its new retention", "stream", cfg.Name, "retention", cfg.Retention.String(),
		"was", before.Config.Retention.String(), "consumed_messages_dropped", before.State.Msgs)
	return nil
}

// afterDrainedCheck, when set (tests only), runs between a check that found
// the owners had consumed everything and the flush that confirms it.
var afterDrainedCheck func()

// settling is ctx without its cancellation, bounded by retentionSettleTimeout:
// once a stream's subjects are moved, a start cancelled (SIGTERM, a deploy's
// timeout) still leaves the stream taking publishes, or else every outbox
// publish to it is refused until a later start.
func settling(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), retentionSettleTimeout)
}

// giveSubjectsBack puts the stream back on its own subjects with its old
// retention (keep), even when ctx is cancelled, and returns cause (nil when
// the change was given up over a backlog) with the stream's name.
func giveSubjectsBack(ctx context.Context, js jetstream.JetStream, keep jetstream.StreamConfig, cause error) error {
	sctx, cancel := settling(ctx)
	defer cancel()
	if _, err := js.UpdateStream(sctx, keep); err != nil {
		return fmt.Errorf("stream %s: give its subjects back: %w", keep.Name, errors.Join(err, cause))
	}
	if cause != nil {
		return fmt.Errorf("stream %s: %w", keep.Name, cause)
	}
	return nil
}

// recreateStream deletes the drained stream and creates it with cfg, even
// when ctx is cancelled: a cancel between the two left no stream at all.
func recreateStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	sctx, cancel := settling(ctx)
	defer cancel()
	if err := js.DeleteStream(sctx, cfg.Name); err != nil {
		return fmt.Errorf("recreate stream %s: %w", cfg.Name, err)
	}
	return createStream(sctx, js, cfg)
}

// keepRetention is cfg with the retention and the limits that go with it
// of the existing stream old, and cfg's subjects (never old's: those may
// be retiredSubject, left by a change that died halfway).
func keepRetention(cfg, old jetstream.StreamConfig) jetstream.StreamConfig {
	cfg.Retention, cfg.Discard, cfg.MaxAge, cfg.MaxMsgsPerSubject = old.Retention, old.Discard, old.MaxAge, old.MaxMsgsPerSubject
	return cfg
}

// createStream creates the stream, or brings it to cfg when a process
// started meanwhile found it missing and created it first.
func createStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	_, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		_, err = js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("recreate stream %s: %w", cfg.Name, err)
	}
	return nil
}

// waitDrainedForDelete waits up to retentionDrainWait until the owners have
// acknowledged everything in the stream (its subjects moved to
// retiredSubject) and nothing was stored since, and describes what they have
// not ("" when the stream can be deleted). Moving the subjects stops the
// publishes that arrive later, not those already in the stream's inbound
// queue: the server stores and acknowledges them after the move returned,
// under load after a check that found the owners drained (seen: 158 of 3000
// queued publishes acknowledged with sequences past the last one read just
// after the move). So each drained check is followed by a marker published
// to retiredSubject: the stream answers it after every publish queued before
// it, and its sequence right after the checked last one proves nothing was
// stored meanwhile; otherwise the owners are waited for again.
func waitDrainedForDelete(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, owners []string) (string, error) {
	deadline := time.Now().Add(retentionDrainWait)
	for {
		drained, backlog, err := waitConsumed(ctx, st, owners, deadline)
		if err != nil || backlog != "" {
			return backlog, err
		}
		if afterDrainedCheck != nil {
			afterDrainedCheck()
		}
		marker, err := flushInbound(ctx, js, st)
		if err != nil {
			return "", err
		}
		if marker == drained.State.LastSeq+1 {
			return "", nil
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("%d messages stored after its owners were found drained (sequences %d to %d)",
				marker-drained.State.LastSeq-1, drained.State.LastSeq+1, marker-1), nil
		}
	}
}

// flushInbound publishes a marker to the stream's retiredSubject, once every
// publish queued before it is stored, and returns the marker's sequence,
// the marker itself removed (it belongs to no owner, and a stream given its
// subjects back keeps no trace of it).
func flushInbound(ctx context.Context, js jetstream.JetStream, st jetstream.Stream) (uint64, error) {
	name := st.CachedInfo().Config.Name
	ack, err := js.Publish(ctx, retiredSubject(name), nil, jetstream.WithRetryAttempts(0))
	if err != nil {
		return 0, fmt.Errorf("flush its inbound publishes before the delete: %w", err)
	}
	if err := st.DeleteMsg(ctx, ack.Sequence); err != nil {
		return 0, fmt.Errorf("remove its flush marker (sequence %d): %w", ack.Sequence, err)
	}
	return ack.Sequence, nil
}

// waitConsumed waits until deadline for the owners to acknowledge
// everything in the stream, and returns the stream's state read before the
// owners' (info) and what they have not acknowledged ("" when nothing is
// left).
func waitConsumed(ctx context.Context, st jetstream.Stream, owners []string, deadline time.Time) (*jetstream.StreamInfo, string, error) {
	for {
		info, err := st.Info(ctx)
		if err != nil {
			return nil, "", err
		}
		backlog, err := unconsumed(ctx, st, info, owners)
		if err != nil || backlog == "" || time.Now().After(deadline) {
			return info, backlog, err
		}
		sleep(ctx, retentionDrainPoll)
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
	}
}

// lockRetention takes the lock of stream's retention change, waiting up to
// retentionLockWait for another process holding it. release deletes the
// key, unless it expired and another process holds it now.
func (l Limits) lockRetention(ctx context.Context, js jetstream.JetStream, stream string, log *slog.Logger) (release func(), err error) {
	kv, err := retentionLocks(ctx, js, l.Replicas)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(retentionLockWait)
	for {
		rev, err := kv.Create(ctx, stream, []byte(time.Now().UTC().Format(time.RFC3339)))
		if err == nil {
			return func() {
				if err := kv.Delete(context.WithoutCancel(ctx), stream, jetstream.LastRevision(rev)); err != nil {
					log.Warn("retention change lock not released; it expires by itself", "stream", stream,
						"bucket", retentionLockBucket, "expires_in", retentionLockTTL, "err", err)
				}
			}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !lockHeld(ctx, kv, stream) {
			return nil, fmt.Errorf("stream %s: lock its retention change in KV bucket %s: %w", stream, retentionLockBucket, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("stream %s: another process has held the lock of its retention change (KV bucket %s) for over %s; start again",
				stream, retentionLockBucket, retentionLockWait)
		}
		sleep(ctx, retentionLockPoll)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// lockHeld reports whether another process holds stream's lock: a
// replicated bucket answers a create that lost a race for a deleted key
// with an error that is not ErrKeyExists.
func lockHeld(ctx context.Context, kv jetstream.KeyValue, stream string) bool {
	_, err := kv.Get(ctx, stream)
	return err == nil
}

// retentionLocks opens the KV bucket of retention change locks, creating
// it if missing (its TTL expires a dead holder's lock).
func retentionLocks(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, retentionLockBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: retentionLockBucket, TTL: retentionLockTTL,
			Storage: jetstream.FileStorage, Replicas: max(replicas, 1)})
		if errors.Is(err, jetstream.ErrBucketExists) { // created by another process meanwhile
			kv, err = js.KeyValue(ctx, retentionLockBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("retention change locks (KV bucket %s): %w", retentionLockBucket, err)
	}
	return kv, nil
}

// unconsumed describes what of a stream its owners have not all acknowledged
// ("" when nothing): a missing owner with messages in the stream, or an
// owner with pending or unacknowledged messages.
func unconsumed(ctx context.Context, st jetstream.Stream, info *jetstream.StreamInfo, owners []string) (string, error) {
	if info.State.Msgs == 0 {
		return "", nil
	}
	for _, o := range owners {
		c, err := st.Consumer(ctx, o)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Sprintf("%d messages and no consumer %s yet", info.State.Msgs, o), nil
		}
		if err != nil {
			return "", err
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return "", err
		}
		if ci.NumPending > 0 || ci.NumAckPending > 0 {
			return fmt.Sprintf("consumer %s: %d pending, %d unacknowledged", o, ci.NumPending, ci.NumAckPending), nil
		}
	}
	return "", nil
}

// publishAsyncTimeout ends an async publish whose ack never comes. Without
// it nats.go keeps such a publish pending for good (a clustered stream's
// server may drop a publish unanswered while its leader moves): each one
// took a slot of the client's 4000, and once they were taken every
// PublishMsgAsync of the process failed (ErrTooManyStalledMsgs), every
// outbox relay stopped. The relay gives up on a batch's acks after 30 s
// and publishes its rows again (dedup by message id), so this only frees
// the slots.
var publishAsyncTimeout = 30 * time.Second

// Connect dials NATS and returns the connection and its JetStream context.
func Connect(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		var parse *neturl.Error
		if errors.As(err, &parse) { // its text quotes the whole URL, credentials too
			return nil, nil, fmt.Errorf("connect nats %s: the URL does not parse", apperr.RedactURLs(url))
		}
		return nil, nil, fmt.Errorf("connect nats %s: %w", apperr.RedactURLs(url), err) // nats://user:pass@ or nats://TOKEN@
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(publishAsyncTimeout))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// Handler processes one pulled batch. It returns nil when every message's
// effect is durable (then all are acked). A *PoisonError names messages that
// can never be applied (undecodable, unparseable): Consume dead-letters them
// at once and hands the rest to the handler again. Any other error is taken
// as possibly transient: the messages are tried again, one at a time, and a
// message that still fails alone after DeadLetterDeliveries deliveries is
// dead-lettered, so one bad message never blocks the stream. Consumers make
// redelivery harmless by recording message ids with their effects.
type Handler func(ctx context.Context, msgs []jetstream.Msg) error

// DeadLetterDeliveries is how many deliveries a message that fails alone gets
// before it is dead-lettered (redeliveries back off from nakDelayMin, doubling,
// to nakDelayMax: about 1.5 s in all). A failure that says a dependency is
// unavailable (Unavailable: the database down or starting, a lost
// connection) never counts: the message is redelivered until the outage ends.
// A call cut at HandleWithin counts, like a statement timeout.
const DeadLetterDeliveries = 5

const (
	nakDelayMin     = 100 * time.Millisecond
	nakDelayMax     = 5 * time.Second
	failBackoffMax  = 2 * time.Second
	failBackoffBase = 100 * time.Millisecond
)

// DeadLetters keeps the messages a consumer cannot apply (pkg/deadletter
// implements it over the service's dead_letters table).
type DeadLetters interface {
	// Put records m as dead after deliveries deliveries, failing with cause.
	Put(ctx context.Context, consumer string, m jetstream.Msg, deliveries int, cause error) error
	// Replay applies, through h, the consumer's dead letters an operator
	// asked to replay, until ctx ends. Consume's h is the handler bounded by
	// HandleWithin, its panics recovered: an error of h is a failed replay.
	Replay(ctx context.Context, consumer string, h Handler) error
}

// PoisonError names, by message id (MsgID), messages of a batch that can
// never be applied, with why.
type PoisonError struct {
	ByID map[string]error
}

// Poison returns a PoisonError naming one message.
func Poison(id string, cause error) *PoisonError {
	return &PoisonError{ByID: map[string]error{id: cause}}
}

// Add names one more poisoned message.
func (e *PoisonError) Add(id string, cause error) {
	if e.ByID == nil {
		e.ByID = map[string]error{}
	}
	e.ByID[id] = cause
}

func (e *PoisonError) Error() string {
	for id, err := range e.ByID {
		if len(e.ByID) == 1 {
			return fmt.Sprintf("message %s cannot be applied: %v", id, err)
		}
		return fmt.Sprintf("%d messages cannot be applied, e.g. %s: %v", len(e.ByID), id, err)
	}
	return "poisoned batch"
}

// ConsumerSpec names a durable pull consumer.
type ConsumerSpec struct {
	Stream         string
	Durable        string
	FilterSubjects []string
	BatchMax       int           // messages per fetch
	MaxWait        time.Duration // how long a fetch waits to fill a batch
	// AckWait is how long a delivered batch may stay unacknowledged before
	// it is redelivered when its consumer stopped; 0 means DefaultAckWait.
	// While the handler runs, the batch is reported in progress every
	// AckWait/4, so a slow handler is not delivered twice.
	AckWait time.Duration
	// HandleWithin bounds one handler call (its context is cancelled after
	// it); 0 means DefaultHandleWithin.
	HandleWithin time.Duration
	// DeadLetters keeps what cannot be applied; required.
	DeadLetters DeadLetters
}

// Consume runs a batched pull loop until ctx ends, and the replay of the
// consumer's dead letters beside it.
func Consume(ctx context.Context, js jetstream.JetStream, log *slog.Logger, spec ConsumerSpec, h Handler) error {
	if spec.DeadLetters == nil {
		return fmt.Errorf("consumer %s: no dead-letter sink", spec.Durable)
	}
	spec = spec.withDefaults()
	handlerTimeouts.WithLabelValues(spec.Durable) // the series exists at 0 from the start
	handlerPanics.WithLabelValues(spec.Durable)
	cons := createConsumer(ctx, js, log, spec, spec.consumerConfig())
	if cons == nil {
		return nil // ctx ended before NATS answered
	}
	c := &consumer{spec: spec, h: h, log: log, recreate: func(ctx context.Context) jetstream.Consumer {
		return createConsumer(ctx, js, log, spec, spec.consumerConfig())
	}}
	replayDone := make(chan struct{})
	go func() {
		defer close(replayDone)
		// A replay runs the handler as a pulled batch does: bounded by
		// HandleWithin, a panic an error of the call (a failed replay). Called
		// bare, a letter dead-lettered for a panic killed the process when
		// replayed, and one that hung held this consumer's replays for good.
		if err := spec.DeadLetters.Replay(ctx, spec.Durable, c.handle); err != nil && ctx.Err() == nil {
			log.Error("dead-letter replay stopped", "consumer", spec.Durable, "err", err)
		}
	}()
	defer func() { <-replayDone }()
	c.pull(ctx, cons)
	return nil
}

// withDefaults fills the batch size, fetch wait and ack wait left zero.
func (spec ConsumerSpec) withDefaults() ConsumerSpec {
	if spec.BatchMax <= 0 {
		spec.BatchMax = 100
	}
	if spec.MaxWait <= 0 {
		spec.MaxWait = fetchMaxWaitDefault
	}
	if spec.AckWait <= 0 {
		spec.AckWait = DefaultAckWait
	}
	if spec.HandleWithin <= 0 {
		spec.HandleWithin = DefaultHandleWithin
	}
	return spec
}

// consumerConfig is the durable consumer's JetStream configuration.
func (spec ConsumerSpec) consumerConfig() jetstream.ConsumerConfig {
	cc := jetstream.ConsumerConfig{
		Durable:       spec.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       spec.AckWait,
		MaxDeliver:    consumerMaxDeliver,
		MaxAckPending: consumerMaxAckPend,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	// One subject goes in FilterSubject: servers before 2.10 (such as
	// Debian 12's nats-server 2.9) refuse the multi-subject filter_subjects field.
	switch len(spec.FilterSubjects) {
	case 0:
	case 1:
		cc.FilterSubject = spec.FilterSubjects[0]
	default:
		cc.FilterSubjects = spec.FilterSubjects
	}
	return cc
}

type consumer struct {
	spec ConsumerSpec
	h    Handler
	log  *slog.Logger
	// recreate creates the durable consumer again (nil only when ctx ended).
	recreate func(ctx context.Context) jetstream.Consumer
}

// consumerGone: the durable consumer no longer exists (deleted, or its
// stream's store rebuilt without it). A pull to a deleted consumer is
// answered "consumer deleted" and then "no responders"; the latter also
// comes while a cluster elects the stream's leader, so the consumer's info
// decides.
func consumerGone(ctx context.Context, cons jetstream.Consumer, err error) bool {
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return true
	}
	if !errors.Is(err, nats.ErrNoResponders) {
		return false
	}
	_, err = cons.Info(ctx)
	return errors.Is(err, jetstream.ErrConsumerNotFound)
}

// pull fetches and processes batches until ctx ends, backing off
// (doubling up to failBackoffMax) while batches fail.
func (c *consumer) pull(ctx context.Context, cons jetstream.Consumer) {
	backoff := failBackoffBase
	for ctx.Err() == nil {
		msgs, err := c.fetch(ctx, cons)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			c.log.Warn("fetch failed", "consumer", c.spec.Durable, "err", err)
			sleep(ctx, backoff)
			if c.recreate != nil && consumerGone(ctx, cons, err) {
				c.log.Warn("consumer gone: creating it again", "consumer", c.spec.Durable, "stream", c.spec.Stream)
				if cons = c.recreate(ctx); cons == nil {
					break // ctx ended
				}
			}
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		if c.process(ctx, msgs) {
			backoff = failBackoffBase
			continue
		}
		if ctx.Err() != nil {
			break
		}
		sleep(ctx, backoff)
		backoff = min(backoff*2, failBackoffMax)
	}
}

// fetch waits up to MaxWait for a batch of up to BatchMax messages.
func (c *consumer) fetch(ctx context.Context, cons jetstream.Consumer) ([]jetstream.Msg, error) {
	batch, err := cons.Fetch(c.spec.BatchMax, jetstream.FetchMaxWait(c.spec.MaxWait))
	if err != nil {
		return nil, err
	}
	msgs := make([]jetstream.Msg, 0, c.spec.BatchMax)
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		if len(msgs) == 0 {
			// An immediate answer without messages (the consumer deleted,
			// no responders, the server shutting down): an error, backed
			// off, not a tight loop of fetches logged at debug.
			return nil, err
		}
		c.log.Debug("fetch ended", "consumer", c.spec.Durable, "err", err)
	}
	return msgs, nil
}

// process applies a batch and settles every message in it (ack, nak or dead
// letter). It reports whether the whole batch went through.
func (c *consumer) process(ctx context.Context, msgs []jetstream.Msg) bool {
	rest, err := c.apply(ctx, msgs)
	if err == nil {
		c.ack(rest)
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	c.log.Error("batch failed; trying its messages one at a time", "consumer", c.spec.Durable, "messages", len(rest), "err", err)
	// One at a time, in order: the good messages go through; the first that
	// fails alone is redelivered later (or dead-lettered at its last
	// delivery), and the ones after it are redelivered at once, untried, so
	// an outage costs one attempt per batch, not one per message.
	for i, m := range rest {
		one, err := c.apply(ctx, []jetstream.Msg{m})
		if err == nil {
			c.ack(one)
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		if !c.fail(ctx, m, err) {
			for _, r := range rest[i+1:] {
				c.nakFailed(r.Nak())
			}
			return false
		}
	}
	return false
}

// apply runs the handler; messages it names poisoned are dead-lettered and
// the rest applied again. It returns the messages left to settle: all but
// those dead-lettered (acknowledged), on an error too. When a dead letter
// was refused it returned the whole batch, and the poisoned messages
// dead-lettered before it were handled and dead-lettered again.
func (c *consumer) apply(ctx context.Context, msgs []jetstream.Msg) ([]jetstream.Msg, error) {
	for len(msgs) > 0 {
		err := c.handle(ctx, msgs)
		var pe *PoisonError
		if !errors.As(err, &pe) {
			return msgs, err
		}
		rest := make([]jetstream.Msg, 0, len(msgs))
		for i, m := range msgs {
			cause, bad := pe.ByID[MsgID(m)]
			if !bad {
				rest = append(rest, m)
				continue
			}
			if err := c.deadLetter(ctx, m, cause); err != nil {
				return append(rest, msgs[i:]...), err
			}
		}
		if len(rest) == len(msgs) {
			return msgs, fmt.Errorf("handler poisoned no message of its batch: %w", err)
		}
		msgs = rest
	}
	return nil, nil
}

// handle runs the handler on msgs, reporting them in progress to JetStream
// every AckWait/4 until it returns, so they are not redelivered to another
// consumer meanwhile; the call's context ends after HandleWithin. It is also
// the handler a dead letter's replay runs through.
func (c *consumer) handle(ctx context.Context, msgs []jetstream.Msg) error {
	ctx, cancel := context.WithTimeoutCause(ctx, c.spec.HandleWithin,
		fmt.Errorf("%w: handler of %s ran %s", errHandlerStuck, c.spec.Durable, c.spec.HandleWithin))
	defer cancel()
	done := make(chan struct{})
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		t := time.NewTicker(c.spec.AckWait / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// A lost heartbeat costs a duplicate delivery, deduplicated;
				// said once per beat, not once per message.
				var lost error
				for _, m := range msgs {
					if err := m.InProgress(); err != nil {
						lost = err
					}
				}
				if lost != nil {
					c.log.Warn("in-progress heartbeat failed; the batch may be redelivered (and deduplicated)", "consumer", c.spec.Durable, "err", lost)
				}
			}
		}
	}()
	ctx, span := processSpan(ctx, c.spec, msgs)
	err := c.call(ctx, msgs)
	if err != nil && errors.Is(context.Cause(ctx), errHandlerStuck) {
		handlerTimeouts.WithLabelValues(c.spec.Durable).Inc()
		err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
	}
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
	close(done)
	<-beat
	return err
}

// call runs the handler, a panic in it an error of the call: the
// process exited, its messages were delivered again after the restart, and
// the one that panicked brought every service of the process down again, a
// crash loop, never dead-lettered. As an error, the batch is tried one
// message at a time and the one that panics alone is dead-lettered at its
// last delivery, like any message that keeps failing.
func (c *consumer) call(ctx context.Context, msgs []jetstream.Msg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			handlerPanics.WithLabelValues(c.spec.Durable).Inc()
			c.log.Error("consumer handler panicked", "consumer", c.spec.Durable, "messages", len(msgs), "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler of %s panicked: %v", c.spec.Durable, p)
		}
	}()
	return c.h(ctx, msgs)
}

// handlerPanics counts handler calls that panicked.
var handlerPanics = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_consumer_handler_panics_total",
	Help: "Handler calls of a JetStream consumer that panicked (the panic is logged with its stack; the batch is tried one message at a time, and a message that keeps panicking is dead-lettered).",
}, []string{"consumer"})

// fail settles a message that failed alone: redelivered later, or, at its
// last delivery, tried once more and dead-lettered. It reports whether the
// message is settled for good.
func (c *consumer) fail(ctx context.Context, m jetstream.Msg, cause error) bool {
	n := deliveries(m)
	if n < DeadLetterDeliveries || Unavailable(cause) {
		c.nakFailed(m.NakWithDelay(min(nakDelayMin<<(min(n, 16)-1), nakDelayMax)))
		return false
	}
	// Once more, so a good message whose outage just ended is not kept.
	one, err := c.apply(ctx, []jetstream.Msg{m})
	if err == nil {
		c.ack(one)
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	if Unavailable(err) {
		c.nakFailed(m.NakWithDelay(nakDelayMax))
		return false
	}
	if err := c.deadLetter(ctx, m, err); err != nil {
		c.log.Error("dead letter not written; message will be redelivered", "consumer", c.spec.Durable, "msg_id", MsgID(m), "err", err)
		c.nakFailed(m.NakWithDelay(nakDelayMax))
		return false
	}
	return true
}

// deadLetter records m in the dead-letter table, then acks it.
func (c *consumer) deadLetter(ctx context.Context, m jetstream.Msg, cause error) error {
	if err := c.spec.DeadLetters.Put(ctx, c.spec.Durable, m, deliveries(m), cause); err != nil {
		return fmt.Errorf("dead-letter %s: %w", MsgID(m), err)
	}
	c.log.Error("message dead-lettered", "consumer", c.spec.Durable, "subject", m.Subject(), "msg_id", MsgID(m), "err", cause)
	if err := m.Ack(); err != nil {
		c.log.Warn("ack of a dead letter failed; a redelivery updates its row", "consumer", c.spec.Durable, "err", err)
	}
	return nil
}

func (c *consumer) ack(msgs []jetstream.Msg) {
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			c.log.Warn("ack failed; message will be redelivered and deduplicated", "consumer", c.spec.Durable, "err", err)
		}
	}
}

// nakFailed logs a refused negative ack: the message is not lost, JetStream
// redelivers it once its ack wait ends instead of after the nak's delay.
func (c *consumer) nakFailed(err error) {
	if err != nil {
		c.log.Warn("nak failed; message will be redelivered after its ack wait", "consumer", c.spec.Durable, "err", err)
	}
}

// deliveries is how many times m was delivered (1 when unknown, e.g. a replay).
func deliveries(m jetstream.Msg) int {
	md, err := m.Metadata()
	if err != nil || md.NumDelivered < 1 {
		return 1
	}
	return int(md.NumDelivered)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// MsgID returns the message's Nats-Msg-Id header, falling back to its stream
// sequence so every message has a stable identity.
func MsgID(m jetstream.Msg) string {
	if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return id
	}
	md, err := m.Metadata()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d", md.Stream, md.Sequence.Stream)
}

// HeaderStoredAt is the header a dead letter keeps its message's stream
// time in (RFC 3339, set by the dead-letter sink over anything the
// publisher put there): a replayed letter has no stream metadata.
const HeaderStoredAt = "Gpubill-Stored-At"

// StoredAt is when the stream stored m: its metadata's time, or for a
// replayed dead letter the time its sink kept; false when neither is known
// (a letter kept before the sink recorded it).
func StoredAt(m jetstream.Msg) (time.Time, bool) {
	if md, err := m.Metadata(); err == nil {
		return md.Timestamp.UTC(), true
	}
	t, err := time.Parse(time.RFC3339Nano, m.Headers().Get(HeaderStoredAt))
	return t.UTC(), err == nil
}

// errHandlerStuck is the cause of a handler call's context ending after
// HandleWithin.
var errHandlerStuck = errors.New("handler call exceeded its bound")

// handlerTimeouts counts handler calls cancelled after HandleWithin.
var handlerTimeouts = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_consumer_handler_timeouts_total",
	Help: "Handler calls of a JetStream consumer cancelled after running longer than their bound (natsx.DefaultHandleWithin); their messages are tried again.",
}, []string{"consumer"})

// consumerCreateRetries counts failed attempts to create or update a durable
// consumer (NATS down or restarting at start-up).
var consumerCreateRetries = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gpubill_consumer_create_retries_total",
	Help: "Failed attempts to create or update a durable JetStream consumer, each retried with backoff.",
}, []string{"consumer"})

// createConsumer creates or updates the durable consumer, retrying with
// backoff (logged and counted) until it succeeds or ctx ends, so a service
// started while NATS is unavailable waits for it instead of exiting; its
// readiness probe reports NATS unreachable meanwhile. It returns nil only
// when ctx ended.
func createConsumer(ctx context.Context, js jetstream.JetStream, log *slog.Logger, spec ConsumerSpec, cc jetstream.ConsumerConfig) jetstream.Consumer {
	return untilCreated(ctx, log, spec.Durable, spec.Stream, func() (jetstream.Consumer, error) {
		return js.CreateOrUpdateConsumer(ctx, spec.Stream, cc)
	})
}

// OrderedMessages starts an ordered consumer of stream and iterates its
// messages, retrying with backoff (logged, and counted under name in
// gpubill_consumer_create_retries_total) until it succeeds or ctx ends,
// as Consume does for durable consumers: a service started while NATS is
// unavailable waits for it instead of exiting (the chaos test saw payout
// exit on "context deadline exceeded" when NATS was killed as it started).
// It returns nil only when ctx ended.
func OrderedMessages(ctx context.Context, js jetstream.JetStream, log *slog.Logger, name, stream string, cfg jetstream.OrderedConsumerConfig) jetstream.MessagesContext {
	return untilCreated(ctx, log, name, stream, func() (jetstream.MessagesContext, error) {
		cons, err := js.OrderedConsumer(ctx, stream, cfg)
		if err != nil {
			return nil, err
		}
		return cons.Messages()
	})
}

// untilCreated calls create until it succeeds or ctx ends (then it returns
// the zero value), backing off and counting each failure.
func untilCreated[T any](ctx context.Context, log *slog.Logger, name, stream string, create func() (T, error)) T {
	backoff := failBackoffBase
	for {
		v, err := create()
		if err == nil {
			return v
		}
		if ctx.Err() != nil {
			var zero T
			return zero
		}
		consumerCreateRetries.WithLabelValues(name).Inc()
		log.Warn("consumer not created, retrying", "consumer", name, "stream", stream, "err", err, "retry_in", backoff)
		sleep(ctx, backoff)
		backoff = min(backoff*2, consumerCreateBackoffMax)
	}
}

// consumerCreateBackoffMax bounds the wait between attempts to create a consumer.
const consumerCreateBackoffMax = 5 * time.Second
