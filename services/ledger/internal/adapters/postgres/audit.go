package postgres

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// StoreAuditEvents appends events in their order (seq); a repeat (same
// event id, a redelivery, or twice in evs) changes nothing.
//
// Each record is chained to the one before it (domain.AuditHash: prev_hash
// and hash, migration ledger/0030), so a record deleted or edited by the
// owner of the table with its trigger disabled breaks the chain ledger
// verify walks. The chain is extended where seqs were already serialised:
// under the audit log's write lock the batch reads the last record's seq
// and hash, gives its records the seqs after it (consecutive: nothing is
// drawn from a sequence, so a failed COPY skips none) and hashes them in
// the same COPY.
//
// A batch is one binary COPY when it repeats no event id: the usual case,
// as the consumer's inbox of message ids lets few redeliveries through.
// A stored id fails the COPY on the unique key (nothing of it is kept),
// and the batch is copied again without the stored ids, looked up under
// the lock. Against an INSERT of the batch alone (unnest of ten arrays,
// ON CONFLICT's check of the key before each row) the COPY took 18.8–19.2
// µs of statement time per record instead of 24.7–25.7
// (pg_stat_statements, the ledger_api benchmark with the service's workers
// running, two runs each); a statement per record took ~38.
func (s *Store) StoreAuditEvents(ctx context.Context, evs []domain.AuditEvent) error {
	if len(evs) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(evs))
	for _, e := range evs {
		seen[e.EventID] = true
	}
	if len(seen) == len(evs) {
		err := s.inAuditOrder(ctx, func(tx pgx.Tx) error { return copyAuditEvents(ctx, tx, evs) })
		if err == nil {
			return nil
		}
		if !pg.IsUniqueViolation(err) {
			return fmt.Errorf("store audit events: %w", err)
		}
	}
	err := s.inAuditOrder(ctx, func(tx pgx.Tx) error {
		fresh, err := unstoredAuditEvents(ctx, tx, evs)
		if err != nil {
			return err
		}
		return copyAuditEvents(ctx, tx, fresh)
	})
	if err != nil {
		return fmt.Errorf("store audit events: %w", err)
	}
	return nil
}

