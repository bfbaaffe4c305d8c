package postgres

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// StoreAuditEvents appends events in their order (seq); a repeat (same
// event id, a redelivery, or twice in evs) changes nothing.
//
// A batch is one binary COPY when it repeats no event id: the usual case,
// as the consumer's inbox of message ids lets few redeliveries through.
// A stored id fails the COPY on the unique key (nothing of it is kept;
// its sequence numbers are skipped), and the batch is inserted again
// skipping stored ids, in one statement. Against that statement alone
// (unnest of ten arrays, ON CONFLICT's check of the key before each row)
// the COPY took 18.8–19.2 µs of statement time per record instead of
// 24.7–25.7 (pg_stat_statements, the ledger_api benchmark with the
// service's workers running, two runs each); a statement per record took
// ~38.
func (s *Store) StoreAuditEvents(ctx context.Context, evs []domain.AuditEvent) error {
	if len(evs) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(evs))
	for _, e := range evs {
		seen[e.EventID] = true
	}
	if len(seen) == len(evs) {
		err := s.inAuditOrder(ctx, func(tx pgx.Tx) error {
			_, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(auditCopy(evs)), auditCopySQL)
			return err
		})
		if err == nil {
			return nil
		}
		if !pg.IsUniqueViolation(err) {
			return fmt.Errorf("store audit events: %w", err)
		}
	}
	return s.inAuditOrder(ctx, func(tx pgx.Tx) error { return insertAuditEvents(ctx, tx, evs) })
}

// inAuditOrder runs fn, a write of audit records, in a transaction holding
// the audit log's write lock: writers (every replica's consumer) take seqs
// and commit one at a time, so a record commits above every record already
// visible. The log is listed by seq, newest first, a page's token the seq it
// ended at; without the lock a batch that took its seqs first and
// committed last (two replicas' COPYs side by side) landed below a page a
// client had read, and was never listed to it
// (TestAuditRecordsCommitInSeqOrder).
func (s *Store) inAuditOrder(ctx context.Context, fn func(pgx.Tx) error) error {
	return pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.ledger.audit_events'))`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// auditCopySQL copies auditCopy's stream into the audit log.
const auditCopySQL = `copy ledger.audit_events (event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr)
	from stdin (format binary)`

// auditCopy is evs, in order, as a binary COPY stream of auditCopySQL's columns.
func auditCopy(evs []domain.AuditEvent) []byte {
	w := pg.NewCopyWriter(len(evs) * 256)
	for _, e := range evs {
		w.Row(10)
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
	}
	return w.Done()
}

// insertAuditEvents inserts the events whose id is not stored yet, in
// order, each id once.
func insertAuditEvents(ctx context.Context, tx pgx.Tx, evs []domain.AuditEvent) error {
	n := len(evs)
	ids, at := make([]string, n), make([]time.Time, n)
	svcs, methods, actors, roles := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	resources, reqs, codes, addrs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, e := range evs {
		ids[i], at[i], svcs[i], methods[i], actors[i], roles[i] = e.EventID, e.At, e.Service, e.Method, e.Actor, e.Role
		resources[i], reqs[i], codes[i], addrs[i] = textArrayLiteral(e.ResourceIDs), e.RequestID, e.Code, e.ClientAddr
	}
	_, err := tx.Exec(ctx, `insert into ledger.audit_events (event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr)
		select u.e, u.a, u.s, u.m, u.ac, u.r, u.ids::text[], u.rq, u.c, u.ca
		from unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[])
			with ordinality as u(e, a, s, m, ac, r, ids, rq, c, ca, n)
		order by u.n
		on conflict (event_id) do nothing`, ids, at, svcs, methods, actors, roles, resources, reqs, codes, addrs)
	if err != nil {
		return fmt.Errorf("store audit events: %w", err)
	}
	return nil
}

// textArrayLiteral is ss as a Postgres text[] literal, every element quoted
// (so "NULL", commas, braces and spaces stay text) with its backslashes and
// double quotes escaped.
func textArrayLiteral(ss []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(s); j++ {
			if s[j] == '"' || s[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// ListAuditEvents answers newest first, at most f.Limit.
func (s *Store) ListAuditEvents(ctx context.Context, f app.AuditFilter) ([]domain.StoredAuditEvent, error) {
	rows, err := s.Pool.Query(ctx, `select seq, event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr, stored_at
		from ledger.audit_events
		where ($1 = '' or actor = $1)
		  and ($2 = '' or method = $2 or right(method, length($2) + 1) = '/' || $2) -- its last part, exactly: LIKE took % and _ as wildcards, a trailing backslash made a 500
		  and ($3::timestamptz is null or at >= $3)
		  and ($4::timestamptz is null or at < $4)
		  and ($5 = 0 or seq < $5)
		order by seq desc limit $6`, f.Actor, f.Method, f.From, f.To, f.Before, f.Limit)
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
