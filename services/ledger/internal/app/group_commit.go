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
	"github.com/gpubill/gpubill/pkg/group"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// groupMax bounds the API transactions committed together.
const groupMax = 256

// Group commit for API writes: concurrent manual entries and deposits are
// posted in one Postgres transaction, so a hot account (bank:client takes
// every deposit) is locked and fsynced once per group instead of once per
// call. No background goroutine (pkg/group): the first caller to find no
// committer running becomes it; the others wait for their result. A group
// that fails as a whole (an overdraft, any error) is retried one transaction
// at a time, so each caller gets exactly its own answer. Overdrafts are
// judged as if the group's writes were posted one at a time in queue order
// (domain.Draws), not on the group's net change.
type groupReq struct {
	t     *domain.Transaction
	audit Audited             // its audit record, if the write takes it (PostNew stores it with the write)
	id    string              // the posted (or original, on a replay) transaction id
	tx    *domain.Transaction // the answer when known without a read (t, posted fresh)
	err   error
}

// newGroups is the App's queue of API writes.
func (a *App) newGroups() *group.Queue[*groupReq] {
	return &group.Queue[*groupReq]{Max: groupMax, Run: a.commitBatch}
}

func (a *App) postGrouped(ctx context.Context, t *domain.Transaction, au Audited) (*domain.Transaction, error) {
	r := &groupReq{t: t, audit: au}
	select {
	case <-a.group.Add(ctx, r):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.tx != nil {
		return r.tx, nil
	}
	return a.getTransaction(ctx, r.id)
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
)

// commitBatch commits a group and answers each of its writes, one at a
// time when the group fails as a whole.
func (a *App) commitBatch(ctx context.Context, batch []*groupReq) {
	start := time.Now()
	defer func() {
		writeGroupSize.Observe(float64(len(batch)))
		writeGroupSeconds.Observe(time.Since(start).Seconds())
	}()
	if err := a.commitGroup(ctx, batch); err != nil {
		for _, r := range batch { // one at a time: each gets its own answer
			res, err := a.postOne(ctx, r.t, nil)
			if err == nil {
				r.id, r.tx = res.ID, res
			}
			r.err = err
		}
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
	err := a.Store.WithTx(ctx, func(tx Tx) error {
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
		for _, r := range batch {
			r.id, r.tx, r.err = r.t.ID, nil, nil
			if isFresh[r.t.ID] {
				r.tx = posted(r.t)
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
		changes = ch
		return tx.PublishDepletions(ctx, domain.Depletions(fresh, ch, a.now()))
	})
	if err != nil {
		return err
	}
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
