package settlementstack_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/settlement"
)

// reconRecvMax stands in for gRPC's default 4 MiB receive limit on the
// internal connection: the answer with every item of a run grows ~141 B an
// item (100 000 unmatched lines made 14.1 MB), so a few thousand items here
// are what 30 000 were against 4 MiB.
const reconRecvMax = 64 << 10

// The daily reconciliation's activity reads only the counts: the ledger
// answers it the run's counts, not every item, so a run whose items
// outgrow the connection's receive limit still completes. Its answer lost
// once after the run was stored, the retry answers that run, not a new one:
// the full answer refused (ResourceExhausted, retried) had each try store a
// new full run, ~75 of them in the activity's 6 h, and the workflow still
// failed. The summary carries the statement breaks and cash differences.
func TestScheduledReconciliationAnswersCountsOnce(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	var answered atomic.Int32
	loseFirstAnswer := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && method == ledgerv1.ReconciliationService_RunReconciliation_FullMethodName && answered.Add(1) == 1 {
			return status.Error(codes.Unavailable, "test: the answer was lost after the run was stored")
		}
		return err
	})
	r := newRealStackDial(t, tc, []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(reconRecvMax)), loseFirstAnswer})
	runWorker(t, r.s)
	ctx := context.Background()

	// Two statements of one account, no line known to the ledger (nothing
	// in bank:client): st-1 opens at 100.00 the ledger never recorded (a
	// cash difference at its close), st-2 opens at 0, not st-1's close (a
	// statement break, and a cash difference at its close too).
	const lines1, lines2 = 2000, 10
	statement := func(opening, day string, n int) string {
		var b strings.Builder
		b.WriteString("date,reference,amount,balance\n")
		bal := decimal.RequireFromString(opening)
		for i := range n {
			bal = bal.Add(decimal.NewFromInt(1))
			fmt.Fprintf(&b, "%s,unknown-%s-%05d,1.00,%s\n", day, day, i, bal.StringFixed(2))
		}
		return b.String()
	}
	finance := roleConn(t, r.grpc, r.secret, auth.RoleFinance, "")
	stmts := ledgerv1.NewBankStatementServiceClient(finance)
	for _, st := range []struct {
		id, opening, day string
		n                int
	}{
		{"st-1", "100.00", "2026-01-05", lines1}, {"st-2", "0.00", "2026-01-07", lines2},
	} {
		if _, err := stmts.ImportBankStatement(ctx, &ledgerv1.ImportBankStatementRequest{StatementId: st.id, Currency: "CNY",
			Account: "CN-CLIENT-1", Format: "csv", Content: statement(st.opening, st.day, st.n)}); err != nil {
			t.Fatalf("import %s: %v", st.id, err)
		}
	}

	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	run, err := tc.ExecuteWorkflow(wctx, client.StartWorkflowOptions{ID: "ledger-reconciliation-daily-2026-01-10T06:00:00Z", TaskQueue: helperQueue},
		settlement.ReconciliationDailyWorkflowName)
	if err != nil {
		t.Fatal(err)
	}
	var got []settlement.ReconciliationSummary
	werr := run.Get(wctx, &got)
	runs := r.count(t, `select count(*) from ledger.reconciliations`)
	if werr != nil {
		t.Fatalf("the daily reconciliation: %v (%d runs stored)", werr, runs)
	}
	if runs != 1 {
		t.Errorf("%d runs stored by one scheduled run, want 1", runs)
	}
	if answered.Load() < 2 {
		t.Fatalf("RunReconciliation answered %d times: the lost answer was never retried", answered.Load())
	}
	if len(got) != 1 {
		t.Fatalf("summaries %+v, want one (CNY)", got)
	}
	s := got[0]
	if s.Currency != "CNY" || s.Verdict != "exceptions" || s.Matched != 0 || s.UnmatchedInBank != lines1+lines2 || s.UnmatchedInLedger != 0 ||
		s.StatementBreaks != 1 || s.CashDifferences != 2 {
		t.Errorf("summary %+v, want CNY exceptions, 0 matched, %d unmatched in bank, 0 in ledger, 1 statement break, 2 cash differences",
			s, lines1+lines2)
	}

	// The guard: the run with its items is larger than the limit.
	full, err := ledgerv1.NewReconciliationServiceClient(finance).GetReconciliation(ctx, &ledgerv1.GetReconciliationRequest{ReconciliationId: s.ReconciliationID})
	if err != nil {
		t.Fatal(err)
	}
	if n := proto.Size(full); n <= reconRecvMax {
		t.Fatalf("the run with its items is %d B, within the %d B limit: the test proves nothing", n, reconRecvMax)
	}
}
