package app

import (
	"slices"
	"testing"

	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// TestCanonicalModelsLeavesTheCallersBatch: aliases become the catalogue's
// ids, unknown names stay for validation, the caller's slice is never
// written, and a batch already canonical comes back as it is.
func TestCanonicalModelsLeavesTheCallersBatch(t *testing.T) {
	ix, err := gpucatalog.NewIndex(gpucatalog.Seed())
	if err != nil {
		t.Fatal(err)
	}
	in := []domain.EventInput{{ID: "a", GPUModel: "RTX_4090"}, {ID: "b", GPUModel: "rtx4090d"}, {ID: "c", GPUModel: "GTX_9999"}, {ID: "d", GPUModel: "H100"}}
	out := canonicalModels(in, ix)
	var got []string
	for _, e := range out {
		got = append(got, e.GPUModel)
	}
	if want := []string{"RTX_4090", "RTX_4090D", "GTX_9999", "H100"}; !slices.Equal(got, want) {
		t.Fatalf("canonical models %v, want %v", got, want)
	}
	if in[1].GPUModel != "rtx4090d" || out[1].ID != "b" {
		t.Fatalf("the caller's batch was changed (%q) or the event lost (%q)", in[1].GPUModel, out[1].ID)
	}
	same := []domain.EventInput{{ID: "a", GPUModel: "RTX_4090"}, {ID: "b", GPUModel: "H100"}, {ID: "c", GPUModel: "GTX_9999"}}
	if out := canonicalModels(same, ix); len(out) != len(same) || &out[0] != &same[0] {
		t.Fatal("a batch already canonical was copied")
	}
}