// inAuditOrder runs fn, a write of audit records, in a transaction holding
// the audit log's write lock: writers (every replica's consumer) take seqs
// and commit one at a time, so a record commits above every record already
// visible. The log is listed by seq, newest first, a page's token the seq it
// ended at; without the lock a batch that took its seqs first and
// committed last (two replicas' COPYs side by side) landed below a page a
// client had read, and was never listed to it
// (TestAuditRecordsCommitInSeqOrder). The chain needs the same: a batch
// hashes after the record last committed.
func (s *Store) inAuditOrder(ctx context.Context, fn func(pgx.Tx) error) error {
	return pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.ledger.audit_events'))`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// auditHeadSQL reads the transaction's start (stored_at's default, the
// same instant for the batch) and the chain's last record (none: nulls).
const auditHeadSQL = `select now(), h.seq, h.hash from (select) one
	left join lateral (select seq, hash from ledger.audit_events order by seq desc limit 1) h on true`

// auditCopySQL copies auditCopy's stream into the audit log.
const auditCopySQL = `copy ledger.audit_events (seq, event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr,
		stored_at, prev_hash, hash)
	from stdin (format binary)`

// copyAuditEvents appends evs, in order, after the chain's last record;
// tx holds the audit log's write lock.
func copyAuditEvents(ctx context.Context, tx pgx.Tx, evs []domain.AuditEvent) error {
	if len(evs) == 0 {
		return nil
	}
	var now time.Time
	var last *int64
	var prev []byte
	if err := tx.QueryRow(ctx, auditHeadSQL).Scan(&now, &last, &prev); err != nil {
		return fmt.Errorf("audit chain head: %w", err)
	}
	seq := int64(0)
	if last != nil {
		seq = *last
	} else {
		prev = domain.AuditGenesisHash
	}
	_, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(auditCopy(evs, seq, prev, now)), auditCopySQL)
	return err
}

// auditCopy is evs, in order, as a binary COPY stream of auditCopySQL's
// columns: seqs from after, chained from prev, stored at.
func auditCopy(evs []domain.AuditEvent, after int64, prev []byte, at time.Time) []byte {
	w := pg.NewCopyWriter(len(evs) * 320)
	for i, e := range evs {
		rec := domain.StoredAuditEvent{Seq: after + int64(i) + 1, AuditEvent: e, StoredAt: at}
		h := domain.AuditHash(prev, rec)
		w.Row(14)
		w.Int8(rec.Seq)
		w.Text(e.EventID)
		w.Timestamptz(e.At)
		w.Text(e.Service)
		w.Text(e.Method)
		w.Text(e.Actor)
		w.Text(e.Role)
		w.TextArray(e.ResourceIDs)
		w.Text(e.RequestID)
		w.Text(e.Code)
		w.Text(e.ClientAddr)
		w.Timestamptz(at)
		w.Bytea(prev)
		w.Bytea(h)
		prev = h
	}
	return w.Done()
}

// unstoredAuditEvents is evs without the events whose id is stored, each
// id once (its first), in order; tx holds the audit log's write lock, so
// none is stored meanwhile.
func unstoredAuditEvents(ctx context.Context, tx pgx.Tx, evs []domain.AuditEvent) ([]domain.AuditEvent, error) {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.EventID
	}
	rows, err := tx.Query(ctx, `select event_id from ledger.audit_events where event_id = any($1)`, ids)
	if err != nil {
		return nil, err
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	skip := make(map[string]bool, len(evs))
	for _, id := range stored {
		skip[id] = true
	}
	var out []domain.AuditEvent
	for _, e := range evs {
		if !skip[e.EventID] {
			skip[e.EventID] = true
			out = append(out, e)
		}
	}
	return out, nil
}

// auditListSQL lists the audit log newest first under auditListQuery's
// filters.
const auditListSQL = `select seq, event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr, stored_at
	from ledger.audit_events
	where ($1 = '' or actor = $1)
	  and ($2 = '' or method = $2 or right(method, length($2) + 1) = '/' || $2) -- its last part, exactly: LIKE took % and _ as wildcards, a trailing backslash made a 500
	  and ($3::timestamptz is null or at >= $3)
	  and ($4::timestamptz is null or at < $4)
	  and ($5 = 0 or seq < $5)`

// auditResourceSQL is auditListSQL's resource filter: containment, which
// the GIN on resource_ids answers (migration ledger/0033).
const auditResourceSQL = `
	  and resource_ids @> array[$7::text]`

// auditListQuery is the statement listing f and its arguments. Listed by
// resource, the records are matched first (a materialized CTE) and only
// then ordered. PostgreSQL takes an entry its statistics do not hold (a
// transaction recorded since the last analyze, most ids once the log is
// large) for 0.5% of the log, and the order by seq with a limit for a walk
// down the primary key that meets a page of them early: it walked the
// whole log for the two records of a transaction (60 000 records, a page
// of 100: Index Scan Backward using audit_events_pkey;
// TestAuditListingByResourceUsesItsIndex). The price falls on an entry
// most records hold (currency=CNY): every match is read and sorted for
// each page, not just a page of them; such an entry names no transaction
// or payout, which this filter is for.
func auditListQuery(f app.AuditFilter) (string, []any) {
	args := []any{f.Actor, f.Method, f.From, f.To, f.Before, f.Limit}
	if f.Resource != "" {
		return `with touched as materialized (` + auditListSQL + auditResourceSQL + `)
	select * from touched order by seq desc limit $6`, append(args, f.Resource)
	}
	return auditListSQL + `
	order by seq desc limit $6`, args
}

// ListAuditEvents answers newest first, at most f.Limit.
func (s *Store) ListAuditEvents(ctx context.Context, f app.AuditFilter) ([]domain.StoredAuditEvent, error) {
	q, args := auditListQuery(f)
	rows, err := s.Pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	defer rows.Close()
	var out []domain.StoredAuditEvent
	for rows.Next() {
		var e domain.StoredAuditEvent
		if err := rows.Scan(&e.Seq, &e.EventID, &e.At, &e.Service, &e.Method, &e.Actor, &e.Role,
			&e.ResourceIDs, &e.RequestID, &e.Code, &e.ClientAddr, &e.StoredAt); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	return out, nil
}
