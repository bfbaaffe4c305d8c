package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// StoreAuditEvents appends events; a repeat (same event id, a redelivery)
// changes nothing.
func (s *Store) StoreAuditEvents(ctx context.Context, evs []domain.AuditEvent) error {
	if len(evs) == 0 {
		return nil
	}
	// One statement per event in one batch (one round trip): audit rates
	// are those of API writes, far below the journal's.
	b := &pgx.Batch{}
	for _, e := range evs {
		b.Queue(`insert into ledger.audit_events (event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr)
			values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) on conflict (event_id) do nothing`,
			e.EventID, e.At, e.Service, e.Method, e.Actor, e.Role, nonNil(e.ResourceIDs), e.RequestID, e.Code, e.ClientAddr)
	}
	br := s.Pool.SendBatch(ctx, b)
	defer br.Close()
	for range evs {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("store audit events: %w", err)
		}
	}
	return br.Close()
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// ListAuditEvents answers newest first, at most f.Limit.
func (s *Store) ListAuditEvents(ctx context.Context, f app.AuditFilter) ([]domain.StoredAuditEvent, error) {
	rows, err := s.Pool.Query(ctx, `select seq, event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr, stored_at
		from ledger.audit_events
		where ($1 = '' or actor = $1)
		  and ($2 = '' or method = $2 or method like '%/' || $2)
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
