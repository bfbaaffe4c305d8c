package app

import (
	"context"
	"fmt"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// GPUModelConsumer records gpu_model.updated message ids in pricing's inbox
// (the durable consumer's name).
const GPUModelConsumer = "pricing-gpu-models"

// GPUModelMessage is one gpu_model.updated message as the port decoded it.
type GPUModelMessage struct {
	ID      string
	Version domain.GPUModelVersion
}

// ApplyGPUModels keeps the read model of the GPU catalogue: in one
// transaction it claims the messages' ids and stores the versions of the
// fresh ones (a message seen before, or twice in one fetch, counts once)
// that are newer than those held.
func (a *App) ApplyGPUModels(ctx context.Context, msgs []GPUModelMessage) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return a.Store.WithTx(ctx, func(tx Tx) error {
		fresh, err := tx.Claim(ctx, GPUModelConsumer, ids)
		if err != nil {
			return err
		}
		vs := make([]domain.GPUModelVersion, 0, len(fresh))
		for _, m := range msgs {
			if fresh[m.ID] {
				vs = append(vs, m.Version)
				delete(fresh, m.ID)
			}
		}
		if len(vs) == 0 {
			return nil
		}
		return tx.ApplyGPUModels(ctx, vs)
	})
}

// GPUCatalogue is pricing's read model of the GPU catalogue (metering's).
type GPUCatalogue interface {
	Index(ctx context.Context) (gpucatalog.Index, error)
}

// canonicalModels rewrites each price's gpu_model to its catalogue id (an
// alias such as RTX4090D becomes RTX_4090D) and refuses a card naming a
// model the catalogue lacks, so no card prices a model metering would
// refuse in usage.
func (a *App) canonicalModels(ctx context.Context, prices []domain.PriceInput) error {
	if a.Catalogue == nil {
		return fmt.Errorf("pricing has no GPU catalogue")
	}
	ix, err := a.Catalogue.Index(ctx)
	if err != nil {
		return err
	}
	bad := &apperr.InvalidError{}
	for i := range prices {
		p := &prices[i]
		if p.Model == "" {
			continue // ParseCard names it
		}
		id, ok := ix.Resolve(p.Model)
		if !ok {
			bad.Violations = append(bad.Violations, apperr.FieldViolation{Field: fmt.Sprintf("gpu_prices[%d].gpu_model", i),
				Reason: fmt.Sprintf("unknown gpu_model %q: not in the GPU catalogue (GET /v1/gpu-models; an admin adds it with POST /v1/gpu-models)", p.Model)})
			continue
		}
		p.Model = id
	}
	if len(bad.Violations) > 0 {
		return bad
	}
	return nil
}
