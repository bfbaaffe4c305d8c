package ports

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
)

// Finance's KYC rejection names the provider's payouts it stops, and the
// provider's own "pending" over it is refused, naming the verdict. The
// rejection answered 200 with the KYC alone, and the provider reset it to
// pending itself, wiping finance's verdict.
func TestKYCRejectionAnswerAndTheProvidersReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, postgres.Schema, migrations.For(postgres.Schema))
	srv := &Server{Store: &postgres.Store{Pool: pool}, Epoch: "1", Clock: clock.System{}}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
		values ('po-w', 'p-1', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'action_required', 'bank', '', '', true, 1, now(), now())`); err != nil {
		t.Fatal(err)
	}
	asFinance := auth.WithPrincipal(ctx, auth.Principal{Role: auth.RoleFinance, Subject: "alice"})
	asProvider := auth.WithPrincipal(ctx, auth.Principal{Role: auth.RoleProvider, Subject: "p-1"})
	resp, err := srv.PutKyc(asFinance, &payoutv1.PutKycRequest{ProviderId: "p-1", Status: "rejected", Reference: "sanctions hit"})
	if err != nil || !slices.Equal(resp.GetKyc().GetPayoutsWaiting(), []string{"po-w"}) || len(resp.GetKyc().GetPayoutsInFlight()) != 0 {
		t.Fatalf("rejection answered %v (%v); want po-w waiting, none in flight", resp, err)
	}
	_, err = srv.PutKyc(asProvider, &payoutv1.PutKycRequest{ProviderId: "p-1", Status: "pending", Reference: "new passport"})
	if !errors.Is(err, apperr.ErrPrecondition) || !strings.Contains(err.Error(), "rejected by finance") {
		t.Fatalf("provider's pending over finance's rejection: %v; want a precondition failure naming the verdict", err)
	}
	if _, err := srv.PutKyc(asFinance, &payoutv1.PutKycRequest{ProviderId: "p-1", Status: "verified", Reference: "cleared"}); err != nil {
		t.Fatalf("finance's change of its rejection: %v", err)
	}
	if _, err := srv.PutKyc(asProvider, &payoutv1.PutKycRequest{ProviderId: "p-1", Status: "pending", Reference: "renewal"}); err != nil {
		t.Fatalf("provider's pending over a verified KYC: %v", err)
	}
}
