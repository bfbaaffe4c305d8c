package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// GPUModels is pricing's read model of the GPU catalogue.
type GPUModels struct{ Pool *pgxpool.Pool }

// Seed adds the seed models that are missing, at version 0.
func (g *GPUModels) Seed(ctx context.Context, models []gpucatalog.Model, at time.Time) error {
	b := &pgx.Batch{}
	for _, m := range models {
		b.Queue(`insert into pricing.gpu_models (gpu_model, aliases, version, updated_at) values ($1, $2, 0, $3)
			on conflict (gpu_model) do nothing`, m.ID, nonNil(m.Aliases), at)
	}
	if err := g.Pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("seed gpu models: %w", err)
	}
	return nil
}

// ApplyGPUModels implements app.Tx: it stores the versions newer than
// those held.
func (t *Tx) ApplyGPUModels(ctx context.Context, vs []domain.GPUModelVersion) error {
	b := &pgx.Batch{}
	for _, v := range vs {
		b.Queue(`insert into pricing.gpu_models (gpu_model, aliases, version, updated_at) values ($1, $2, $3, $4)
			on conflict (gpu_model) do update set aliases = excluded.aliases, version = excluded.version, updated_at = excluded.updated_at
			where pricing.gpu_models.version < excluded.version`, v.ID, nonNil(v.Aliases), v.Version, v.UpdatedAt)
	}
	if err := t.tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("apply gpu models: %w", err)
	}
	return nil
}

// Index returns every name of the read model by key.
func (g *GPUModels) Index(ctx context.Context) (gpucatalog.Index, error) {
	rows, err := g.Pool.Query(ctx, `select gpu_model, aliases from pricing.gpu_models`)
	if err != nil {
		return nil, fmt.Errorf("gpu models: %w", err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (gpucatalog.Model, error) {
		var m gpucatalog.Model
		return m, r.Scan(&m.ID, &m.Aliases)
	})
	if err != nil {
		return nil, fmt.Errorf("gpu models: %w", err)
	}
	return gpucatalog.NewIndex(ms)
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}
