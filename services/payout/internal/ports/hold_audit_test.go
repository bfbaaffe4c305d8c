package ports

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
)

type finance struct{}

func (finance) Principal(context.Context) (auth.Principal, error) {
	return auth.Principal{Role: auth.RoleFinance, Subject: "alice"}, nil
}
func (finance) ClientAddr(context.Context) netip.Addr { return netip.MustParseAddr("10.1.2.3") }

// A hold and its release read apart in the audit log: the release (an
// empty reason) deletes the provider's payout.holds row, so the log is all
// that says who released it, and both read
// "HoldProviderPayouts actor=alice code=OK ids=[provider_id=p-1]".
func TestAuditRecordTellsAHoldFromItsRelease(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, postgres.Schema, migrations.For(postgres.Schema))
	srv := &Server{Store: &postgres.Store{Pool: pool}, Epoch: "1", Clock: clock.System{}}
	store := &auditStore{}
	icp := audit.New(store, slog.New(slog.DiscardHandler), "payout").UnaryInterceptor(finance{}, func(context.Context) string { return "req-1" })
	info := &grpc.UnaryServerInfo{FullMethod: payoutv1.PayoutService_HoldProviderPayouts_FullMethodName}
	handler := func(ctx context.Context, req any) (any, error) {
		return srv.HoldProviderPayouts(ctx, req.(*payoutv1.HoldProviderPayoutsRequest))
	}
	for _, reason := range []string{"fraud review", ""} {
		ctx := auth.WithPrincipal(context.Background(), auth.Principal{Role: auth.RoleFinance, Subject: "alice"})
		if _, err := icp(ctx, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "p-1", Reason: reason}, info, handler); err != nil {
			t.Fatalf("hold %q: %v", reason, err)
		}
	}
	var held int
	if err := pool.QueryRow(context.Background(), `select count(*) from payout.holds where provider_id = 'p-1'`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("guard: the release left %d holds (%v)", held, err)
	}
	want := [][]string{{"action=hold", "provider_id=p-1", "reason=fraud review"}, {"action=release", "provider_id=p-1"}}
	if len(store.stored) != len(want) {
		t.Fatalf("%d records, want %d", len(store.stored), len(want))
	}
	for i, r := range store.stored {
		if got := slices.Sorted(slices.Values(r.ResourceIds)); r.Code != "OK" || !slices.Equal(got, want[i]) {
			t.Errorf("record %d: %s %v, want OK %v", i, r.Code, got, want[i])
		}
	}
}
