package outbox

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Published messages are kept in <schema>.outbox_published until every
// durable consumer of their stream whose filter takes them has acked past
// them (or PublishedKeepMax has passed, for a consumer that never will):
// then a database snapshot holds every message JetStream still held for a
// consumer, and RequeuePublished after a restore publishes them again into
// a new JetStream store. Every consumer applies a message id at most once
// (its inbox, in the same snapshot), so those it had applied change
// nothing.
const (
	PublishedKeepMax   = 7 * 24 * time.Hour
	publishedPruneEach = 10 * time.Second
)

// movePublished moves the acked outbox rows ($1 seqs, with their streams
// $2 and stream sequences $3) into outbox_published in one statement.
func movePublished(schema string) string {
	return fmt.Sprintf(`with d as (delete from %s where seq = any($1) returning seq, id, subject, payload, created_at)
		insert into %s (seq, id, subject, payload, created_at, stream, stream_seq)
		select d.seq, d.id, d.subject, d.payload, d.created_at, u.stream, u.sseq
		from d join unnest($1::bigint[], $2::text[], $3::bigint[]) as u(seq, stream, sseq) using (seq)
		on conflict (seq) do nothing`,
		pgx.Identifier{schema, "outbox"}.Sanitize(), pgx.Identifier{schema, "outbox_published"}.Sanitize())
}

// prunePublished deletes the kept messages every consumer that takes them
// has acked, stream by stream, and any older than PublishedKeepMax.
func (r *Relay) prunePublished(ctx context.Context) error {
	tbl := pgx.Identifier{r.Schema, "outbox_published"}.Sanitize()
	if _, err := r.Pool.Exec(ctx, `delete from `+tbl+` where published_at < $1`, time.Now().Add(-PublishedKeepMax)); err != nil {
		return fmt.Errorf("prune published messages past %s: %w", PublishedKeepMax, err)
	}
	rows, err := r.Pool.Query(ctx, `select distinct stream from `+tbl)
	if err != nil {
		return fmt.Errorf("streams of published messages: %w", err)
	}
	streams, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("streams of published messages: %w", err)
	}
	for _, name := range streams {
		patterns, floors, err := r.ackFloors(ctx, name)
		if err != nil {
			return err
		}
		if _, err := r.Pool.Exec(ctx, `delete from `+tbl+` p where stream = $1 and not exists (
			select 1 from unnest($2::text[], $3::bigint[]) as c(pattern, floor) where p.subject ~ c.pattern and p.stream_seq > c.floor)`,
			name, patterns, floors); err != nil {
			return fmt.Errorf("prune published messages of %s: %w", name, err)
		}
	}
	return nil
}

// ackFloors returns, for each durable consumer of the stream and each of
// its filters, the filter as an anchored regular expression and the stream
// sequence up to which the consumer has acked everything.
func (r *Relay) ackFloors(ctx context.Context, stream string) ([]string, []int64, error) {
	st, err := r.JS.Stream(ctx, stream)
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	var patterns []string
	var floors []int64
	l := st.ListConsumers(ctx)
	for ci := range l.Info() {
		filters := ci.Config.FilterSubjects
		if ci.Config.FilterSubject != "" {
			filters = append(filters, ci.Config.FilterSubject)
		}
		if len(filters) == 0 {
			filters = []string{">"}
		}
		for _, f := range filters {
			patterns = append(patterns, FilterPattern(f))
			floors = append(floors, int64(ci.AckFloor.Stream))
		}
	}
	if err := l.Err(); err != nil {
		return nil, nil, fmt.Errorf("consumers of %s: %w", stream, err)
	}
	return patterns, floors, nil
}

// FilterPattern turns a NATS subject filter (tokens, * for one, > for the
// rest) into an anchored POSIX regular expression for Postgres' ~.
func FilterPattern(filter string) string {
	toks := strings.Split(filter, ".")
	for i, t := range toks {
		switch t {
		case "*":
			toks[i] = `[^.]+`
		case ">":
			toks[i] = `.+`
		default:
			toks[i] = regexp.QuoteMeta(t)
		}
	}
	return "^" + strings.Join(toks, `\.`) + "$"
}

// Execer is what RequeuePublished needs: a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// RequeuePublished moves every kept published message of the schema back
// into its outbox, under its original seq (so in its original order before
// anything not yet published), for the relay to publish again: after a
// restore into a new JetStream store. It returns how many it moved.
func RequeuePublished(ctx context.Context, q Execer, schema string) (int64, error) {
	tag, err := q.Exec(ctx, fmt.Sprintf(`with d as (delete from %s returning seq, id, subject, payload, created_at)
		insert into %s (seq, id, subject, payload, created_at) select seq, id, subject, payload, created_at from d
		on conflict do nothing`, pgx.Identifier{schema, "outbox_published"}.Sanitize(), pgx.Identifier{schema, "outbox"}.Sanitize()))
	if err != nil {
		return 0, fmt.Errorf("requeue published messages of %s: %w", schema, err)
	}
	return tag.RowsAffected(), nil
}
