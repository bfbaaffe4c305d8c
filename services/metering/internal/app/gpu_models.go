package app

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// GPUModelStore keeps the GPU catalogue and publishes each version of a
// model (gpu_model.updated.{id}) in the transaction that writes it.
type GPUModelStore interface {
	// Seed adds the seed models never written through the API.
	Seed(ctx context.Context, models []gpucatalog.Model, at time.Time) error
	// PublishPending publishes the versions not yet published (the seed's).
	PublishPending(ctx context.Context) (int, error)
	List(ctx context.Context, vendor string) ([]domain.GPUModel, error)
	// Put writes a model once check accepts it against every stored model
	// (writers serialised); a model whose content is unchanged keeps its
	// version.
	Put(ctx context.Context, m gpucatalog.Model, at time.Time, check func(all []domain.GPUModel) error) (domain.GPUModel, error)
}

// Catalogue is the use cases of the one GPU catalogue.
type Catalogue struct {
	Store GPUModelStore
	Clock clock.Clock
}

// Seed brings the seed models into the catalogue and publishes every
// version not yet published; run at start-up.
func (c *Catalogue) Seed(ctx context.Context) error {
	if err := c.Store.Seed(ctx, gpucatalog.Seed(), c.Clock.Now()); err != nil {
		return err
	}
	_, err := c.Store.PublishPending(ctx)
	return err
}

// List returns the catalogue, by id.
func (c *Catalogue) List(ctx context.Context, vendor string) ([]domain.GPUModel, error) {
	return c.Store.List(ctx, strings.ToLower(strings.TrimSpace(vendor)))
}

// Put adds or replaces a model. A name (id or alias) another model already
// claims is refused with the field that names it.
func (c *Catalogue) Put(ctx context.Context, in gpucatalog.Model) (domain.GPUModel, error) {
	in.ID = strings.TrimSpace(in.ID)
	in.Vendor = strings.ToLower(strings.TrimSpace(in.Vendor))
	in.DisplayName = strings.TrimSpace(in.DisplayName)
	for i, a := range in.Aliases {
		in.Aliases[i] = strings.TrimSpace(a)
	}
	if err := invalid(domain.CheckGPUModel(in, nil)); err != nil {
		return domain.GPUModel{}, err
	}
	m, err := c.Store.Put(ctx, in, c.Clock.Now(), func(all []domain.GPUModel) error {
		others := make([]gpucatalog.Model, 0, len(all))
		for _, m := range all {
			if m.ID != in.ID {
				others = append(others, m.Model)
			}
		}
		if len(others) >= gpucatalog.ModelsMax {
			return fmt.Errorf("the catalogue holds %d models, the most allowed: %w", len(others), apperr.ErrPrecondition)
		}
		ix, err := gpucatalog.NewIndex(others)
		if err != nil {
			return fmt.Errorf("stored gpu catalogue: %w", err)
		}
		return invalid(domain.CheckGPUModel(in, ix))
	})
	if err != nil {
		return domain.GPUModel{}, err
	}
	return m, nil
}
