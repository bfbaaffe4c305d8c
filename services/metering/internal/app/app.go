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

	mu     sync.RWMutex
	models gpucatalog.Index
}

// New returns the use cases with the default late-arrival limit.
func New(store Store, clk clock.Clock, cal cycles.Calendar) *App {
	return &App{
		Store: store, Clock: clk, Calendar: cal,
		LateArrival: domain.LateArrivalDefaultDay * 24 * time.Hour,
	}
}

// knownModels returns the GPU catalogue's names, loading them once; an
// unknown name reloads them (a model added by another process is seen
// without a restart).
func (a *App) knownModels(ctx context.Context, names []string) (gpucatalog.Index, error) {
	a.mu.RLock()
	m := a.models
	a.mu.RUnlock()
	stale := m == nil
	for _, n := range names {
		if _, ok := m.Resolve(n); !ok {
			stale = true
			break
		}
	}
	if !stale {
		return m, nil
	}
	m, err := a.Store.GPUModels(ctx)
	if err != nil {
		return nil, fmt.Errorf("gpu models: %w", err)
	}
	a.mu.Lock()
	a.models = m
	a.mu.Unlock()
	return m, nil
}
