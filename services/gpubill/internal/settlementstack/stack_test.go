package settlementstack_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/pkg/testkit/fakeledger"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement"
	"github.com/gpubill/gpubill/services/tax"
)

var (
	cal     = cycles.Default()
	cycle1  = cal.At(time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)) // cyc-20260101, closes 2026-02-16
	startAt = time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
)

// Statuses as settlement's API and tables write them.
const (
	cycleOpen    = "open"
	cycleClosing = "closing"
	cycleSettled = "settled"
	itemSettled  = "settled"
)

// fixture is a settlement service on a fresh database with the real tax
// service (same database, its own schema) and the in-memory fake ledger,
// on a real Temporal dev server.
type fixture struct {
	s      *settlement.Service
	pool   *pgxpool.Pool
	ledger *fakeledger.Ledger
	clock  *clock.Manual
}

func newFixture(t testing.TB, tc client.Client, opts ...settlement.Option) *fixture {
	t.Helper()
	return newFixtureLog(t, tc, slog.New(slog.DiscardHandler), opts...)
}

// newFixtureLog is newFixture with settlement logging to log.
func newFixtureLog(t testing.TB, tc client.Client, log *slog.Logger, opts ...settlement.Option) *fixture {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	l := fakeledger.New()
	clk := clock.NewManual(startAt)
	ts, err := tax.New(context.Background(), svc.Deps{Pool: pool, Log: slog.New(slog.DiscardHandler), Clock: clk, Calendar: cal})
	if err != nil {
		t.Fatal(err)
	}
	conn := fakeledger.Serve(t, l, nil, ts.RegisterGRPC)
	s, err := settlement.New(context.Background(), svc.Deps{Pool: pool, Log: log, Clock: clk, Calendar: cal, Internal: conn},
		tc, "settlement-test", append([]settlement.Option{settlement.WithoutStartupCycles()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{s: s, pool: pool, ledger: l, clock: clk}
}

// seed charges n providers p-0000.. in the cycle (one also in USD) and gives
// them tiers in rotation.
func (f *fixture) seed(t testing.TB, cycle string, n int) {
	t.Helper()
	tiers := []string{"standard", "pro", "partner"}
	ps, ts := make([]string, n), make([]string, n)
	for i := range n {
		p := fmt.Sprintf("p-%05d", i)
		f.ledger.Charge(p, cycle, "CNY", "1000.00")
		f.ledger.Charge(p, cycle, "CNY", "33.33")
		if i == 0 {
			f.ledger.Charge(p, cycle, "USD", "10.01")
		}
		ps[i], ts[i] = p, tiers[i%3]
	}
	if _, err := f.pool.Exec(context.Background(), `insert into settlement.providers (provider_id, tier)
		select * from unnest($1::text[], $2::text[])`, ps, ts); err != nil {
		t.Fatal(err)
	}
	taxProfiles(t, f.pool, ps...)
}

// taxProfiles gives providers the tax profile party.updated would (an
// individual in CN): the tax service withholds for no provider whose profile
// has not arrived.
func taxProfiles(t testing.TB, pool *pgxpool.Pool, providers ...string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `insert into tax.profiles (provider_id, tax_profile, jurisdiction, version, updated_at)
		select p, 'individual', 'CN', 1, now() from unnest($1::text[]) as p`, providers); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// dialTemporal connects to a Temporal server, waiting until its namespace
// answers (the frontend accepts TCP before the namespace is ready). On
// `temporal gpubill-server` the namespace is registered after start-up:
// DescribeNamespace reads it from the store at once, but the services'
// namespace registries see it only when they next refresh, and until then
// starting a workflow fails with "Namespace default is not found". So the
// wait also asks for the history of a workflow that does not exist, which
// resolves the namespace through the registry: "workflow not found" means
// the namespace is ready. dial adds options to its connection.
func dialTemporal(t testing.TB, addr string, dial ...grpc.DialOption) client.Client {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tc, err := client.Dial(client.Options{HostPort: addr, Logger: settlement.TemporalLogger(slog.New(slog.DiscardHandler)),
			ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}, DialOptions: dial}})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
			if err == nil {
				_, err = tc.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
					Namespace: "default", Execution: &commonpb.WorkflowExecution{WorkflowId: "gpubill-readiness-probe-" + ids.New("")}})
				var notFound *serviceerror.NotFound
				if errors.As(err, &notFound) {
					err = nil
				} else if err == nil {
					err = errors.New("readiness probe: a workflow that was never started has a history")
				}
			}
			cancel()
			if err == nil {
				t.Cleanup(tc.Close)
				return tc
			}
			tc.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("temporal at %s not ready: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runWorker runs the service (worker, relay) until the returned stop is called.
func runWorker(t testing.TB, s *settlement.Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitCycleRunEnded waits until the cycle's workflow run has ended.
func waitCycleRunEnded(t testing.TB, tc client.Client, cycle string, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, within, func() bool {
		d, err := tc.DescribeWorkflowExecution(context.Background(), settlement.CycleWorkflowID(cycle), "")
		return err == nil && d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}, "the workflow of cycle "+cycle+" ended")
}

// wantCycleStatus checks the cycle's status through the API.
func wantCycleStatus(t testing.TB, f *fixture, cycle, want string) {
	t.Helper()
	resp, err := f.s.API().GetSettlementCycle(context.Background(), &settlementv1.GetSettlementCycleRequest{CycleId: cycle})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.SettlementCycle.Status; got != want {
		t.Fatalf("cycle %s is %s, want %s", cycle, got, want)
	}
}

// waitCycleSettled waits until the service's cycle is settled.
func waitCycleSettled(t testing.TB, s *settlement.Service, cycle string, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, within, func() bool {
		ok, err := s.TestHooks().CycleSettled(context.Background(), cycle)
		return err == nil && ok
	}, "cycle "+cycle+" settled")
}

