// Package app holds metering's use cases: parties (the single owner of
// providers and renters) and usage ingest.
package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// App is metering's use cases over its store.
type App struct {
	Store       Store
	Clock       clock.Clock
	Calendar    cycles.Calendar
	LateArrival time.Duration

	mu       sync.RWMutex
	models   gpucatalog.Index
	modelsAt CatalogueVersion // the catalogue's version models are of
}

// New returns the use cases with the default late-arrival limit.
func New(store Store, clk clock.Clock, cal cycles.Calendar) *App {
	return &App{
		Store: store, Clock: clk, Calendar: cal,
		LateArrival: domain.LateArrivalDefaultDay * 24 * time.Hour,
	}
}

// knownModels returns the GPU catalogue's names as the catalogue now holds
// them: the copy kept here is reloaded whenever the catalogue's version
// moved (one small query per batch). It was reloaded only for a name it did
// not know, so a replica other than the one that served a catalogue write
// kept mapping an alias to the model that used to claim it, for good.
func (a *App) knownModels(ctx context.Context) (gpucatalog.Index, error) {
	v, err := a.Store.GPUCatalogueVersion(ctx)
	if err != nil {
		return nil, err
	}
	a.mu.RLock()
	m, at := a.models, a.modelsAt
	a.mu.RUnlock()
	if m != nil && at == v {
		return m, nil
	}
	m, at, err = a.Store.GPUModels(ctx)
	if err != nil {
		return nil, fmt.Errorf("gpu models: %w", err)
	}
	a.mu.Lock()
	a.models, a.modelsAt = m, at
	a.mu.Unlock()
	return m, nil
}
