package ledger_test

import (
	"testing"

	"github.com/gpubill/gpubill/pkg/testkit/ceiling"
)

// The ledger's two Postgres ceilings (the benchmarks' ratios are to them)
// run here on a small load, outside make bench: each writes what it counts
// into a table shaped like the ledger's and checks it before it returns.
func TestCeilingsWriteWhatTheyCount(t *testing.T) {
	f := newFixture(t, nil)
	if fig := ceiling.Autocommit(t, f.ctx, f.pool, 4, 25); fig.N != 100 || fig.Value <= 0 {
		t.Fatalf("ceiling_autocommit: %d rows at %.0f/s, want 100", fig.N, fig.Value)
	}
	rows := 2*ceiling.CopyRowsPerTx + 10 // two full transactions and a short one
	if fig := ceiling.Copy(t, f.ctx, f.pool, rows); fig.N != rows || fig.Value <= 0 {
		t.Fatalf("ceiling_copy: %d rows at %.0f/s, want %d", fig.N, fig.Value, rows)
	}
}
