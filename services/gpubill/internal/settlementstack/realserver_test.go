package settlementstack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/testkit"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement"
)

// On a real Temporal dev server: a close request, the worker stopped after
// some providers are settled, a new worker finishing the close — and every
// provider settled exactly once (one settlement transaction per provider and
// currency in the ledger, whatever the replays). A window of 10 children
// in flight in runs of 40 providers.
func TestCloseSurvivesWorkerRestart(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc, settlement.WithBatchSize(40), settlement.WithWindow(10))
	const providers = 150
	f.seed(t, cycle1.ID, providers)
	f.ledger.Delay = 2 * time.Millisecond
	f.clock.Set(cycle1.End.Add(time.Hour)) // in the grace period: closing now is an early close

	stop := runWorker(t, f.s)
	ctx := context.Background()
	resp, err := f.s.API().CloseSettlementCycle(ctx, &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.SettlementCycle.Status == cycleOpen {
		t.Fatalf("status after close = %s", resp.SettlementCycle.Status)
	}
	settled := func() int {
		return f.count(t, `select count(*) from settlement.settlements where status = 'settled'`)
	}
	testkit.Eventually(t, 60*time.Second, func() bool { return settled() >= 30 }, "30 providers settled")
	stop()
	atStop := settled()
	if atStop >= providers+1 {
		t.Fatalf("all %d settled before the worker stopped; the test proves nothing", atStop)
	}
	t.Logf("worker stopped with %d of %d rows settled", atStop, providers+1)

	// Closing twice changes nothing.
	if _, err := f.s.API().CloseSettlementCycle(ctx, &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID}); err != nil {
		t.Fatal(err)
	}
	runWorker(t, f.s)
	waitCycleSettled(t, f.s, cycle1.ID, 120*time.Second)

	if n := settled(); n != providers+1 {
		t.Fatalf("settled rows = %d, want %d", n, providers+1)
	}
	posted := f.ledger.Transactions("settle-" + cycle1.ID + "-")
	keys := map[string]int{}
	for _, tx := range posted {
		keys[tx.IdempotencyKey]++
	}
	if len(posted) != providers+1 || len(keys) != len(posted) {
		t.Fatalf("posted %d settlement transactions with %d keys, want %d each (the sweep rides in each)", len(posted), len(keys), providers+1)
	}
	for i := range providers {
		p := fmt.Sprintf("p-%05d", i)
		if keys[settlement.SettlementKey(cycle1.ID, p, "CNY")] != 1 {
			t.Errorf("%s: settlement transaction posted %d times", p, keys[settlement.SettlementKey(cycle1.ID, p, "CNY")])
		}
		if b := f.ledger.Balance(ids.ProviderPending(p, cycle1.ID), "CNY"); !b.IsZero() {
			t.Errorf("%s pending = %s after settlement", p, b)
		}
	}
	t.Logf("ledger CreateTransaction calls for %d transactions: %d (replays answered idempotently)",
		len(posted), f.ledger.Requests("settle-"+cycle1.ID+"-"))
	recordHistories(t, tc, cycle1.ID, "p-00001")
	resp2, err := f.s.API().GetSettlementCycle(ctx, &settlementv1.GetSettlementCycleRequest{CycleId: cycle1.ID})
	if err != nil {
		t.Fatal(err)
	}
	if c := resp2.SettlementCycle; c.Status != cycleSettled || len(c.Totals) != 2 || c.Totals[0].Currency != "CNY" || c.Totals[0].Providers != providers {
		t.Fatalf("cycle = %v", c)
	}
}

