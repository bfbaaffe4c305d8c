package ledger_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger"
)

// The report benchmark's journal: 10 000 000 postings (5 000 000 two-legged
// transactions) over 100 days for 100 000 clients, with a balance
// checkpoint every 5 days (about checkpointPostingsMax postings apart).
const (
	benchReportPostings   = 10_000_000
	benchReportRenters    = 60_000
	benchReportProviders  = 40_000
	benchReportDays       = 100
	benchReportCheckEvery = 5      // days
	benchReportRuns       = 10     // per as_of kind
	benchReportCopyTx     = 10_000 // transactions (20 000 postings) per COPY
)

// TestBenchReport: p50 and p99 of the JSON segregated-funds report (computed
// and rendered, every client line) as of now and as of instants mid-history.
// The journal is built with COPY; the checkpoints by the ledger's own code.
func TestBenchReport(t *testing.T) {
	testkit.Bench(t, "report")
	ctx := context.Background()
	start := time.Date(2026, 8, 23, 0, 0, 0, 0, time.UTC)
	end := start.Add(benchReportDays * 24 * time.Hour)
	f := newFixtureAt(t, nil, clock.NewManual(end))
	cal := cycles.Default()
	tBuild := time.Now()

	// COPY the postings in time order, as the writer appends them.
	rng := rand.New(rand.NewPCG(1, 2))
	step := end.Sub(start) / time.Duration(benchReportPostings/2)
	i, leg := 0, 0
	var tx pgtype.UUID
	var at time.Time
	var legs [2]string
	var amt pgtype.Numeric
	wallet := func(n int) string { return fmt.Sprintf("renter:r-%06d:wallet", n) }
	prov := func(n int, sub string) string { return fmt.Sprintf("provider:p-%06d:%s", n, sub) }
	chunkEnd := 0
	next := func() ([]any, error) {
		if i >= chunkEnd || i >= benchReportPostings/2 {
			return nil, nil
		}
		if leg == 0 {
			at = start.Add(time.Duration(i) * step)
			tx = pgtype.UUID{Bytes: uuid.Must(uuid.NewV7()), Valid: true} // time-ordered, as the writer makes them
			amt = pgtype.Numeric{Int: big.NewInt(int64(1 + rng.IntN(20000))), Exp: -2, Valid: true}
			r, p := rng.IntN(benchReportRenters), rng.IntN(benchReportProviders)
			pending := prov(p, "pending:"+cal.At(at).ID)
			switch k := rng.IntN(100); {
			case k < 30: // deposit: larger than a charge, so most wallets stay in credit
				legs = [2]string{"bank:client", wallet(r)}
				amt.Int.Mul(amt.Int, big.NewInt(3))
			case k < 80: // usage charge
				legs = [2]string{wallet(r), pending}
			case k < 95: // settled net
				legs = [2]string{pending, prov(p, "available")}
			default: // payout submitted
				legs = [2]string{prov(p, "available"), prov(p, "in_transit")}
			}
		}
		dir := "debit"
		if leg == 1 {
			dir = "credit"
		}
		row := []any{tx, int32(leg), legs[leg], "USD", dir, amt, at}
		if leg++; leg == 2 {
			leg, i = 0, i+1
		}
		return row, nil
	}
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `set synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	// In short COPYs: a transaction holding an xid holds back every
	// database's hash chain on this server (ChainStep waits for older xids).
	var n int64
	for i < benchReportPostings/2 {
		chunkEnd = i + benchReportCopyTx
		c, err := conn.Conn().CopyFrom(ctx, pgx.Identifier{"ledger", "postings"},
			[]string{"tx_id", "idx", "account", "currency", "direction", "amount", "created_at"}, pgx.CopyFromFunc(next))
		if err != nil {
			t.Fatalf("copy postings: %v", err)
		}
		n += c
	}
	conn.Release()
	if n != benchReportPostings {
		t.Fatalf("copied %d postings, want %d", n, benchReportPostings)
	}
	if _, err := f.pool.Exec(ctx, `vacuum analyze ledger.postings`); err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %d postings in %s", n, time.Since(tBuild).Round(time.Second))
	tCheck := time.Now()
	rp := f.svc.Reports()
	var checkpoints []time.Time
	for d := benchReportCheckEvery; d < benchReportDays; d += benchReportCheckEvery {
		cp := start.Add(time.Duration(d) * 24 * time.Hour)
		if err := rp.Store.MakeCheckpoint(ctx, cp); err != nil {
			t.Fatal(err)
		}
		checkpoints = append(checkpoints, cp)
	}
	var rows int
	if err := f.pool.QueryRow(ctx, `select count(*) from ledger.checkpoint_balances where at = $1`, checkpoints[len(checkpoints)-1]).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d checkpoints in %s (%d balances in the last)", len(checkpoints), time.Since(tCheck).Round(time.Second), rows)

	// Guard: the report as of one mid-history instant equals the postings'
	// own sum (a full scan, once), so the figure measures a correct report.
	mid := start.Add(52*24*time.Hour + 7*time.Hour)
	rep, err := rp.SegregatedFunds(ctx, &mid, "USD")
	if err != nil {
		t.Fatal(err)
	}
	var want string
	if err := f.pool.QueryRow(ctx, `select coalesce(sum(b), 0)::text from (
			select case when account like 'renter:%' then greatest(sum(case when direction = 'credit' then amount else -amount end), 0)
				else sum(case when direction = 'credit' then amount else -amount end) end as b
			from ledger.postings where created_at <= $1 and (account like 'renter:%' or account like 'provider:%') group by account) x`, mid).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if !rep.Requirement.Equal(decimal.RequireFromString(want)) || len(rep.Clients) < benchReportRenters/2 {
		t.Fatalf("report as of %s: requirement %s with %d client lines, the postings say %s", mid, rep.Requirement, len(rep.Clients), want)
	}
	t.Logf("guard: requirement %s over %d client lines as of %s", rep.Requirement, len(rep.Clients), mid)

	var took []time.Duration
	var bytes int
	cpu0 := processCPU()
	for run := 0; run < benchReportRuns; run++ {
		for _, asOf := range []time.Time{
			end, // now: the last checkpoint is 5 days (~500 000 postings) behind
			start.Add(time.Duration(20+rng.IntN(60)) * 24 * time.Hour).Add(time.Duration(rng.Int64N(int64(24 * time.Hour)))),
		} {
			t0 := time.Now()
			b, err := ledger.ExportSegregatedFunds(ctx, f.pool, &asOf, "USD", "json", nil)
			if err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(t0))
			bytes = len(b)
		}
	}
	goCPU := (processCPU() - cpu0) / time.Duration(len(took))
	slices.Sort(took)
	pct := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	note := fmt.Sprintf("%d postings, %d clients, %d client lines, JSON %d bytes; as_of now and mid-history; Go CPU %s per report (Postgres apart); load %s",
		benchReportPostings, benchReportRenters+benchReportProviders, len(rep.Clients), bytes, goCPU.Round(time.Millisecond), loadAvg())
	testkit.Report(t, testkit.Figure{Bench: "report_p50", Value: float64(pct(0.50).Milliseconds()), Unit: "ms", N: len(took), Note: note})
	testkit.Report(t, testkit.Figure{Bench: "report_p99", Value: float64(pct(0.99).Milliseconds()), Unit: "ms", N: len(took), Note: note})
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is the 1-minute load average (what else ran on the cores).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
