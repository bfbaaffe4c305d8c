package e2e

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/benchkit"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/ledgerhistory"
	"github.com/gpubill/gpubill/services/metering"
	"github.com/gpubill/gpubill/services/pricing"
)

// The history pipeline_history runs on: 10 000 000 usage events of 500 000
// leases (1–39 one-hour events each, ~20 on average) over 180 days, each
// charged on the journal (10 000 000 charge transactions), a deposit per
// 25 charges and, as each 45-day cycle closes, every provider's earnings of
// it released from pending to available: ~10.5 M transactions, ~21 M
// postings, 20 000 providers and 60 000 renters.
const (
	historyEvents      = 10_000_000
	historyLeaseEvents = 20 // average events per lease
	historyProviders   = 20_000
	historyRenters     = 60_000
	historyDays        = 180
	historyDepositPer  = 25     // charges per deposit
	historyCopyRows    = 20_000 // usage rows per COPY
	historyCurrency    = "CNY"

	// historyDB is the database the history is built in once and kept
	// between runs, in the kept cluster historyDir. Rebuilt when
	// historyFixture or the migrations of metering, pricing or the ledger
	// change.
	historyDB = "gpubill_bench_history"
	// historyFixture is the generator's version: bump it with any change
	// to what buildHistory writes.
	historyFixture = 1
)

// historyDir is the kept PostgreSQL cluster of pipeline_history (~15 GB;
// remove the directory to free it): GPUBILL_BENCH_HISTORY_DIR, by default
// /var/tmp/gpubill-bench-history. A cluster of its own because the bulk
// load and its index builds hold transaction ids for minutes, which on the
// shared server would hold back every other database's hash chain
// (DEVELOPERS.md: short transactions).
func historyDir() string {
	if d := os.Getenv("GPUBILL_BENCH_HISTORY_DIR"); d != "" {
		return d
	}
	return "/var/tmp/gpubill-bench-history"
}

// historySettings are read from the shared test server and given to the
// kept cluster, so both pipeline figures of a run meet the same server
// configuration as the plain pipeline figure does.
var historySettings = []string{"fsync", "synchronous_commit", "full_page_writes", "wal_level", "autovacuum",
	"shared_buffers", "max_wal_size", "min_wal_size", "checkpoint_timeout", "work_mem", "maintenance_work_mem",
	"effective_cache_size", "random_page_cost", "jit"}

// TestBenchPipelineHistory: pipeline_history is the pipeline figure (the same
// 200 000 events, the same services and checks as TestBenchPipeline) on a
// database whose usage and journal already hold ~10 M rows each, beside
// `pipeline` measured on a fresh database of the same cluster in the same
// run; its ratio is to that pipeline figure (goal ≥ 0.8, issue 16). It runs
// only when BENCH_FILTER names it (`BENCH_FILTER=pipeline_history make
// bench`): the first run (and the first after a migration) builds the
// history.
func TestBenchPipelineHistory(t *testing.T) {
	testkit.Bench(t, "pipeline_history")
	if !strings.Contains(os.Getenv("BENCH_FILTER"), "pipeline_history") {
		t.Skip("benchmark pipeline_history runs only when BENCH_FILTER names it")
	}
	jsCeiling := benchkit.JetStreamUsageEvents(t, pipelineEvents)
	base := testkit.KeptCluster(t, historyDir(), mirroredSettings(t)...)
	dsn, size := historyDatabase(t, base)
	t.Logf("load average before the timed runs: %s", loadAvg3())

	var plain, hist pipelineResult
	t.Run("pipeline", func(t *testing.T) {
		pool := openPool(t, testkit.NewDatabaseOn(t, base))
		plain = runPipeline(t, pool, "")
		logBufferReads(t, pool)
	})
	t.Run("pipeline_history", func(t *testing.T) {
		// This run's parties and events are its own: the history is kept
		// between runs and keys are idempotent.
		pool := openPool(t, dsn)
		resetStats(t, pool)
		hist = runPipeline(t, pool, fmt.Sprintf("h%d-", time.Now().Unix()))
		logBufferReads(t, pool)
	})
	if t.Failed() || plain.elapsed == 0 || hist.elapsed == 0 {
		return
	}
	p := plain.figure("pipeline")
	p.Note += "; fresh database on the kept cluster"
	testkit.ReportAgainst(t, p, jsCeiling)
	h := hist.figure("pipeline_history")
	hc, err := h.Against(jsCeiling)
	if err != nil {
		t.Fatal(err)
	}
	h.Note += fmt.Sprintf("; %s; ratio to %s %.3f; load %s", size, jsCeiling.Bench, hc.Ratio, loadAvg3())
	r, err := h.Against(p)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Report(t, r)
}

func openPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pg.Open(context.Background(), dsn, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// mirroredSettings reads historySettings from the shared test server.
func mirroredSettings(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, testkit.BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `select n, current_setting(n) from unnest($1::text[]) as n`, historySettings)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var n, v string
		if err := rows.Scan(&n, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, n+"="+v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kept cluster settings, as on the test server: %s", strings.Join(out, " "))
	return out
}

// historyKey names what the kept database holds: the generator's version
// and sizes, and the migrations of the services that run on it.
func historyKey(t *testing.T) string {
	h := sha256.New()
	for _, svc := range []string{"metering", "pricing", "ledger"} {
		m := migrations.For(svc)
		if err := fs.WalkDir(m, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := fs.ReadFile(m, path)
			h.Write([]byte(svc + "/" + path))
			h.Write(b)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprintf("history fixture v%d: %d usage events, %d providers, %d renters, %d days; migrations %x",
		historyFixture, historyEvents, historyProviders, historyRenters, historyDays, h.Sum(nil)[:8])
}

// historyDatabase returns the DSN of historyDB on the cluster at base,
// building the history there first unless it holds this version of it, and
// what it holds. The key is written last, so a build cut short is redone.
func historyDatabase(t *testing.T, base string) (string, string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base+"/postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + historyDB
	dsn := u.String()
	key := historyKey(t)
	found := testkit.StoredFixtureKey(t, admin, historyDB, dsn)
	if found != key {
		t.Logf("building database %s (%s; it held %q)", historyDB, key, found)
		for _, q := range []string{"drop database if exists " + historyDB + " with (force)", "create database " + historyDB} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now()
		buildHistory(t, dsn)
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `create table public.bench_fixture (key text not null, built_at timestamptz not null default now(), build_seconds int not null)`); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, `insert into public.bench_fixture (key, build_seconds) values ($1, $2)`, key, int(time.Since(t0).Seconds())); err != nil {
			t.Fatal(err)
		}
		t.Logf("built %s in %s (load %s)", historyDB, time.Since(t0).Round(time.Second), loadAvg3())
	} else {
		t.Logf("reusing database %s (%s)", historyDB, key)
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var usage, txs, postings int64
	var dbSize string
	if err := c.QueryRow(ctx, `select (select count(*) from metering.usage_events), (select count(*) from ledger.transactions),
		(select count(*) from ledger.postings), pg_size_pretty(pg_database_size(current_database()))`).Scan(&usage, &txs, &postings, &dbSize); err != nil {
		t.Fatal(err)
	}
	size := fmt.Sprintf("history: %d usage events, %d transactions, %d postings, %s", usage, txs, postings, dbSize)
	t.Log(size)
	return dsn, size
}

// histLease is a lease of the history, in the heap by its next event's end.
type histLease struct {
	id, provider, renter, model, region, workload string
	count, events, k                              int
	next                                          time.Time // end of event k
}

type leaseHeap []*histLease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h leaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leaseHeap) Push(x any)        { *h = append(*h, x.(*histLease)) }
func (h *leaseHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// historyModels are the GPU models of the history with their hourly price
// in cents.
var historyModels = []struct {
	model  string
	hourly int64
}{{"RTX_4090", 283}, {"RTX_3090", 150}, {"A100", 1200}, {"H100", 2500}, {"L40S", 900}, {"A6000", 600}}

// buildHistory migrates the services' schemas in dsn and writes the history
// in time order, as it would have arrived: each usage event when its hour
// ends, its charge a little later, deposits among them, and each cycle's
// releases once it closes. The usage and journal tables are loaded without
// their indexes, which are rebuilt after (with their own definitions).
func buildHistory(t *testing.T, dsn string) {
	t.Helper()
	ctx := testkit.Context(t)
	pool := openPool(t, dsn)
	js := testkit.NewJetStream(t)
	deps := svc.Deps{Pool: pool, JS: js.JS, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.System{}, Calendar: cycles.Default()}
	if _, err := metering.New(ctx, deps); err != nil {
		t.Fatal(err)
	}
	if _, err := pricing.New(ctx, deps); err != nil {
		t.Fatal(err)
	}
	led, err := ledger.New(ctx, deps)
	if err != nil {
		t.Fatal(err)
	}
	usageConn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer usageConn.Release()
	journalConn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer journalConn.Release()
	for _, c := range []*pgxpool.Conn{usageConn, journalConn} {
		if _, err := c.Exec(ctx, `set synchronous_commit = off`); err != nil {
			t.Fatal(err)
		}
	}
	tables := []string{"metering.usage_events", "ledger.transactions", "ledger.postings", "ledger.journal_chain"}
	saved := dropIndexes(t, usageConn.Conn(), tables)
	t0 := time.Now()

	cal := cycles.Default()
	rng := rand.New(rand.NewPCG(16, 10))
	end := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour)
	start := end.Add(-historyDays * 24 * time.Hour)
	// Parties: in metering, and the ledger's read model of renters.
	var provRows, rentRows, ledgerRenters [][]any
	for i := 0; i < historyProviders; i++ {
		provRows = append(provRows, []any{fmt.Sprintf("hp-%05d", i), "history", "standard", "individual", "CN",
			pgtype.Numeric{Int: big.NewInt(12), Exp: -1, Valid: true}, historyCurrency, int64(1), start, start})
	}
	for i := 0; i < historyRenters; i++ {
		id := fmt.Sprintf("hr-%05d", i)
		rentRows = append(rentRows, []any{id, "history", historyCurrency, pgtype.Numeric{Int: big.NewInt(0), Valid: true}, int64(1), start, start})
		ledgerRenters = append(ledgerRenters, []any{id, historyCurrency, pgtype.Numeric{Int: big.NewInt(0), Valid: true}, int64(1), start})
	}
	for _, c := range []struct {
		table string
		cols  []string
		rows  [][]any
	}{
		{"metering.providers", []string{"provider_id", "name", "tier", "tax_profile", "jurisdiction", "pue", "currency", "version", "created_at", "updated_at"}, provRows},
		{"metering.renters", []string{"renter_id", "name", "currency", "credit_limit", "version", "created_at", "updated_at"}, rentRows},
		{"ledger.renters", []string{"renter_id", "currency", "credit_limit", "version", "updated_at"}, ledgerRenters},
	} {
		s := strings.SplitN(c.table, ".", 2)
		if _, err := usageConn.Conn().CopyFrom(ctx, pgx.Identifier{s[0], s[1]}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
			t.Fatalf("copy %s: %v", c.table, err)
		}
	}

	w, err := ledgerhistory.NewWriter(ctx, journalConn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	regions := []string{"cn-east", "cn-north", "cn-south", "cn-west"}
	workloads := []string{"training", "inference", "rendering"}
	// 5 % more leases than the average needs, so the events reach
	// historyEvents before the leases run out (the last ~week of leases
	// then stays unstarted).
	leases := historyEvents / historyLeaseEvents * 105 / 100
	gap := (end.Sub(start) - 48*time.Hour) / time.Duration(leases) // every lease ends by the history's end
	h := &leaseHeap{}
	nextLease := 0
	pending := map[string]map[string]int64{} // cycle → provider → cents not yet released
	var closed [][]any
	var usageRows [][]any
	flushUsage := func() {
		if len(usageRows) == 0 {
			return
		}
		if _, err := usageConn.Conn().CopyFrom(ctx, pgx.Identifier{"metering", "usage_events"},
			[]string{"id", "lease_id", "provider_id", "renter_id", "gpu_model", "gpu_count", "start_time", "end_time", "region", "workload", "cycle_id", "status", "received_at"},
			pgx.CopyFromRows(usageRows)); err != nil {
			t.Fatalf("copy usage: %v", err)
		}
		usageRows = usageRows[:0]
	}
	// closeCycles releases every cycle that closed by at.
	closeCycles := func(at time.Time) {
		for cy, byProv := range pending {
			c, err := cal.Parse(cy)
			if err != nil {
				t.Fatal(err)
			}
			if c.Closes.After(at) {
				continue
			}
			for p, cents := range byProv {
				if err := w.Release(ctx, p, cy, historyCurrency, cents, c.Closes); err != nil {
					t.Fatal(err)
				}
			}
			closed = append(closed, []any{cy, c.Closes})
			delete(pending, cy)
		}
	}
	emitted := 0
	for emitted < historyEvents {
		if nextLease < leases && (h.Len() == 0 || !start.Add(time.Duration(nextLease)*gap+time.Hour).After((*h)[0].next)) {
			m := historyModels[rng.IntN(len(historyModels))]
			ls := start.Add(time.Duration(nextLease) * gap)
			n := 1 + rng.IntN(2*historyLeaseEvents-1)
			heap.Push(h, &histLease{id: fmt.Sprintf("lease-%07d", nextLease), provider: fmt.Sprintf("hp-%05d", rng.IntN(historyProviders)),
				renter: fmt.Sprintf("hr-%05d", rng.IntN(historyRenters)), model: m.model, region: regions[rng.IntN(len(regions))],
				workload: workloads[rng.IntN(len(workloads))], count: 1 + rng.IntN(8), events: n, next: ls.Add(time.Hour)})
			nextLease++
			continue
		}
		if h.Len() == 0 {
			t.Fatalf("history ran out of leases after %d events", emitted)
		}
		l := heap.Pop(h).(*histLease)
		evEnd := l.next
		evStart := evEnd.Add(-time.Hour)
		closeCycles(evEnd)
		id := fmt.Sprintf("ev-%016x", rng.Uint64())
		cy := cal.ForUsageEnd(evEnd).ID
		usageRows = append(usageRows, []any{id, l.id, l.provider, l.renter, l.model, int32(l.count), evStart, evEnd,
			l.region, l.workload, cy, "accepted", evEnd.Add(20 * time.Second)})
		if len(usageRows) >= historyCopyRows {
			flushUsage()
		}
		var hourly int64
		for _, m := range historyModels {
			if m.model == l.model {
				hourly = m.hourly
			}
		}
		amount := hourly * int64(l.count)
		if err := w.Charge(ctx, id, l.id, l.renter, l.provider, cy, historyCurrency, l.model, fmt.Sprint(l.count), amount, evEnd.Add(40*time.Second)); err != nil {
			t.Fatal(err)
		}
		if pending[cy] == nil {
			pending[cy] = map[string]int64{}
		}
		pending[cy][l.provider] += amount
		emitted++
		if emitted%historyDepositPer == 0 {
			if err := w.Deposit(ctx, fmt.Sprintf("hbank-%09d", emitted/historyDepositPer), l.renter, historyCurrency, 30*amount, evEnd.Add(30*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if emitted%(historyEvents/10) == 0 {
			t.Logf("history: %d usage events, %d transactions (%s)", emitted, w.Posted(), time.Since(t0).Round(time.Second))
		}
		if l.k++; l.k < l.events {
			l.next = l.next.Add(time.Hour)
			heap.Push(h, l)
		}
	}
	flushUsage()
	closeCycles(end)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(closed) > 0 {
		if _, err := usageConn.Conn().CopyFrom(ctx, pgx.Identifier{"ledger", "closed_cycles"}, []string{"cycle_id", "closed_at"}, pgx.CopyFromRows(closed)); err != nil {
			t.Fatalf("copy closed cycles: %v", err)
		}
	}
	t.Logf("history copied: %d usage events, %d transactions, %d cycles closed, %d leases (%s, load %s)", emitted, w.Posted(), len(closed), nextLease,
		time.Since(t0).Round(time.Second), loadAvg3())

	tIdx := time.Now()
	restoreIndexes(t, usageConn.Conn(), saved)
	t.Logf("indexes rebuilt (%s)", time.Since(tIdx).Round(time.Second))
	// The events' leases, as ingest records them (migration metering/0010
	// backfills the same way); the copy above bypassed ingest.
	if _, err := usageConn.Exec(ctx, `insert into metering.usage_leases (lease_id, renter_id, provider_id, first_start, last_day)
		select lease_id, renter_id, provider_id, min(start_time), max((end_time at time zone 'UTC')::date)
		from metering.usage_events group by lease_id, renter_id, provider_id`); err != nil {
		t.Fatalf("usage leases: %v", err)
	}
	// Their lock rows, as ingest writes them (a lease's first LockLeases).
	if _, err := usageConn.Exec(ctx, `insert into metering.lease_locks (lease_id)
		select distinct lease_id from metering.usage_leases`); err != nil {
		t.Fatalf("lease locks: %v", err)
	}
	tVac := time.Now()
	for _, q := range []string{"vacuum analyze metering.usage_events", "vacuum analyze metering.usage_leases", "vacuum analyze metering.lease_locks", "vacuum analyze metering.providers", "vacuum analyze metering.renters",
		"vacuum analyze ledger.transactions", "vacuum analyze ledger.postings", "vacuum analyze ledger.journal_chain",
		"vacuum analyze ledger.balances", "vacuum analyze ledger.accounts", "vacuum analyze ledger.renters"} {
		if _, err := usageConn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("vacuum analyze (%s)", time.Since(tVac).Round(time.Second))
	// A balance checkpoint, as the ledger keeps one at least daily: without
	// it the ledger's first CheckpointStep would fold the whole journal
	// while the pipeline is timed.
	tCk := time.Now()
	if err := checkpointPuttingUpWithDeferrals(ctx, led.Reports().CheckpointStep, t.Logf); err != nil {
		t.Fatal(err)
	}
	t.Logf("balance checkpoint (%s)", time.Since(tCk).Round(time.Second))
}

// The history's checkpoint, put off by a writer open past the step's own
// wait (20 s), is tried again after historyCheckpointPause, for up to
// historyCheckpointGiveUp.
const (
	historyCheckpointPause  = time.Second
	historyCheckpointGiveUp = 10 * time.Minute
)

// checkpointPuttingUpWithDeferrals runs the checkpoint step, again while it
// puts its checkpoint off (a *ledger.CheckpointDeferred: a writer stayed
// open past the wait, which the ledger counts and retries, no failure);
// any other error is returned at once, and a checkpoint still put off
// after historyCheckpointGiveUp is an error.
func checkpointPuttingUpWithDeferrals(ctx context.Context, step func(context.Context) (bool, error), logf func(string, ...any)) error {
	giveUp := time.Now().Add(historyCheckpointGiveUp)
	for {
		_, err := step(ctx)
		var deferred *ledger.CheckpointDeferred
		if !errors.As(err, &deferred) {
			return err
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("still put off after %s: %w", historyCheckpointGiveUp, err)
		}
		logf("balance checkpoint put off (%v); trying again", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(historyCheckpointPause):
		}
	}
}

// savedIndex is an index dropped for the load: a constraint's (re-added
// with its definition) or a plain one (re-created with its own).
type savedIndex struct {
	table, name, def string
	constraint       bool
}

// dropIndexes drops every index of tables and returns their definitions.
func dropIndexes(t *testing.T, c *pgx.Conn, tables []string) []savedIndex {
	t.Helper()
	ctx := context.Background()
	rows, err := c.Query(ctx, `select c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid), true
		from pg_constraint c where c.conrelid = any($1::text[]::regclass[]) and c.contype in ('p', 'u', 'x')
		union all
		select i.indrelid::regclass::text, i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), false
		from pg_index i where i.indrelid = any($1::text[]::regclass[])
		  and not exists (select 1 from pg_constraint c where c.conindid = i.indexrelid)`, tables)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (savedIndex, error) {
		var s savedIndex
		return s, r.Scan(&s.table, &s.name, &s.def, &s.constraint)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range saved {
		q := "drop index " + s.name
		if s.constraint {
			q = fmt.Sprintf("alter table %s drop constraint %s", s.table, s.name)
		}
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return saved
}

// restoreIndexes rebuilds what dropIndexes dropped.
func restoreIndexes(t *testing.T, c *pgx.Conn, saved []savedIndex) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{`set maintenance_work_mem = '1GB'`, `set max_parallel_maintenance_workers = 2`} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range saved {
		q := s.def
		if s.constraint {
			q = fmt.Sprintf("alter table %s add constraint %s %s", s.table, s.name, s.def)
		}
		t0 := time.Now()
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		t.Logf("%s (%s)", q, time.Since(t0).Round(time.Second))
	}
}

// resetStats zeroes the database's statistics counters (the history's
// build and earlier runs counted in them).
func resetStats(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `select pg_stat_reset()`); err != nil {
		t.Fatal(err)
	}
}

// logBufferReads logs the relations whose blocks the run read from outside
// shared buffers most (heap and index), where a cost that climbs with the
// size of a table would show first.
func logBufferReads(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `select schemaname || '.' || relname, coalesce(heap_blks_read, 0), coalesce(heap_blks_hit, 0),
			coalesce(idx_blks_read, 0), coalesce(idx_blks_hit, 0)
		from pg_statio_user_tables order by coalesce(heap_blks_read, 0) + coalesce(idx_blks_read, 0) desc limit 8`)
	if err != nil {
		t.Fatal(err)
	}
	var rel string
	var hr, hh, ir, ih int64
	_, err = pgx.ForEachRow(rows, []any{&rel, &hr, &hh, &ir, &ih}, func() error {
		t.Logf("buffers %s: heap read %d hit %d, indexes read %d hit %d", rel, hr, hh, ir, ih)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// loadAvg3 is the 1, 5 and 15-minute load averages.
func loadAvg3() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
