package postgres

import (
	"context"
	"testing"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// The provider-tier read model keeps each provider's newest version: an
// older one arriving late (in the same batch or a later one) leaves it;
// an update not kept (a renter's) and a redelivered id change nothing; a
// provider never named has no tier.
func TestProviderTiersKeepTheNewestVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, Schema, migrations.For(Schema))
	pt := &ProviderTiers{Pool: pool}
	apply := &app.ProviderTiers{Store: pt.PartyStore(), Consumer: app.PartyConsumer}
	tier := func(p string) domain.ProviderTier { return domain.ProviderTier{ProviderID: p} }
	up := func(id, provider, t string, v int64) app.TierUpdate {
		return app.TierUpdate{ID: id, Keep: true, Row: domain.ProviderTier{ProviderID: provider, Tier: t, Version: v}}
	}
	batches := [][]app.TierUpdate{
		{up("m1", "p-1", "pro", 1), up("m2", "p-1", "partner", 3), up("m3", "p-1", "standard", 2)},
		{up("m4", "p-1", "standard", 2), {ID: "m5", Row: tier("r-1")}},
		{up("m6", "p-2", "pro", 1)},
		{up("m6", "p-2", "partner", 2)}, // m6 again: already applied
	}
	for _, b := range batches {
		if err := apply.Apply(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		give, want string
		wantOK     bool
	}{
		{"p-1", "partner", true},
		{"p-2", "pro", true},
		{"r-1", "", false},
		{"p-none", "", false},
	} {
		got, ok, err := pt.Tier(ctx, tt.give)
		if err != nil || got != tt.want || ok != tt.wantOK {
			t.Errorf("tier of %s: %q, %v, %v; want %q, %v", tt.give, got, ok, err, tt.want, tt.wantOK)
		}
	}
}
