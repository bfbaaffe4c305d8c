package settlementstack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
)

// A provider's statement shows an entry's text (description, renter_id)
// only where the provider reads the entry whole: every posting on its own
// accounts, as GET /v1/transactions/{id} rules. Finance's transfer from
// p-b's pending to p-a's, "dispute: renter r-secret of p-b …" with renter_id
// r-secret, reached both statements word for word after a real close, while
// each provider's read of the entry withheld it; the line is now an
// "adjustment". The same transfer tagged with p-b's lease (lease_id lease-2,
// renter_id r-secret) made a lease line of p-a's naming both: an
// "adjustment" too. p-a's own move between its cycles keeps its text.
func TestStatementShowsOnlyTextTheProviderReads(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	r := newRealStack(t, tc)
	ctx := context.Background()
	later := cal.At(cycle1.End.Add(time.Hour))
	post := func(key, desc string, md map[string]string, debit, credit, amount string) {
		t.Helper()
		if _, err := r.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{IdempotencyKey: key, Description: desc, Metadata: md,
			Postings: []*ledgerv1.Posting{{Account: debit, Direction: "debit", Amount: amount, Currency: "CNY"},
				{Account: credit, Direction: "credit", Amount: amount, Currency: "CNY"}}}); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
	for _, p := range []string{"p-a", "p-b"} {
		r.deposit(t, "r-"+p, "CNY", "200.00")
		r.charge(t, cycle1.ID, "r-"+p, p, "CNY", "100.00")
	}
	post("late-p-a", "GPU hours", map[string]string{"kind": "charge", "renter_id": "r-p-a", "lease_id": "l-late"},
		"renter:r-p-a:wallet", ids.ProviderPending("p-a", later.ID), "5.00")
	post("dispute-p-b", "dispute: renter r-secret of p-b (lease-2) compensated; p-b pays p-a for the failover",
		map[string]string{"renter_id": "r-secret"}, ids.ProviderPending("p-b", cycle1.ID), ids.ProviderPending("p-a", cycle1.ID), "1.00")
	post("dispute-lease-p-b", "dispute FIN-9", map[string]string{"lease_id": "lease-2", "renter_id": "r-secret", "gpu_model": "H100"},
		ids.ProviderPending("p-b", cycle1.ID), ids.ProviderPending("p-a", cycle1.ID), "1.10")
	moved := "p-a's late hours moved into " + cycle1.ID
	post("moved-p-a", moved, map[string]string{"renter_id": "r-p-a"},
		ids.ProviderPending("p-a", later.ID), ids.ProviderPending("p-a", cycle1.ID), "2.50")
	if _, err := r.pool.Exec(ctx, `insert into settlement.providers (provider_id, tier) values ('p-a', 'standard'), ('p-b', 'standard')`); err != nil {
		t.Fatal(err)
	}
	taxProfiles(t, r.pool, "p-a", "p-b")

	r.clock.Set(cycle1.End.Add(time.Hour))
	runWorker(t, r.s)
	if _, err := r.s.API().CloseSettlementCycle(ctx, &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID}); err != nil {
		t.Fatal(err)
	}
	r.waitSettled(t, cycle1.ID, 120*time.Second)

	tests := []struct {
		give string
		want []string // lines: lease, renter, amount, description
	}{
		{"p-a", []string{"l-p-a r-p-a 100.00 1 charge", "  1.00 adjustment", "  1.10 adjustment", " r-p-a 2.50 " + moved}},
		{"p-b", []string{"l-p-b r-p-b 100.00 1 charge", "  -1.00 adjustment", "  -1.10 adjustment"}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			api := settlementv1.NewSettlementServiceClient(roleConn(t, r.grpc, r.secret, auth.RoleProvider, tt.give))
			resp, err := api.ListStatements(ctx, &settlementv1.ListStatementsRequest{ProviderId: tt.give, CycleId: cycle1.ID})
			if err != nil || len(resp.Statements) != 1 {
				t.Fatalf("statements: %v, %v", resp, err)
			}
			var got []string
			for _, l := range resp.Statements[0].Lines {
				got = append(got, strings.Join([]string{l.LeaseId, l.RenterId, l.Amount, l.Description}, " "))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("lines %q, want %q", got, tt.want)
			}
			body := protojson.Format(resp)
			for _, s := range []string{"r-secret", "lease-2", "H100", "dispute", "failover"} {
				if strings.Contains(body, s) {
					t.Errorf("%s's statement names %q: %s", tt.give, s, body)
				}
			}
		})
	}
}
