package app

import (
	"context"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// UsageQuery selects recorded usage; at least one of lease, renter or
// provider is required (usage is queried per party or lease, never in bulk).
type UsageQuery struct {
	LeaseID, RenterID, ProviderID string
	From, To                      time.Time
	PageSize                      int
	PageToken                     string
}

// ListUsage pages through recorded usage ordered by (start_time, id). The
// page token is the (start_time, id) of the last row, bound to the query's
// filters: no row is repeated, and usage arriving while the pages are read
// is listed by them when it starts after the last row read (usage arriving
// late, starting before it, is in a listing started afresh).
func (a *App) ListUsage(ctx context.Context, q UsageQuery) ([]domain.Recorded, string, error) {
	if q.LeaseID == "" && q.RenterID == "" && q.ProviderID == "" {
		return nil, "", apperr.Invalid("lease_id", "give lease_id, renter_id or provider_id")
	}
	if !q.From.IsZero() && !q.To.IsZero() && q.From.After(q.To) {
		return nil, "", apperr.Invalid("to", "before from")
	}
	f := UsageFilter{LeaseID: q.LeaseID, RenterID: q.RenterID, ProviderID: q.ProviderID, From: q.From, To: q.To}
	listing := cursor.Scoped(usageListing, q.LeaseID, q.RenterID, q.ProviderID, scopeTime(q.From), scopeTime(q.To))
	if q.PageToken != "" {
		pos, err := cursor.Decode(listing, q.PageToken, 2)
		if err != nil {
			return nil, "", err
		}
		if f.AfterStart, err = pos.Time(0); err != nil {
			return nil, "", err
		}
		if f.AfterID = pos.String(1); f.AfterID == "" {
			return nil, "", cursor.Malformed()
		}
	}
	size := pageSize(q.PageSize)
	f.Limit = size + 1
	rows, err := a.Store.ListUsage(ctx, f)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rows) > size {
		rows = rows[:size]
		last := rows[size-1]
		next = cursor.Encode(listing, cursor.FormatTime(last.Start), last.ID)
	}
	return rows, next, nil
}

// scopeTime is an optional instant as a filter of a page token's scope.
func scopeTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return cursor.FormatTime(t)
}
