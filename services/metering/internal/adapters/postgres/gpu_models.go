package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// Catalogue stores the GPU catalogue and puts every version of a model into
// the outbox in the transaction that writes it.
type Catalogue struct{ Pool *pgxpool.Pool }

const gpuModelCols = `gpu_model, vendor, memory_gb, display_name, aliases, version, updated_at`

func scanGPUModel(r pgx.CollectableRow) (domain.GPUModel, error) {
	var m domain.GPUModel
	return m, r.Scan(&m.ID, &m.Vendor, &m.MemoryGB, &m.DisplayName, &m.Aliases, &m.Version, &m.UpdatedAt)
}

// Seed writes the seed models that are missing, and rewrites those never
// written through the API (version 0, from an older migration), at version 1;
// they are published by the next PublishPending.
func (c *Catalogue) Seed(ctx context.Context, models []gpucatalog.Model, at time.Time) error {
	b := &pgx.Batch{}
	for _, m := range models {
		b.Queue(`insert into metering.gpu_models (`+gpuModelCols+`, published_version) values ($1, $2, $3, $4, $5, 1, $6, 0)
			on conflict (gpu_model) do update set vendor = excluded.vendor, memory_gb = excluded.memory_gb,
				display_name = excluded.display_name, aliases = excluded.aliases, version = 1, updated_at = excluded.updated_at
			where metering.gpu_models.version = 0`,
			m.ID, m.Vendor, m.MemoryGB, m.DisplayName, nonNil(m.Aliases), at)
	}
	if err := c.Pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("seed gpu catalogue: %w", err)
	}
	return nil
}

// PublishPending puts every version not yet published into the outbox.
func (c *Catalogue) PublishPending(ctx context.Context) (int, error) {
	n := 0
	err := pg.InTx(ctx, c.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `select `+gpuModelCols+` from metering.gpu_models
			where published_version < version order by gpu_model for update`)
		if err != nil {
			return err
		}
		ms, err := pgx.CollectRows(rows, scanGPUModel)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if err := publishGPUModel(ctx, tx, m); err != nil {
				return err
			}
		}
		n = len(ms)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("publish gpu catalogue: %w", err)
	}
	return n, nil
}

// List returns the catalogue by id, optionally of one vendor.
func (c *Catalogue) List(ctx context.Context, vendor string) ([]domain.GPUModel, error) {
	rows, err := c.Pool.Query(ctx, `select `+gpuModelCols+` from metering.gpu_models
		where version > 0 and ($1 = '' or vendor = $1) order by gpu_model limit $2`, vendor, gpucatalog.ModelsMax)
	if err != nil {
		return nil, fmt.Errorf("gpu catalogue: %w", err)
	}
	return pgx.CollectRows(rows, scanGPUModel)
}

// Put writes a model (a new version unless nothing changed) once check
// accepts it against every model stored; writers are serialised, so two
// models never claim one alias.
func (c *Catalogue) Put(ctx context.Context, in gpucatalog.Model, at time.Time,
	check func(all []domain.GPUModel) error) (domain.GPUModel, error) {
	var out domain.GPUModel
	err := pg.InTx(ctx, c.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `lock table metering.gpu_models in share row exclusive mode`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `select `+gpuModelCols+` from metering.gpu_models order by gpu_model`)
		if err != nil {
			return err
		}
		all, err := pgx.CollectRows(rows, scanGPUModel)
		if err != nil {
			return err
		}
		if err := check(all); err != nil {
			return err
		}
		for _, m := range all {
			if m.ID == in.ID && m.Version > 0 && m.SameContent(in) {
				out = m
				return nil
			}
		}
		row, err := tx.Query(ctx, `insert into metering.gpu_models (`+gpuModelCols+`, published_version) values ($1, $2, $3, $4, $5, 1, $6, 1)
			on conflict (gpu_model) do update set vendor = excluded.vendor, memory_gb = excluded.memory_gb,
				display_name = excluded.display_name, aliases = excluded.aliases,
				version = metering.gpu_models.version + 1, published_version = metering.gpu_models.version + 1,
				updated_at = excluded.updated_at
			returning `+gpuModelCols, in.ID, in.Vendor, in.MemoryGB, in.DisplayName, nonNil(in.Aliases), at)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectExactlyOneRow(row, scanGPUModel); err != nil {
			return err
		}
		return publishGPUModel(ctx, tx, out)
	})
	return out, err
}

// publishGPUModel adds gpu_model.updated.{id} to the outbox and marks the
// version published; the message id names the model and version.
func publishGPUModel(ctx context.Context, tx pgx.Tx, m domain.GPUModel) error {
	b, err := proto.Marshal(&eventsv1.GpuModelUpdated{
		GpuModel: m.ID, Vendor: m.Vendor, MemoryGb: int32(m.MemoryGB), DisplayName: m.DisplayName, Aliases: m.Aliases,
		Version: m.Version, UpdatedAt: timestamppb.New(m.UpdatedAt),
	})
	if err != nil {
		return err
	}
	if err := outbox.Add(ctx, tx, Schema, outbox.Message{
		ID: fmt.Sprintf("gpu-model-%s-%d", m.ID, m.Version), Subject: subjects.GPUModelUpdated.Of(m.ID), Payload: b,
	}); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `update metering.gpu_models set published_version = $2 where gpu_model = $1`, m.ID, m.Version)
	if err == nil && tag.RowsAffected() != 1 {
		err = errors.New("gpu model row vanished")
	}
	return err
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}
