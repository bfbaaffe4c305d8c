package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/ledger"
)

// The history's balance checkpoint, put off because a writer stayed open
// past the checkpoint's wait, is tried again until made: a deferral is no
// failure (the ledger counts it and tries at its next step). The bench
// failed the whole run on it, after building a history of ~10 M rows.
func TestHistoryCheckpointPutOffIsTriedAgain(t *testing.T) {
	ctx := context.Background()
	calls := 0
	step := func(context.Context) (bool, error) {
		calls++
		if calls <= 2 {
			// Wrapped, as the ledger's step returns it.
			return false, fmt.Errorf("balance checkpoint at %s: %w", time.Now(), &ledger.CheckpointDeferred{At: time.Now(), OpenWriters: 1, Waited: 20 * time.Second})
		}
		return true, nil
	}
	if err := checkpointPuttingUpWithDeferrals(ctx, step, t.Logf); err != nil || calls != 3 {
		t.Fatalf("checkpoint put off twice, then made: %v after %d steps; want nil after 3", err, calls)
	}
	// Any other error fails at once.
	calls = 0
	boom := errors.New("boom")
	if err := checkpointPuttingUpWithDeferrals(ctx, func(context.Context) (bool, error) { calls++; return false, boom }, t.Logf); !errors.Is(err, boom) || calls != 1 {
		t.Errorf("a failing step: %v after %d steps; want boom after 1", err, calls)
	}
}