func holdReq(cycle, provider string) *settlementv1.HoldProviderRequest {
	return &settlementv1.HoldProviderRequest{CycleId: cycle, ProviderId: provider, Reason: "dispute"}
}

// wantSplit is the split DESIGN §5 prescribes, computed here without
// pkg/split or pkg/money: commission = gross × the tier's rate, tax = 20 %
// of gross − commission (flat20, individual: the default rule), net the
// rest; each truncated to cents, then the cents left over go one each to
// the parts with the largest remainders (ties to the earlier part).
func wantSplit(t testing.TB, gross decimal.Decimal, tier string) (commission, tax, net decimal.Decimal) {
	t.Helper()
	rates := map[string]string{"standard": "0.25", "pro": "0.20", "partner": "0.15"}
	rate, ok := rates[tier]
	if !ok {
		t.Fatalf("no commission rate for tier %q", tier)
	}
	c := gross.Mul(decimal.RequireFromString(rate))
	tx := gross.Sub(c).Mul(decimal.RequireFromString("0.20"))
	exact := []decimal.Decimal{c, tx, gross.Sub(c).Sub(tx)}
	parts := make([]decimal.Decimal, 3)
	left := gross
	for i, e := range exact {
		parts[i] = e.Truncate(2)
		left = left.Sub(parts[i])
	}
	order := []int{0, 1, 2}
	sort.SliceStable(order, func(a, b int) bool {
		return exact[order[a]].Sub(parts[order[a]]).GreaterThan(exact[order[b]].Sub(parts[order[b]]))
	})
	cent := decimal.New(1, -2)
	for _, i := range order {
		if !left.IsPositive() {
			break
		}
		parts[i] = parts[i].Add(cent)
		left = left.Sub(cent)
	}
	if !left.IsZero() {
		t.Fatalf("split of %s left %s over", gross, left)
	}
	return parts[0], parts[1], parts[2]
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// settlementTestdata is settlement's testdata, where its replay test
// (services/settlement/replay_test.go) reads the recorded histories.
const settlementTestdata = "../../../settlement/testdata"

// recordHistories writes the first run of the cycle workflow (as
// cycle_page_steps_history.json) and one provider workflow it started (as
// provider_steps_history.json, ProviderVersionSteps) to settlement's
// testdata (run with GPUBILL_RECORD_HISTORY=1).
func recordHistories(t *testing.T, tc client.Client, cycle, provider string) {
	if os.Getenv("GPUBILL_RECORD_HISTORY") != "1" {
		return
	}
	ctx := context.Background()
	resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowId = '" + settlement.CycleWorkflowID(cycle) + "'"})
	if err != nil || len(resp.Executions) == 0 {
		t.Fatalf("list runs: %v (%d)", err, len(resp.GetExecutions()))
	}
	runs := resp.Executions
	sort.Slice(runs, func(i, j int) bool { return runs[i].StartTime.AsTime().Before(runs[j].StartTime.AsTime()) })
	writeHistory(t, tc, "cycle_page_steps_history.json", settlement.CycleWorkflowID(cycle), runs[0].Execution.RunId)
	writeHistory(t, tc, "provider_steps_history.json", settlement.ProviderWorkflowID(cycle, provider), "")
}

// recordRemittanceHistory writes a remit-{period} run to settlement's
// testdata as remittance_zone_history.json (GPUBILL_RECORD_HISTORY=1).
func recordRemittanceHistory(t *testing.T, tc client.Client, id, runID string) {
	if os.Getenv("GPUBILL_RECORD_HISTORY") != "1" {
		return
	}
	writeHistory(t, tc, "remittance_zone_history.json", id, runID)
}

func writeHistory(t *testing.T, tc client.Client, name, id, runID string) {
	t.Helper()
	h := &historypb.History{}
	it := tc.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Indent: " "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(settlementTestdata, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
