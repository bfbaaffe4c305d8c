package settlement

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
)

// Paging walks every statement once, in (cycle desc, currency) order, also
// when a page ends between two currencies of one cycle (a token holding the
// cycle alone skipped the cycle's other currencies).
func TestStatementPagesSplitACycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	var want []string
	for _, cycle := range []string{"cyc-20260215", "cyc-20260101"} {
		if _, err := f.s.d.Pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
			values ($1, 'settled', now(), now(), now())`, cycle); err != nil {
			t.Fatal(err)
		}
		for _, cur := range []string{"CNY", "EUR", "USD"} {
			if _, err := f.s.d.Pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, status,
					commission_rate, commission, tax_withheld, net, settled_at)
				values ($1, 'p-1', $2, 100, 'settled', 0.2, 20, 16, 64, now())`, cycle, cur); err != nil {
				t.Fatal(err)
			}
			want = append(want, cycle+" "+cur)
		}
	}
	owner := auth.WithPrincipal(ctx, auth.Principal{Role: auth.RoleProvider, Subject: "p-1"})
	for _, size := range []int32{1, 2, 4} {
		var got []string
		token := ""
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("page size %d: more pages than statements", size)
			}
			resp, err := f.s.api.ListStatements(owner, &settlementv1.ListStatementsRequest{ProviderId: "p-1", PageSize: size, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range resp.Statements {
				got = append(got, st.CycleId+" "+st.Currency)
			}
			if token = resp.NextPageToken; token == "" {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("page size %d: walked %v, want %v", size, got, want)
		}
	}
	// A token altered by the caller, or another listing's, is a 400.
	first, err := f.s.api.ListStatements(owner, &settlementv1.ListStatementsRequest{ProviderId: "p-1", PageSize: 1})
	if err != nil || first.NextPageToken == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	tok := first.NextPageToken
	bad := tok[:len(tok)-2] + "AA"
	if bad == tok {
		bad = tok[:len(tok)-2] + "BB"
	}
	cycles, err := f.s.api.ListSettlementCycles(ctx, &settlementv1.ListSettlementCyclesRequest{PageSize: 1})
	if err != nil || cycles.NextPageToken == "" {
		t.Fatalf("cycles: %v, %v", cycles, err)
	}
	for _, give := range []string{bad, cycles.NextPageToken} {
		_, err := f.s.api.ListStatements(owner, &settlementv1.ListStatementsRequest{ProviderId: "p-1", PageToken: give})
		if c := status.Code(apperr.ToStatus(err)); c != codes.InvalidArgument {
			t.Errorf("token %q: %v (%v), want InvalidArgument", give, c, err)
		}
	}
}
