package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/group"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// groupMax bounds the API transactions committed together.
const groupMax = 256

// Group commit for API writes: concurrent manual entries and deposits are
// posted in one Postgres transaction, so a hot account (bank:client takes
// every deposit) is locked and fsynced once per group instead of once per
// call. The groups run on a goroutine of the queue's (pkg/group, Detach),
// started by the first caller to find no committer running; every caller
// waits for its result, or for its own context to end. A group
// that fails as a whole (an overdraft, any error) is retried one transaction
// at a time, so each caller gets exactly its own answer. Overdrafts are
// judged as if the group's writes were posted one at a time in queue order
// (domain.Draws), not on the group's net change.
//
// A write has GroupTimeout (DefaultGroupTimeout) from when it was queued
// for its group's database work, its retries included: a group runs until
// its oldest write's time is up, on this side (its context) and on the
// server (the statement_timeout of PostNew's transaction; a statement of
// Store.WithTx is cancelled on the server when the context ends, pgx's
// cancel request as it closes the connection), so a write queued behind a
// group the database held waits the limit in all, not the held group's
// time and then a whole limit of its own. A database that hangs
// without refusing (a partition, a lock held) held every API write of the
// process for ever, each group behind the one stuck. A group that runs out
// of it answers each of its writes ErrUnavailable (503, retry): the write
// may have committed all the same (a COMMIT the answer of which was lost),
// and a retry under the same idempotency key answers the transaction then
// posted, or posts it once. A caller whose own context ends while its
// group waits or runs is answered its context's error at once, with the
// same caveat.
type groupReq struct {
	t     *domain.Transaction
	audit Audited             // its audit record, if the write takes it (stored with the write: PostNew, addAudited)
	id    string              // the posted (or original, on a replay) transaction id
	tx    *domain.Transaction // the answer when known without a read (t, posted fresh)
	err   error
	gone  func() error // the caller's context's Err: a write whose caller has gone before its group runs is not posted
	until time.Time    // when the write's time is up: queued, plus the group timeout
}

// DefaultGroupTimeout bounds a group commit's database work when
// App.GroupTimeout is unset (GPUBILL_LEDGER_GROUP_COMMIT_TIMEOUT): a group
// of 256 writes commits in milliseconds, and its per-write retries in well
// under a second.
const DefaultGroupTimeout = 10 * time.Second

// groupTimeout is the bound of one group commit.
func (a *App) groupTimeout() time.Duration {
	if a.GroupTimeout > 0 {
		return a.GroupTimeout
	}
	return DefaultGroupTimeout
}

// newGroups is the App's queue of API writes.
func (a *App) newGroups() *group.Queue[*groupReq] {
	return &group.Queue[*groupReq]{Max: groupMax, Run: a.commitBatch, Detach: true}
}

// postGrouped posts t in a group commit, or alone when postsAlone: its
// checks are postOne's only, whoever queues it.
func (a *App) postGrouped(ctx context.Context, t *domain.Transaction, au Audited) (*domain.Transaction, error) {
	if postsAlone(t) {
		return a.postOne(ctx, t, au, nil)
	}
	r := &groupReq{t: t, audit: au, gone: ctx.Err, until: time.Now().Add(a.groupTimeout())}
	done := a.group.Add(ctx, r)
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done: // answered as the context ended: the answer
		default:
			return nil, callerGone(t, ctx.Err())
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	markReplayed(ctx, t, r.id)
	if r.tx != nil {
		return r.tx, nil
	}
	return a.getTransaction(ctx, r.id)
}

// markReplayed notes in the audit record of the write ctx serves that its
// answer is the transaction an earlier request under t's key posted (id),
// not one it posted: recorded alike, a replay read as a second entry.
// Only with the caller's ctx: a group's (the first caller's, less its
// cancellation) would mark that caller's record.
func markReplayed(ctx context.Context, t *domain.Transaction, id string) {
	if id != t.ID {
		audit.Note(ctx, "replayed=true")
	}
}

