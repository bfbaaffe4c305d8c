package settlementstack_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/tempdev"
	"github.com/gpubill/gpubill/pkg/testkit"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement"
)

// On a Temporal server with PostgreSQL persistence and SQL visibility
// (`temporal gpubill-server`, its own process, its two databases made and
// schema'd by `temporal gpubill-sql-tool`): a cycle closes, the server is
// SIGKILLed mid-close and restarted on the same databases, and the close
// completes with every provider settled exactly once — one settlement
// transaction per provider and currency in the ledger, every provider's
// pending account emptied, the cycle's totals right — and Temporal's state
// is in PostgreSQL (a completed provider workflow per provider in the
// visibility database, executions in the persistence database).
func TestCloseSurvivesTemporalKillOnPostgres(t *testing.T) {
	t.Parallel()
	tp := testkit.NewTemporalPG(t, tempdev.Postgres{})
	tc := dialTemporal(t, tp.Address)
	f := newFixture(t, tc, settlement.WithBatchSize(40), settlement.WithWindow(10))
	const providers = 150
	f.seed(t, cycle1.ID, providers)
	f.ledger.Delay = 2 * time.Millisecond
	f.clock.Set(cycle1.End.Add(time.Hour))

	runWorker(t, f.s)
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
	testkit.Eventually(t, 90*time.Second, func() bool { return settled() >= 30 }, "30 providers settled")
	tp.Kill(t)
	atKill := settled()
	if atKill >= providers+1 {
		t.Fatalf("all %d settled before the server was killed; the test proves nothing", atKill)
	}
	// The worker keeps running against a dead frontend for a while.
	time.Sleep(2 * time.Second)
	t.Logf("Temporal server killed with %d of %d rows settled (%d two seconds later)", atKill, providers+1, settled())

	restarted := time.Now()
	tp.Start(t)
	// 14–77 s on a 2-core machine at load average 30–35 (heartbeat and
	// workflow task timeouts of what the killed server had in flight).
	waitCycleSettled(t, f.s, cycle1.ID, 180*time.Second)
	t.Logf("cycle settled %s after the restart", time.Since(restarted).Round(time.Millisecond))

	if n := settled(); n != providers+1 {
		t.Fatalf("settled rows = %d, want %d", n, providers+1)
	}
	posted := f.ledger.Transactions("settle-" + cycle1.ID + "-")
	keys := map[string]int{}
	for _, tx := range posted {
		keys[tx.IdempotencyKey]++
	}
	if len(posted) != providers+1 || len(keys) != len(posted) {
		t.Fatalf("posted %d settlement transactions with %d keys, want %d each", len(posted), len(keys), providers+1)
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
	checkSeededSplits(t, f, providers)
	t.Logf("ledger CreateTransaction calls for %d transactions: %d (replays answered idempotently)",
		len(posted), f.ledger.Requests("settle-"+cycle1.ID+"-"))
	resp2, err := f.s.API().GetSettlementCycle(ctx, &settlementv1.GetSettlementCycleRequest{CycleId: cycle1.ID})
	if err != nil {
		t.Fatal(err)
	}
	if c := resp2.SettlementCycle; c.Status != cycleSettled || len(c.Totals) != 2 || c.Totals[0].Currency != "CNY" || c.Totals[0].Providers != providers {
		t.Fatalf("cycle = %v", c)
	}

	// Temporal's state is in PostgreSQL: each provider's workflow completed
	// in the visibility database (written by the server's visibility queue,
	// so waited for), and executions in the persistence database.
	vis := pgConn(t, tp.DSN(t, tp.PG.VisibilityDatabase))
	var completed int
	testkit.Eventually(t, 60*time.Second, func() bool {
		err := vis.QueryRow(ctx, `select count(distinct workflow_id) from executions_visibility
			where workflow_id like $1 and status = 2`, settlement.ProviderWorkflowID(cycle1.ID, "")+"%").Scan(&completed)
		return err == nil && completed == providers
	}, "every provider's workflow completed in PostgreSQL visibility")
	var executions int
	if err := pgConn(t, tp.DSN(t, tp.PG.Database)).QueryRow(ctx, `select count(*) from executions`).Scan(&executions); err != nil {
		t.Fatal(err)
	}
	if executions < providers+1 {
		t.Fatalf("%d executions in Temporal's PostgreSQL store, want at least %d (cycle and providers)", executions, providers+1)
	}
}

func pgConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Logf("close %s: %v", dsn, err)
		}
	})
	return c
}
