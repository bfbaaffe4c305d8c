package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// An event id is its idempotency key: the same event again is a duplicate
// (changes nothing); the same id with another body is rejected with a reason
// naming the fields, whether the first one is already recorded or earlier in
// the same batch, and the recorded event stays as it was.
func TestIngestSameIDOtherBodyIsRejected(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	first := ev("evt-1", "lease-1", "2026-11-01T22:00:00Z", "2026-11-01T23:30:00Z")
	if res, err := a.Ingest(ctx, []domain.EventInput{first}, app.IngestOptions{}); err != nil || res.Accepted != 1 {
		t.Fatalf("first: %+v, %v", res, err)
	}
	longer := first
	longer.EndTime = "2026-11-02T00:30:00Z"
	bigger := first
	bigger.GPUCount = 8
	other := ev("evt-2", "lease-2", "2026-11-01T22:00:00Z", "2026-11-01T23:30:00Z")
	otherAgain := other
	otherAgain.Region = "us-west"
	res, err := a.Ingest(ctx, []domain.EventInput{first, longer, bigger, other, otherAgain, other}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 1 || res.Duplicates != 2 || len(res.Rejected) != 3 {
		t.Fatalf("accepted %d duplicates %d rejected %+v; want 1, 2 (evt-1 and evt-2 again), 3", res.Accepted, res.Duplicates, res.Rejected)
	}
	for i, want := range []struct {
		index  int
		fields string
	}{{1, "(end_time differ)"}, {2, "(gpu_count differ)"}, {4, "(region differ)"}} {
		r := res.Rejected[i]
		if r.Index != want.index || !strings.Contains(r.Reason, "was recorded with a different body "+want.fields) {
			t.Errorf("rejection %d = %+v, want index %d naming %s", i, r, want.index, want.fields)
		}
	}
	evs, _, err := a.ListUsage(ctx, app.UsageQuery{RenterID: "r-001"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].ID != "evt-1" || !evs[0].End.Equal(time.Date(2026, 11, 1, 23, 30, 0, 0, time.UTC)) || evs[0].GPUCount != 2 {
		t.Fatalf("recorded usage %+v, want evt-1 as first sent and evt-2", evs)
	}
}

// A party's id is its creation key: the same body replays the stored party,
// another body is a conflict (409), for renters as for providers.
func TestCreatePartySameIDOtherBodyConflicts(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	r, err := a.CreateRenter(ctx, domain.RenterInput{ID: "r-001", Currency: "CNY"})
	if err != nil || r.Version != 1 {
		t.Fatalf("renter replay: %+v, %v", r, err)
	}
	for name, in := range map[string]domain.RenterInput{
		"currency":     {ID: "r-001", Currency: "USD"},
		"credit limit": {ID: "r-001", Currency: "CNY", CreditLimit: "100"},
		"name":         {ID: "r-001", Name: "Lab", Currency: "CNY"},
	} {
		if _, err := a.CreateRenter(ctx, in); !errors.Is(err, apperr.ErrConflict) {
			t.Errorf("renter with another %s: %v, want conflict", name, err)
		}
	}
	p, err := a.CreateProvider(ctx, domain.ProviderInput{ID: "p-001", Tier: "pro", TaxProfile: "individual", Jurisdiction: "CN", PUE: "1.60", Currency: "CNY"})
	if err != nil || p.Version != 1 {
		t.Fatalf("provider replay: %+v, %v", p, err)
	}
	for name, in := range map[string]domain.ProviderInput{
		"tier":         {ID: "p-001", Tier: "partner", TaxProfile: "individual", Jurisdiction: "CN", PUE: "1.6", Currency: "CNY"},
		"jurisdiction": {ID: "p-001", Tier: "pro", TaxProfile: "individual", Jurisdiction: "US", PUE: "1.6", Currency: "CNY"},
		"pue":          {ID: "p-001", Tier: "pro", TaxProfile: "individual", Jurisdiction: "CN", Currency: "CNY"},
	} {
		if _, err := a.CreateProvider(ctx, in); !errors.Is(err, apperr.ErrConflict) {
			t.Errorf("provider with another %s: %v, want conflict", name, err)
		}
	}
}