// callerGone is the answer of a write whose caller's context ended (err)
// before its group's answer.
func callerGone(t *domain.Transaction, err error) error {
	return fmt.Errorf("transaction %q: stopped waiting for its group commit, which may still post it "+
		"(a retry with the same idempotency key answers it): %w", t.IdempotencyKey, err)
}

// The group commit's own figures. Groups run one after another, so the
// rate of the time's sum is the share of time the write path is busy: near
// 1, API writes queue behind it (their latency is then the queue's, and
// larger groups are what lets more through).
var (
	writeGroupSize = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "gpubill_ledger_write_group_size",
		Help:    "API writes (manual entries, deposits, settlement postings) committed in one group commit.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, groupMax},
	})
	writeGroupSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name: "gpubill_ledger_write_group_seconds",
		Help: "Time one group commit of API writes took, until its writes' answers were known (the per-write retries of a group that failed included); " +
			"groups run one at a time per process, so rate() of the sum is the share of time the write path was busy.",
		Buckets: prometheus.ExponentialBuckets(0.00025, 2, 12), // 0.25 ms to 0.5 s
	})
	writeGroupTimeouts = promauto.NewCounter(prometheus.CounterOpts{
		Name: "gpubill_ledger_write_group_timeouts_total",
		Help: "Group commits of API writes that ran out of their time (GPUBILL_LEDGER_GROUP_COMMIT_TIMEOUT): the database hung without refusing; " +
			"each of the group's writes was answered unavailable (retry with the same idempotency key).",
	})
)

// commitBatch commits a group and answers each of its writes, one at a
// time when the group fails as a whole.
func (a *App) commitBatch(ctx context.Context, batch []*groupReq) {
	if batch = withCallers(batch); len(batch) == 0 {
		return
	}
	start := time.Now()
	defer func() {
		writeGroupSize.Observe(float64(len(batch)))
		writeGroupSeconds.Observe(time.Since(start).Seconds())
	}()
	timeout := a.groupTimeout()
	ctx, cancel := context.WithDeadline(ctx, batch[0].until) // the oldest's: the queue keeps its order
	defer cancel()
	err := a.commitGroup(ctx, batch)
	if err == nil {
		return
	}
	if groupTimedOut(ctx, err) {
		a.answerTimedOut(batch, timeout, err)
		return
	}
	for i, r := range batch { // one at a time: each gets its own answer
		res, err := a.postOne(ctx, r.t, r.audit, nil)
		if err != nil && groupTimedOut(ctx, err) {
			a.answerTimedOut(batch[i:], timeout, err)
			return
		}
		r.id, r.tx, r.err = "", nil, err
		if err == nil {
			r.id, r.tx = res.ID, res
		}
	}
}

// withCallers is batch less the writes whose callers have gone (their
// contexts ended while they queued, behind a group the database held):
// those are answered their context's error and never posted.
func withCallers(batch []*groupReq) []*groupReq {
	var kept []*groupReq // nil while every caller waits
	for i, r := range batch {
		err := r.gone()
		switch {
		case err != nil && kept == nil:
			kept = append(make([]*groupReq, 0, len(batch)), batch[:i]...)
			fallthrough
		case err != nil:
			r.err = callerGone(r.t, err)
		case kept != nil:
			kept = append(kept, r)
		}
	}
	if kept == nil {
		return batch
	}
	return kept
}

// groupTimedOut reports whether err ended a group that ran out of its time
// (ctx's deadline): on this side, or on the server (Store.PostNew answers
// the statement_timeout it set from ctx's deadline as one).
func groupTimedOut(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)
}

