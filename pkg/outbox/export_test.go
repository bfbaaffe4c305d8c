package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
)

// PrunePublished runs one pruning round (the relay runs one every
// publishedPruneEach).
func (r *Relay) PrunePublished(ctx context.Context) error { return r.prunePublished(ctx) }

// SplitToFit is splitToFit: what the relay publishes for one row.
func SplitToFit(id, subject string, payload []byte, limit int) []*nats.Msg {
	return splitToFit(id, subject, payload, limit)
}

// Holding reports whether payloads are held for schema on pool.
func Holding(pool *pgxpool.Pool, schema string) bool { return holding(outboxOf{pool, schema}) }

// Lead marks schema on pool as led by a relay of this process until the
// returned func is called.
func Lead(pool *pgxpool.Pool, schema string) (release func()) { return lead(outboxOf{pool, schema}) }

// ReadBatch is one round's read of schema's outbox: the ids of its rows, in order.
func (r *Relay) ReadBatch(ctx context.Context) ([]string, error) {
	rows, err := r.readBatch(ctx, pgx.Identifier{r.Schema, "outbox"}.Sanitize())
	ids := make([]string, len(rows))
	for i, x := range rows {
		ids[i] = x.id
	}
	return ids, err
}
