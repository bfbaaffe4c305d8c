package ports

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/adapters/postgres"
)

// GPUModelConsumer is the durable consumer of gpu_model.updated.* that keeps
// pricing's read model of the GPU catalogue.
const GPUModelConsumer = "pricing-gpu-models"

const gpuModelBatchMax = 200

// ConsumeGPUModels keeps the read model until ctx ends (exactly once per
// message; undecodable ones are dead-lettered).
func ConsumeGPUModels(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, models *postgres.GPUModels, log *slog.Logger) error {
	spec := natsx.ConsumerSpec{Stream: natsx.StreamGPUModel, Durable: GPUModelConsumer,
		FilterSubjects: []string{subjects.GPUModelUpdated.All()}, BatchMax: gpuModelBatchMax}
	return outbox.ConsumeOnce(ctx, js, pool, log, spec, postgres.Schema, func(ctx context.Context, tx pgx.Tx, evs []*eventsv1.GpuModelUpdated) error {
		vs := make([]postgres.GPUModelVersion, 0, len(evs))
		for _, ev := range evs {
			vs = append(vs, postgres.GPUModelVersion{ID: ev.GpuModel, Aliases: ev.Aliases, Version: ev.Version, UpdatedAt: ev.UpdatedAt.AsTime()})
		}
		return models.Apply(ctx, tx, vs)
	})
}
