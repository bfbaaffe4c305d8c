package app

import (
	"context"
	"time"

	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// RecordAuditEvents stores every service's audit events; a repeat (a
// redelivery) changes nothing.
func (a *App) RecordAuditEvents(ctx context.Context, evs []domain.AuditEvent) error {
	return a.Store.StoreAuditEvents(ctx, evs)
}

// auditListing names the audit log listing in its page tokens (pkg/cursor).
const auditListing = "ledger.audit_events"

// ListAuditEvents answers newest first from the page token's position (f's
// Before is set from it), and the next page's token ("" at the end): the
// seq the page ended at.
func (a *App) ListAuditEvents(ctx context.Context, f AuditFilter, token string) ([]domain.StoredAuditEvent, string, error) {
	scope := []string{f.Actor, f.Method, scopeTime(f.From), scopeTime(f.To)}
	if f.Resource != "" {
		// Only when set: a scope of five filters, the fifth "", was
		// another scope, and the tokens of a listing by actor, method or
		// time issued before the resource filter were refused.
		scope = append(scope, f.Resource)
	}
	listing := cursor.Scoped(auditListing, scope...)
	if token != "" {
		pos, err := cursor.Decode(listing, token, 1)
		if err != nil {
			return nil, "", err
		}
		if f.Before, err = pos.Int64(0); err != nil || f.Before <= 0 {
			return nil, "", cursor.Malformed()
		}
	}
	limit := f.Limit
	f.Limit++
	out, err := a.Store.ListAuditEvents(ctx, f)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = cursor.Encode(listing, cursor.FormatInt64(out[len(out)-1].Seq))
	}
	return out, next, nil
}

// scopeTime is an optional instant as a filter of a page token's scope.
func scopeTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return cursor.FormatTime(*t)
}
