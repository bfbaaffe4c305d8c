package app

import (
	"context"
	"strconv"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// RecordAuditEvents stores every service's audit events; a repeat (a
// redelivery) changes nothing.
func (a *App) RecordAuditEvents(ctx context.Context, evs []domain.AuditEvent) error {
	return a.Store.StoreAuditEvents(ctx, evs)
}

// ListAuditEvents answers newest first, and the next page's token ("" at the
// end): the seq the page ended at.
func (a *App) ListAuditEvents(ctx context.Context, f AuditFilter) ([]domain.StoredAuditEvent, string, error) {
	limit := f.Limit
	f.Limit++
	out, err := a.Store.ListAuditEvents(ctx, f)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = strconv.FormatInt(out[len(out)-1].Seq, 10)
	}
	return out, next, nil
}
