package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// A caller whose context ends while its statements wait in a shared batch
// is answered at once, and its statements still run with the group's
// (pg.Batches.Do): Recorded must not write what it answers from the
// batch's callbacks. It did (its results were the callbacks' variables), a
// race `make test-race` reports.
func TestRecordedWithAnEndedContext(t *testing.T) {
	t.Parallel()
	s := NewStore(testkit.NewMigratedPool(t, Schema, migrations.For(Schema)))
	ctx := context.Background()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for i := range 20 {
		leader := make(chan error, 1)
		go func() {
			_, _, _, _, err := s.Recorded(ctx, fmt.Sprintf("lead-%d", i), "p-1")
			leader <- err
		}()
		time.Sleep(2 * time.Millisecond) // the leader's group lingers: this one joins it
		_, found, p, ok, err := s.Recorded(ended, fmt.Sprintf("ended-%d", i), "p-2")
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Recorded with an ended context: %v", err)
		}
		if err != nil && (found || ok || p.ProviderID != "") {
			t.Fatalf("Recorded answered %v with found %v, profile %+v (%v)", err, found, p, ok)
		}
		if err := <-leader; err != nil {
			t.Fatalf("the leader's Recorded: %v", err)
		}
	}
}
