package app

import (
	"context"
	"log/slog"
	"time"
)

// Hash-chain worker pacing.
const (
	chainIdle         = 200 * time.Millisecond
	chainErrorBackoff = time.Second
)

// HashChain is the journal's hash chain (adapters/postgres.Chain).
type HashChain interface {
	// Extend appends the next final transactions to the chain and returns
	// how many it chained: 0 when none is final yet or another chainer
	// holds the chain.
	Extend(ctx context.Context) (int, error)
}

// ChainWorker keeps the hash chain extended behind the journal.
type ChainWorker struct {
	Chain HashChain
	Log   *slog.Logger
}

// Step extends the chain by one round (tests, the CLI before verify).
func (w ChainWorker) Step(ctx context.Context) (int, error) { return w.Chain.Extend(ctx) }

// Run extends the chain until ctx ends: round after round while there is
// work, every chainIdle when there is none, and chainErrorBackoff after a
// failed round (logged; the next round retries it).
func (w ChainWorker) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		n, err := w.Step(ctx)
		wait := time.Duration(0)
		switch {
		case err != nil && ctx.Err() == nil:
			w.Log.Error("hash chain", "err", err)
			wait = chainErrorBackoff
		case n == 0:
			wait = chainIdle
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	return nil
}