// answerTimedOut answers each of rs, writes of a group that ran out of its
// time (err), unavailable: the database's work was abandoned (rolled back,
// unless the COMMIT was what went unanswered), the caller may retry under
// its idempotency key. The cause goes to the log, not to the client.
func (a *App) answerTimedOut(rs []*groupReq, timeout time.Duration, err error) {
	writeGroupTimeouts.Inc()
	a.Log.Error("ledger write group commit timed out: its writes answered unavailable", "writes", len(rs), "timeout", timeout, "err", err)
	uerr := fmt.Errorf("the ledger's write did not complete within %s (the database did not answer); it may have been posted: "+
		"retry with the same idempotency key: %w", timeout, apperr.ErrUnavailable)
	for _, r := range rs {
		r.id, r.tx, r.err = "", nil, uerr
	}
}

var errGroupRetry = errors.New("group needs per-transaction retry")

// commitGroup commits a group (one transaction or more) and answers each
// of its callers; errGroupRetry when each must be posted alone.
func (a *App) commitGroup(ctx context.Context, batch []*groupReq) error {
	txs := make([]*domain.Transaction, len(batch))
	keys := map[string]bool{}
	for i, r := range batch {
		if keys[r.t.IdempotencyKey] {
			return errGroupRetry // the same key twice in a group: let the plain path decide
		}
		keys[r.t.IdempotencyKey] = true
		txs[i] = r.t
	}
	if len(touchedCycles(txs)) == 0 {
		err := a.commitNewGroup(ctx, batch, txs)
		if !errors.Is(err, ErrUsePost) {
			return err
		}
	}
	if len(batch) == 1 {
		return errGroupRetry // nothing to share: the plain path
	}
	var changes []domain.BalanceChange
	var claims []*audit.Claim
	err := a.Store.WithTx(ctx, func(tx Tx) error {
		claims = nil // a retried attempt starts afresh
		if err := lockTouchedCycles(ctx, tx, txs); err != nil {
			return err
		}
		fresh, ch, err := tx.Post(ctx, txs)
		if err != nil {
			return err
		}
		if a.checkClosedCycles(ctx, tx, fresh, ch, false) != nil || domain.Overdrawn(fresh, ch) {
			return errGroupRetry // judged in queue order, as each alone
		}
		isFresh := make(map[string]bool, len(fresh))
		for _, t := range fresh {
			isFresh[t.ID] = true
		}
		var audited []Audited
		for _, r := range batch {
			r.id, r.tx, r.err = r.t.ID, nil, nil
			if isFresh[r.t.ID] {
				r.tx = posted(r.t)
				audited = append(audited, r.audit)
				continue
			}
			id, h, err := tx.TxByKey(ctx, r.t.IdempotencyKey)
			if err != nil {
				return err
			}
			r.id = id
			if !bytes.Equal(h, r.t.RequestHash[:]) {
				r.err = fmt.Errorf("idempotency key %q was used for a different request (transaction %s): %w",
					r.t.IdempotencyKey, id, apperr.ErrConflict)
			}
		}
		if claims, err = addAudited(ctx, tx, audited...); err != nil {
			return err
		}
		changes = ch
		return tx.PublishDepletions(ctx, domain.Depletions(fresh, ch, a.now()))
	})
	if err != nil {
		return err
	}
	stored(claims)
	a.Store.Remember(changes)
	return nil
}

// commitNewGroup commits a group none of whose transactions touches a
// cycle's pending account (no cycle lock, no closed-cycle check), every one
// of them new and no balance needing judging, in one round trip
// (Store.PostNew); ErrUsePost when it cannot.
func (a *App) commitNewGroup(ctx context.Context, batch []*groupReq, txs []*domain.Transaction) error {
	var audited []Audited
	for _, r := range batch {
		if r.audit.Claim != nil {
			audited = append(audited, r.audit)
		}
	}
	changes, err := a.Store.PostNew(ctx, txs, audited)
	if err != nil {
		return err
	}
	for _, r := range batch {
		r.id, r.tx, r.err = r.t.ID, posted(r.t), nil
	}
	a.Store.Remember(changes)
	return nil
}
