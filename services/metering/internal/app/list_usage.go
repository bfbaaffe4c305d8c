package app

import (
	"context"
	"encoding/base64"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
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
// page token is the (start_time, id) of the last row: stable while new
// usage arrives.
func (a *App) ListUsage(ctx context.Context, q UsageQuery) ([]domain.Recorded, string, error) {
	if q.LeaseID == "" && q.RenterID == "" && q.ProviderID == "" {
		return nil, "", apperr.Invalid("lease_id", "give lease_id, renter_id or provider_id")
	}
	f := UsageFilter{LeaseID: q.LeaseID, RenterID: q.RenterID, ProviderID: q.ProviderID, From: q.From, To: q.To}
	if q.PageToken != "" {
		t, id, ok := decodeCursor(q.PageToken)
		if !ok {
			return nil, "", apperr.Invalid("page_token", "not a token this API issued")
		}
		f.AfterStart, f.AfterID = t, id
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
		next = encodeCursor(last.Start, last.ID)
	}
	return rows, next, nil
}

func encodeCursor(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(t.UTC().Format(time.RFC3339Nano) + "|" + id))
}

func decodeCursor(s string) (time.Time, string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", false
	}
	ts, id, ok := strings.Cut(string(b), "|")
	if !ok || id == "" {
		return time.Time{}, "", false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, "", false
	}
	return t, id, true
}