// On a real Temporal dev server, a cycle page counts each provider's
// outcome: settled ones from settlement's table, a held one from its held
// rows, a failed one (its settlement transaction refused: the idempotency
// key is taken by another body) by asking Temporal about its workflow,
// which failed. The cycle stays closing. The released provider then settles
// through the API, and the cycle stays closing (the failed one).
func TestPageCountsOutcomesOnRealServer(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc)
	f.s.TestHooks().SetPageTiming(0, 300*time.Millisecond)
	const providers = 6
	f.seed(t, cycle1.ID, providers)
	f.clock.Set(cycle1.End.Add(time.Hour))
	ctx := context.Background()
	if _, err := f.s.API().HoldProvider(ctx, holdReq(cycle1.ID, "p-00001")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: settlement.SettlementKey(cycle1.ID, "p-00002", "CNY"), Description: "squatter",
		Postings: []*ledgerv1.Posting{
			{Account: "a", Direction: "debit", Amount: "1.00", Currency: "CNY"},
			{Account: "b", Direction: "credit", Amount: "1.00", Currency: "CNY"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	closeLeftClosing(t, f, tc)

	v, err := tc.QueryWorkflow(ctx, settlement.CycleWorkflowID(cycle1.ID), "", settlement.QueryProgress)
	if err != nil {
		t.Fatal(err)
	}
	var p settlement.Progress
	if err := v.Get(&p); err != nil {
		t.Fatal(err)
	}
	if want := (settlement.Progress{Providers: providers, Settled: providers - 2, Held: 1, Failed: 1, Runs: p.Runs}); p != want {
		t.Fatalf("progress = %+v, want %+v", p, want)
	}
	d, err := tc.DescribeWorkflowExecution(ctx, settlement.ProviderWorkflowID(cycle1.ID, "p-00002"), "")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.WorkflowExecutionInfo.Status; st != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
		t.Errorf("refused provider's workflow is %s, want failed", st)
	}
	if b := f.ledger.Balance(ids.ProviderPending("p-00001", cycle1.ID), "CNY"); b.String() != "1033.33" {
		t.Fatalf("held provider's pending = %s, want 1033.33", b)
	}
	if _, err := f.s.API().ReleaseProvider(ctx, &settlementv1.ReleaseProviderRequest{CycleId: cycle1.ID, ProviderId: "p-00001"}); err != nil {
		t.Fatal(err)
	}
	if b := f.ledger.Balance(ids.ProviderPending("p-00001", cycle1.ID), "CNY"); !b.IsZero() {
		t.Fatalf("released provider's pending = %s, want 0", b)
	}
	wantCycleStatus(t, f, cycle1.ID, cycleClosing)
}

// A hold of a provider whose settlement has begun (its prepare found it not
// held; the ledger may have posted it) is refused, naming the payout hold to
// use: it was answered 200 while the settlement went on and posted the net
// to available, so the provider read as held and was settled and paid.
// The ledger's answers are slowed so that the hold comes while the
// settlement posts.
func TestHoldRefusedOnceSettlementBegan(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc)
	f.ledger.Delay = time.Second
	f.seed(t, cycle1.ID, 1)
	f.clock.Set(cycle1.End.Add(time.Hour))
	ctx := context.Background()
	runWorker(t, f.s)
	if _, err := f.s.API().CloseSettlementCycle(ctx, &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID}); err != nil {
		t.Fatal(err)
	}
	key := settlement.SettlementKey(cycle1.ID, "p-00000", "CNY")
	testkit.Eventually(t, 60*time.Second, func() bool {
		var n int
		err := f.pool.QueryRow(ctx, `select count(*) from tax.withholdings where idempotency_key = $1`, key).Scan(&n)
		return err == nil && n == 1
	}, "p-00000's withholding recorded: its settlement is posting")
	_, err := f.s.API().HoldProvider(ctx, holdReq(cycle1.ID, "p-00000"))
	if status.Code(apperr.ToStatus(err)) != codes.FailedPrecondition || !strings.Contains(err.Error(), "payout-hold") {
		t.Fatalf("hold of a provider whose settlement is posting: %v; want FailedPrecondition naming the payout hold", err)
	}
	waitCycleSettled(t, f.s, cycle1.ID, 60*time.Second)
	var held int
	if err := f.pool.QueryRow(ctx, `select count(*) from settlement.holds where held`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("holds recorded = %d (%v); want none", held, err)
	}
}

// A provider whose settlement failed keeps its cycle closing (it was
// marked settled, the money left in pending, nothing showing it). A
// release of it answers why its settlement failed (it was a 500); once the
// cause is gone, settlement's start-up and a close request run the
// cycle's settlement again (the ended workflow could not run again, and a
// close answered the closing cycle unchanged): the first settles one
// refused provider, the second the other and the cycle.
func TestFailedProviderKeepsItsCycleClosing(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc)
	f.s.TestHooks().SetPageTiming(0, 300*time.Millisecond)
	const providers = 3
	f.seed(t, cycle1.ID, providers)
	f.clock.Set(cycle1.End.Add(time.Hour))
	ctx := context.Background()
	key, key1 := settlement.SettlementKey(cycle1.ID, "p-00002", "CNY"), settlement.SettlementKey(cycle1.ID, "p-00001", "CNY")
	f.ledger.Refuse(key, status.Error(codes.InvalidArgument, "provider:p-00002:pending would go negative"))
	f.ledger.Refuse(key1, status.Error(codes.InvalidArgument, "provider:p-00001:pending would go negative"))
	runWorker(t, f.s)
	close := func() {
		t.Helper()
		if _, err := f.s.API().CloseSettlementCycle(ctx, &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID}); err != nil {
			t.Fatal(err)
		}
	}
	close()
	waitCycleRunEnded(t, tc, cycle1.ID, 60*time.Second)
	wantCycleStatus(t, f, cycle1.ID, cycleClosing)
	if b := f.ledger.Balance(ids.ProviderPending("p-00002", cycle1.ID), "CNY"); b.String() != "1033.33" {
		t.Fatalf("refused provider's pending = %s, want 1033.33", b)
	}
	_, err := f.s.API().ReleaseProvider(ctx, &settlementv1.ReleaseProviderRequest{CycleId: cycle1.ID, ProviderId: "p-00002"})
	if status.Code(apperr.ToStatus(err)) != codes.FailedPrecondition || !strings.Contains(err.Error(), "would go negative") {
		t.Fatalf("release of the refused provider: %v; want FailedPrecondition naming the ledger's refusal", err)
	}
	t.Logf("release of the refused provider answered: %v", err)
	wantCycleStatus(t, f, cycle1.ID, cycleClosing)

	f.ledger.Refuse(key1, nil)
	if err := f.s.StartCycles(ctx); err != nil { // as at settlement's start-up
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, func() bool {
		return f.ledger.Balance(ids.ProviderPending("p-00001", cycle1.ID), "CNY").IsZero()
	}, "p-00001 settled by the cycle's run at start-up")
	waitCycleRunEnded(t, tc, cycle1.ID, 60*time.Second)
	wantCycleStatus(t, f, cycle1.ID, cycleClosing)

	f.ledger.Refuse(key, nil)
	close()
	waitCycleSettled(t, f.s, cycle1.ID, 60*time.Second)
	for i := range providers {
		if b := f.ledger.Balance(ids.ProviderPending(fmt.Sprintf("p-%05d", i), cycle1.ID), "CNY"); !b.IsZero() {
			t.Errorf("p-%05d pending = %s after the second close", i, b)
		}
	}
}

