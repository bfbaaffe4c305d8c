package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
)

// AuditEvent is one stored row of ledger.audit_events.
type AuditEvent struct {
	Seq      int64
	Event    *eventsv1.AuditRecorded
	StoredAt time.Time
}

// StoreAuditEvents appends events; a repeat (same event id, a redelivery)
// changes nothing.
func StoreAuditEvents(ctx context.Context, pool *pgxpool.Pool, evs []*eventsv1.AuditRecorded) error {
	if len(evs) == 0 {
		return nil
	}
	// One statement per event in one batch (one round trip): audit rates
	// are those of API writes, far below the journal's.
	b := &pgx.Batch{}
	for _, e := range evs {
		b.Queue(`insert into ledger.audit_events (event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr)
			values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) on conflict (event_id) do nothing`,
			e.EventId, e.At.AsTime(), e.Service, e.Method, e.Actor, e.Role, nonNil(e.ResourceIds), e.RequestId, e.Code, e.ClientAddr)
	}
	br := pool.SendBatch(ctx, b)
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

// AuditFilter selects audit events.
type AuditFilter struct {
	Actor    string
	Method   string // full method, or its last part
	From, To *time.Time
	Limit    int
	Before   int64 // page token: seq below this; 0 = from the newest
}

// ListAuditEvents answers newest first, and the next page's token ("" at the end).
func ListAuditEvents(ctx context.Context, pool *pgxpool.Pool, f AuditFilter) ([]AuditEvent, string, error) {
	rows, err := pool.Query(ctx, `select seq, event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr, stored_at
		from ledger.audit_events
		where ($1 = '' or actor = $1)
		  and ($2 = '' or method = $2 or method like '%/' || $2)
		  and ($3::timestamptz is null or at >= $3)
		  and ($4::timestamptz is null or at < $4)
		  and ($5 = 0 or seq < $5)
		order by seq desc limit $6`, f.Actor, f.Method, f.From, f.To, f.Before, f.Limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list audit events: %w", err)
	}
	defer rows.Close()
	var out []AuditEvent
	for rows.Next() {
		e := AuditEvent{Event: &eventsv1.AuditRecorded{}}
		var at time.Time
		if err := rows.Scan(&e.Seq, &e.Event.EventId, &at, &e.Event.Service, &e.Event.Method, &e.Event.Actor, &e.Event.Role,
			&e.Event.ResourceIds, &e.Event.RequestId, &e.Event.Code, &e.Event.ClientAddr, &e.StoredAt); err != nil {
			return nil, "", err
		}
		e.Event.At = timestamppb.New(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list audit events: %w", err)
	}
	next := ""
	if len(out) > f.Limit {
		out = out[:f.Limit]
		next = strconv.FormatInt(out[len(out)-1].Seq, 10)
	}
	return out, next, nil
}
