package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/pkg/group"
)

// A store's shared batches, by default: groups of up to BatchMax callers,
// each waiting at most BatchLinger (from its oldest caller) to fill. At a
// cycle's close (hundreds of providers in flight) groups fill in the
// linger; a caller alone waits it out.
const (
	BatchMax    = 64
	BatchLinger = 20 * time.Millisecond
)

// batchTimeout bounds one shared batch: it carries other callers' statements,
// so it runs without any caller's cancellation.
const batchTimeout = 30 * time.Second

// Batches sends the statements of concurrent callers together: the
// statements queued within a linger go to Postgres as one pgx batch, one
// round trip and one implicit transaction, so one commit. A shared batch
// that fails (any statement's error aborts all of it) is sent again one
// caller at a time, so each caller gets exactly its own answer. For
// statements that many callers run at once, each in a transaction of its
// own: settlement's and the tax service's per-provider statements in a
// cycle's close.
//
// A caller's statements must be safe to run again (idempotent): a caller
// whose context ends stops waiting, but its statements may still run with
// the group's. The caller that finds no group running runs the groups
// (pkg/group) and waits for them whatever its context: at most the linger
// and batchTimeout per group.
type Batches struct {
	pool   *pgxpool.Pool
	queue  group.Queue[*batchCall]
	calls  prometheus.Observer
	resent prometheus.Counter
}

// Each store's batches are counted under its name.
var (
	batchCalls = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpubill_pg_batch_calls",
		Help:    "Callers whose statements went to Postgres in one shared batch (pg.Batches), by store.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
	}, []string{"batches"})
	batchResent = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_pg_batch_resent_total",
		Help: "Shared batches that failed and were sent again one caller at a time (each caller then gets its own answer), by store.",
	}, []string{"batches"})
)

type batchCall struct {
	queue func(b *pgx.Batch)
	err   error
}

// NewBatches groups up to max callers' statements, each group waiting at
// most linger (from its oldest caller) to fill; name labels its metrics.
func NewBatches(pool *pgxpool.Pool, name string, max int, linger time.Duration) *Batches {
	b := &Batches{pool: pool, calls: batchCalls.WithLabelValues(name), resent: batchResent.WithLabelValues(name)}
	b.queue = group.Queue[*batchCall]{Max: max, Linger: linger, Run: b.run}
	return b
}

// Do runs the statements queue adds to b (with their result callbacks)
// in a shared batch, and returns their error. queue may be called more
// than once (when a shared batch fails): it sets its results afresh.
func (b *Batches) Do(ctx context.Context, queue func(b *pgx.Batch)) error {
	c := &batchCall{queue: queue}
	select {
	case <-b.queue.Add(ctx, c):
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Batches) run(ctx context.Context, calls []*batchCall) {
	b.calls.Observe(float64(len(calls)))
	err := b.send(ctx, calls)
	if err == nil || len(calls) == 1 {
		for _, c := range calls {
			c.err = err
		}
		return
	}
	b.resent.Inc()
	for _, c := range calls {
		c.err = b.send(ctx, []*batchCall{c})
	}
}

// send sends the calls' statements as one batch.
func (b *Batches) send(ctx context.Context, calls []*batchCall) error {
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	batch := &pgx.Batch{}
	for _, c := range calls {
		c.queue(batch)
	}
	return b.pool.SendBatch(ctx, batch).Close()
}