// A release whose provider settles only after the call stopped waiting
// (the ledger down for a while) still settles its cycle: the cycle's
// workflow had ended, the release answered 200 without marking it, and the
// cycle stayed closing with every provider settled, no alert firing.
func TestLateReleaseStillSettlesItsCycle(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc)
	f.s.TestHooks().SetPageTiming(0, 300*time.Millisecond)
	f.s.TestHooks().SetReleaseWait(2 * time.Second)
	f.seed(t, cycle1.ID, 2)
	f.clock.Set(cycle1.End.Add(time.Hour))
	ctx := context.Background()
	if _, err := f.s.API().HoldProvider(ctx, holdReq(cycle1.ID, "p-00001")); err != nil {
		t.Fatal(err)
	}
	closeLeftClosing(t, f, tc)
	key := settlement.SettlementKey(cycle1.ID, "p-00001", "CNY")
	f.ledger.Refuse(key, status.Error(codes.Unavailable, "ledger down"))
	if _, err := f.s.API().ReleaseProvider(ctx, &settlementv1.ReleaseProviderRequest{CycleId: cycle1.ID, ProviderId: "p-00001"}); err != nil {
		t.Fatalf("release while the ledger is down: %v; want it answered, the settlement going on", err)
	}
	wantCycleStatus(t, f, cycle1.ID, cycleClosing)
	f.ledger.Refuse(key, nil)
	waitCycleSettled(t, f.s, cycle1.ID, 60*time.Second)
	if b := f.ledger.Balance(ids.ProviderPending("p-00001", cycle1.ID), "CNY"); !b.IsZero() {
		t.Errorf("released provider's pending = %s", b)
	}
	// The state it was left in, two hours on: every provider settled, the
	// cycle closing. gpubill_settlement_closing_stalled_seconds counted
	// only pending rows, and read 0.
	if _, err := f.pool.Exec(ctx, `update settlement.cycles set status = 'closing', settled_at = null,
		closed_at = now() - interval '2 hours' where cycle_id = $1`, cycle1.ID); err != nil {
		t.Fatal(err)
	}
	for _, m := range settlement.Metrics() {
		if m.Name != "gpubill_settlement_closing_stalled_seconds" {
			continue
		}
		var stalled float64
		if err := f.pool.QueryRow(ctx, m.Query).Scan(&stalled); err != nil || stalled < 7000 {
			t.Errorf("closing_stalled_seconds = %v (%v) for a cycle closing 2 h with every provider settled", stalled, err)
		}
	}
}

// A cycle settlement has not settled that the configured calendar does not
// cut (its length or anchor changed since) fails settlement's start-up,
// naming the cycle and the calendar: it was skipped with a warning, its
// providers' pending earnings never settled.
func TestStartUpRefusesACycleTheCalendarDoesNotCut(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc)
	f.clock.Set(cycle1.End.Add(time.Hour))
	// cyc-20260131: a 30-day calendar's second cycle, not one of the default 45-day calendar's.
	if _, err := f.pool.Exec(context.Background(), `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
		values ('cyc-20260131', 'closing', '2026-01-31', '2026-03-02', '2026-03-03')`); err != nil {
		t.Fatal(err)
	}
	err := f.s.StartCycles(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cyc-20260131") || !strings.Contains(err.Error(), "GPUBILL_CYCLE_DAYS 45") {
		t.Fatalf("start-up with a cycle the calendar does not cut: %v; want an error naming it and the calendar", err)
	}
}

// closeLeftClosing runs the worker, closes cycle1 and waits for its run to
// end with the cycle still closing (a provider held or failed).
func closeLeftClosing(t *testing.T, f *fixture, tc client.Client) {
	t.Helper()
	runWorker(t, f.s)
	if _, err := f.s.API().CloseSettlementCycle(context.Background(), &settlementv1.CloseSettlementCycleRequest{CycleId: cycle1.ID}); err != nil {
		t.Fatal(err)
	}
	waitCycleRunEnded(t, tc, cycle1.ID, 60*time.Second)
	wantCycleStatus(t, f, cycle1.ID, cycleClosing)
}
