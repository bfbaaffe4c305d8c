package ledger

import (
	"context"

	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// store binds the Postgres adapter to app.Store. app no longer imports the
// adapter (the report reads through app.ReportStore), so postgres.Store can
// implement WithTx and ListAuditEvents directly and this file go.
type store struct{ *postgres.Store }

var (
	_ app.Store = store{}
	_ app.Tx    = (*postgres.Tx)(nil)
)

func (s store) WithTx(ctx context.Context, fn func(app.Tx) error) error {
	return s.InTx(ctx, func(tx *postgres.Tx) error { return fn(tx) })
}

func (s store) ListAuditEvents(ctx context.Context, f app.AuditFilter) ([]domain.StoredAuditEvent, error) {
	return s.Store.ListAuditEvents(ctx, postgres.AuditFilter(f))
}
