package ports

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// GPUModelConsumer is the durable consumer of gpu_model.updated.* that keeps
// pricing's read model of the GPU catalogue.
const GPUModelConsumer = app.GPUModelConsumer

const gpuModelBatchMax = 200

// ConsumeGPUModels keeps the read model until ctx ends (app.ApplyGPUModels:
// exactly once per message); undecodable messages, and those that keep
// failing, go to dl.
func ConsumeGPUModels(ctx context.Context, js jetstream.JetStream, a *app.App, log *slog.Logger, dl natsx.DeadLetters) error {
	spec := natsx.ConsumerSpec{Stream: natsx.StreamGPUModel, Durable: GPUModelConsumer,
		FilterSubjects: []string{subjects.GPUModelUpdated.All()}, BatchMax: gpuModelBatchMax, DeadLetters: dl}
	return outbox.ConsumeDecoded(ctx, js, log, spec, func(ctx context.Context, ids []string, evs []*eventsv1.GpuModelUpdated) error {
		msgs := make([]app.GPUModelMessage, len(evs))
		for i, ev := range evs {
			msgs[i] = app.GPUModelMessage{ID: ids[i], Version: domain.GPUModelVersion{
				ID: ev.GpuModel, Aliases: ev.Aliases, Version: ev.Version, UpdatedAt: ev.UpdatedAt.AsTime()}}
		}
		return a.ApplyGPUModels(ctx, msgs)
	})
}
