package settlementstack_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
)

// A statement's lines add up to the gross its settlement split, however
// many charges the provider earned: one line per lease (its charges
// summed), one per credit naming no lease, one per refund, negative. The
// statement kept the account's first 200 transactions' credits before: 230
// charges made lines short of the gross, with no sign of it.
func TestStatementLinesAddUpToGross(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	r := newRealStack(t, tc)
	ctx := context.Background()
	const provider, renter, charges = "p-lines", "r-lines", 230
	pending := ids.ProviderPending(provider, cycle1.ID)
	if _, err := r.ledger.CreateDeposit(ctx, &ledgerv1.CreateDepositRequest{RenterId: renter, Amount: "100000.00", Currency: "CNY",
		ExternalRef: "dep-lines"}); err != nil {
		t.Fatal(err)
	}
	post := func(key string, md map[string]string, debit, credit, amount string) {
		t.Helper()
		if _, err := r.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{IdempotencyKey: key, Description: "GPU hours", Metadata: md,
			Postings: []*ledgerv1.Posting{{Account: debit, Direction: "debit", Amount: amount, Currency: "CNY"},
				{Account: credit, Direction: "credit", Amount: amount, Currency: "CNY"}}}); err != nil {
			t.Fatal(err)
		}
	}
	wallet := "renter:" + renter + ":wallet"
	want := map[string]decimal.Decimal{}
	for i := range charges {
		lease := fmt.Sprintf("l-%d", i%3)
		amt := decimal.New(int64(1000+i), -2)
		post(fmt.Sprintf("charge-lines-%d", i), map[string]string{"kind": "charge", "renter_id": renter, "lease_id": lease,
			"gpu_model": "RTX_4090", "gpu_hours": "0.5"}, wallet, pending, amt.StringFixed(2))
		want[lease] = want[lease].Add(amt)
	}
	post("goodwill-lines", map[string]string{"renter_id": renter}, wallet, pending, "5.00")
	post("refund-lines", nil, pending, wallet, "3.00")
	gross := want["l-0"].Add(want["l-1"]).Add(want["l-2"]).Add(decimal.NewFromInt(2))
	if _, err := r.pool.Exec(ctx, `insert into settlement.providers (provider_id, tier) values ($1, 'standard')`, provider); err != nil {
		t.Fatal(err)
	}
	taxProfiles(t, r.pool, provider)

	r.clock.Set(cycle1.End.Add(time.Hour))
	runWorker(t, r.s)
	if _, err := r.s.API().CloseSettlementCycle(ctx, &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID}); err != nil {
		t.Fatal(err)
	}
	r.waitSettled(t, cycle1.ID, 120*time.Second)
	api := settlementv1.NewSettlementServiceClient(roleConn(t, r.grpc, r.secret, auth.RoleFinance, ""))
	resp, err := api.ListStatements(ctx, &settlementv1.ListStatementsRequest{ProviderId: provider, CycleId: cycle1.ID})
	if err != nil || len(resp.Statements) != 1 {
		t.Fatalf("statements: %v, %v", resp, err)
	}
	st := resp.Statements[0]
	if !decimal.RequireFromString(st.Gross).Equal(gross) {
		t.Fatalf("gross %s, want %s", st.Gross, gross)
	}
	sum := decimal.Zero
	var got []string
	for _, l := range st.Lines {
		sum = sum.Add(decimal.RequireFromString(l.Amount))
		got = append(got, l.LeaseId+" "+l.Amount+" "+l.GpuHours)
	}
	if !sum.Equal(gross) {
		t.Fatalf("%d lines add up to %s, the gross is %s: %v", len(st.Lines), sum, st.Gross, got)
	}
	wantLines := []string{"l-0 " + want["l-0"].StringFixed(2) + " 38.5", "l-1 " + want["l-1"].StringFixed(2) + " 38.5",
		"l-2 " + want["l-2"].StringFixed(2) + " 38", " 5.00 ", " -3.00 "}
	if fmt.Sprint(got) != fmt.Sprint(wantLines) {
		t.Fatalf("lines %v, want %v", got, wantLines)
	}
}
