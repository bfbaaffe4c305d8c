package pg

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// batchTimeout bounds one shared batch on this side: it carries other
// callers' statements, so it runs without any caller's cancellation.
// batchServerTimeout bounds each of its statements, and any lock wait, on
// the server (statement_timeout and lock_timeout, local to the batch's
// transaction), and is shorter: a client that gave up on a batch only
// closes its connection, and a statement blocked on a lock would go on
// running without it, holding the locks the batch had taken (each caller's
// resend would then block on them in turn).
var (
	batchTimeout       = 30 * time.Second
	batchServerTimeout = 20 * time.Second
)

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
// and batchTimeout per group, and batchTimeout per caller resent.
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
		Help: "Shared batches that a statement's error failed and that were sent again one caller at a time (each caller then gets its own answer), by store.",
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
//
// A caller whose ctx ends gets ctx's error, unless its group has run by
// then (so the caller that runs a group, which returns only once it has,
// always gets the group's answer). A caller that stops waiting may see its
// statements commit all the same, with the group's: they must be safe to
// run again, and queue's callbacks must write only what the caller reads
// after a nil error.
func (b *Batches) Do(ctx context.Context, queue func(b *pgx.Batch)) error {
	c := &batchCall{queue: queue}
	done := b.queue.Add(ctx, c)
	select {
	case <-done:
		return c.err
	case <-ctx.Done():
		select {
		case <-done:
			return c.err
		default:
			return ctx.Err()
		}
	}
}

func (b *Batches) run(ctx context.Context, calls []*batchCall) {
	b.calls.Observe(float64(len(calls)))
	err := b.send(ctx, calls)
	if err == nil || len(calls) == 1 || !statementFailed(err) {
		for _, c := range calls {
			c.err = err
		}
		return
	}
	b.resent.Inc()
	for i, c := range calls {
		c.err = b.send(ctx, []*batchCall{c})
		if c.err != nil && !statementFailed(c.err) { // the server or the connection: the rest would fail alike
			for _, rest := range calls[i+1:] {
				rest.err = c.err
			}
			return
		}
	}
}

// statementFailed tells whether err is a statement's own error, which one
// caller's statements may cause and the others' not: Postgres answered
// with an error that is neither a timeout nor a lock wait given up.
func statementFailed(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "57014", // query_canceled: statement_timeout
		"55P03",                   // lock_not_available: lock_timeout
		"57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
		return false
	}
	return true
}

// send sends the calls' statements as one batch, its statement and lock
// timeouts first.
func (b *Batches) send(ctx context.Context, calls []*batchCall) error {
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	batch := &pgx.Batch{}
	ms := strconv.FormatInt(batchServerTimeout.Milliseconds(), 10)
	batch.Queue(`select set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true)`, ms)
	for _, c := range calls {
		c.queue(batch)
	}
	return b.pool.SendBatch(ctx, batch).Close()
}
