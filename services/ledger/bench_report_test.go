package ledger_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
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
	benchReportCopyRows   = 20_000 // balance rows per COPY

	// benchReportDB is the database the journal is built in once and kept
	// between runs (~3 GB; `dropdb -h 127.0.0.1 -U postgres
	// gpubill_bench_report` frees it). It is rebuilt when
	// benchReportFixture or the ledger's migrations change.
	benchReportDB = "gpubill_bench_report"
	// benchReportFixture is the generator's version: bump it with any
	// change to what buildReportJournal writes.
	benchReportFixture = 2
)

var benchReportStart = time.Date(2026, 8, 23, 0, 0, 0, 0, time.UTC)

func benchReportEnd() time.Time { return benchReportStart.Add(benchReportDays * 24 * time.Hour) }

// TestBenchReport: p50 and p99 of the JSON segregated-funds report, every
// client line, served by GET /v1/reports/segregated-funds, as of now (no
// as_of: the maintained balances), as of the journal's last instant (the
// latest checkpoint plus ~500 000 postings since, the worst case) and as
// of random instants mid-history. The journal is built with COPY into a
// kept database (see benchJournal); before timing, the report as of now
// and as of an instant mid-history is checked client by client against a
// full scan of the postings.
//
// report_p50/report_p99 take minutes (the first run ~20 more to build the
// journal): they run only when BENCH_FILTER names them
// (`BENCH_FILTER=report make bench`). GPUBILL_BENCH_CPUPROFILE=FILE writes
// a CPU profile of this process (the REST gateway, the gRPC handler and the
// report) over the timed runs.
func TestBenchReport(t *testing.T) {
	testkit.Bench(t, "report_p50 report_p99")
	if !strings.Contains(os.Getenv("BENCH_FILTER"), "report") {
		t.Skip("benchmark report runs only when BENCH_FILTER names it")
	}
	f := benchJournal(t)
	base, secret := startServer(t, f)
	tok, err := auth.Issue(secret, auth.RoleAuditor, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	get := func(asOf *time.Time) []byte {
		q := "/v1/reports/segregated-funds?currency=USD"
		if asOf != nil {
			q += "&as_of=" + url.QueryEscape(asOf.Format(time.RFC3339Nano))
		}
		req, err := http.NewRequest("GET", base+q, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %.300s %v", q, resp.StatusCode, b, err)
		}
		return b
	}

	// Guard: the figures are timed for a correct report only. Each as-of
	// instant starts from another base: the checkpoint before it (day 52
	// + 7 h, checkpoints on days 50 and 55), the checkpoint after it (day
	// 54 + 20 h), the balances now (the journal's end).
	end := benchReportEnd()
	mid := benchReportStart.Add(52*24*time.Hour + 7*time.Hour)
	late := benchReportStart.Add(54*24*time.Hour + 20*time.Hour)
	t0 := time.Now()
	nLines := checkReportAgainstScan(t, f, get(nil), nil)
	for _, at := range []time.Time{mid, late, end} {
		checkReportAgainstScan(t, f, get(&at), &at)
	}
	t.Logf("guard: the reports as of now, %s, %s and %s equal a full scan of the postings, client by client (%d client lines now; %s)",
		mid, late, end, nLines, time.Since(t0).Round(time.Second))

	if path := os.Getenv("GPUBILL_BENCH_CPUPROFILE"); path != "" {
		pf, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			t.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); pf.Close() }()
	}
	rng := rand.New(rand.NewPCG(3, 4))
	kinds := []string{"now", "as_of end", "as_of mid-history"}
	took := map[string][]time.Duration{}
	goCPUs, pgCPUs := map[string]time.Duration{}, map[string]time.Duration{}
	var all []time.Duration
	var bytes int
	load0 := loadAvg()
	cpu0, pgCPU0 := processCPU(), postgresCPU(t, f)
	for run := 0; run < benchReportRuns; run++ {
		midRun := benchReportStart.Add(time.Duration(20+rng.IntN(60)) * 24 * time.Hour).Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))
		for i, asOf := range []*time.Time{nil, &end, &midRun} {
			c0, p0 := processCPU(), postgresCPU(t, f)
			t0 := time.Now()
			b := get(asOf)
			d := time.Since(t0)
			goCPUs[kinds[i]] += processCPU() - c0
			pgCPUs[kinds[i]] += postgresCPU(t, f) - p0
			took[kinds[i]] = append(took[kinds[i]], d)
			all = append(all, d)
			bytes = len(b)
		}
	}
	goCPU := (processCPU() - cpu0) / time.Duration(len(all))
	pgCPU := (postgresCPU(t, f) - pgCPU0) / time.Duration(len(all))
	pct := func(ds []time.Duration, p float64) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(p*float64(len(ds))))]
	}
	for _, k := range kinds {
		n := time.Duration(len(took[k]))
		t.Logf("%s: p50 %s, max %s (n=%d); CPU per report: test process %s, Postgres %s", k, pct(took[k], 0.5).Round(time.Millisecond),
			pct(took[k], 1).Round(time.Millisecond), len(took[k]), (goCPUs[k] / n).Round(time.Millisecond), (pgCPUs[k] / n).Round(time.Millisecond))
	}
	load := load0 + " → " + loadAvg()
	t.Logf("load average (1, 5, 15 min) before → after the timed runs: %s", load)
	note := fmt.Sprintf("GET /v1/reports/segregated-funds JSON, %d postings, %d clients, %d client lines now, %d bytes; as_of now, end, mid-history; test process CPU %s per report (server and client), Postgres CPU %s per report (this database's backends); load %s",
		benchReportPostings, benchReportRenters+benchReportProviders, nLines, bytes, goCPU.Round(time.Millisecond), pgCPU.Round(time.Millisecond), load)
	testkit.Report(t, testkit.Figure{Bench: "report_p50", Value: float64(pct(all, 0.50).Milliseconds()), Unit: "ms", N: len(all), Note: note, Load: testkit.LoadAvg()})
	testkit.Report(t, testkit.Figure{Bench: "report_p99", Value: float64(pct(all, 0.99).Milliseconds()), Unit: "ms", N: len(all), Note: note, Load: testkit.LoadAvg()})
}

// checkReportAgainstScan decodes a JSON report and checks every client line
// and the requirement against the sums of every posting up to asOf (nil:
// all of them), a full scan of the journal. It returns the client lines.
func checkReportAgainstScan(t *testing.T, f *fixture, body []byte, asOf *time.Time) int {
	t.Helper()
	var rep struct {
		Requirement string `json:"client_money_requirement"`
		Clients     []struct {
			Kind      string `json:"kind"`
			ClientID  string `json:"client_id"`
			Wallet    string `json:"wallet"`
			Pending   string `json:"pending"`
			Available string `json:"available"`
			InTransit string `json:"in_transit"`
			Total     string `json:"total"`
		} `json:"clients"`
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatalf("report JSON: %v", err)
	}
	upTo := benchReportEnd().Add(time.Hour)
	if asOf != nil {
		upTo = *asOf
	}
	want := map[string][5]decimal.Decimal{} // wallet, pending, available, in transit, total
	requirement := decimal.Zero
	for addr, net := range bruteBalances(t, f, "USD", upTo) {
		acc, err := domain.ParseAddress(addr)
		if err != nil {
			t.Fatal(err)
		}
		bal := acc.NormalBalance(net, decimal.Zero)
		var k string
		var col int
		switch {
		case acc.Class == domain.ClassRenter && bal.IsPositive():
			k, col = "renter:"+acc.Party, 0
		case acc.Class == domain.ClassProvider && acc.Sub == domain.ProviderPending:
			k, col = "provider:"+acc.Party, 1
		case acc.Class == domain.ClassProvider && acc.Sub == domain.ProviderAvailable:
			k, col = "provider:"+acc.Party, 2
		case acc.Class == domain.ClassProvider && acc.Sub == domain.ProviderInTransit:
			k, col = "provider:"+acc.Party, 3
		default:
			continue
		}
		w := want[k]
		w[col], w[4] = w[col].Add(bal), w[4].Add(bal)
		want[k] = w
	}
	for k, w := range want {
		if w[4].IsNegative() { // a provider in debit offsets no one: no line, not in the requirement
			delete(want, k)
			continue
		}
		requirement = requirement.Add(w[4])
	}
	text := func(d decimal.Decimal) string { return d.StringFixed(2) }
	if rep.Requirement != text(requirement) {
		t.Fatalf("report as of %v: requirement %s, the postings say %s", asOf, rep.Requirement, text(requirement))
	}
	if len(rep.Clients) != len(want) {
		t.Fatalf("report as of %v: %d client lines, the postings make %d", asOf, len(rep.Clients), len(want))
	}
	for _, c := range rep.Clients {
		w, ok := want[c.Kind+":"+c.ClientID]
		got := [5]string{c.Wallet, c.Pending, c.Available, c.InTransit, c.Total}
		exp := [5]string{text(w[0]), text(w[1]), text(w[2]), text(w[3]), text(w[4])}
		if c.Kind == "renter" {
			exp[1], exp[2], exp[3] = "", "", ""
		} else {
			exp[0] = ""
		}
		if !ok || got != exp {
			t.Fatalf("report as of %v: client %s:%s is %v, the postings say %v (found: %v)", asOf, c.Kind, c.ClientID, got, exp, ok)
		}
	}
	return len(rep.Clients)
}

// benchJournalKey names what the kept database holds: the generator's
// version and sizes, and the ledger's migrations (a new one rebuilds it).
func benchJournalKey(t *testing.T) string {
	h := sha256.New()
	m := migrations.For("ledger")
	if err := fs.WalkDir(m, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(m, path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("report fixture v%d: %d postings, %d renters, %d providers, %d days, checkpoint every %d days; ledger migrations %x",
		benchReportFixture, benchReportPostings, benchReportRenters, benchReportProviders, benchReportDays, benchReportCheckEvery, h.Sum(nil)[:8])
}

// benchJournal opens the ledger in benchReportDB, building the journal
// there first unless the database already holds this version of it. One
// run builds at a time (a session advisory lock); the key is written last,
// so a build cut short is redone.
func benchJournal(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	base, err := url.Parse(testkit.BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, base.String())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `select pg_advisory_lock(hashtext('gpubill.bench.report'))`); err != nil {
		t.Fatal(err)
	}
	u := *base
	u.Path = "/" + benchReportDB
	key := benchJournalKey(t)
	open := func() *fixture {
		pool, err := pg.Open(ctx, u.String(), 16)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return newFixtureOn(t, pool, nil, clock.NewManual(benchReportEnd()))
	}
	found := testkit.StoredFixtureKey(t, admin, benchReportDB, u.String())
	if found == key {
		t.Logf("reusing database %s (%s)", benchReportDB, key)
		return open()
	}
	t.Logf("building database %s (%s; it held %q)", benchReportDB, key, found)
	for _, q := range []string{"drop database if exists " + benchReportDB + " with (force)", "create database " + benchReportDB} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	f := open()
	tBuild := time.Now()
	buildReportJournal(t, f)
	for _, q := range []string{
		`create table public.bench_fixture (key text not null, built_at timestamptz not null default now(), build_seconds int not null)`,
		`insert into public.bench_fixture (key, build_seconds) values ($1, $2)`,
	} {
		args := []any{key, int(time.Since(tBuild).Seconds())}
		if !strings.HasPrefix(q, "insert") {
			args = nil
		}
		if _, err := f.pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("built %s in %s", benchReportDB, time.Since(tBuild).Round(time.Second))
	return f
}

// buildReportJournal COPYs the postings in time order, as the writer
// appends them, in short transactions (a transaction holding an xid holds
// back every database's hash chain on this server: ChainStep waits for
// older xids); then the balances they make (COPY, summed here while
// generating), and the checkpoints by the ledger's own code.
func buildReportJournal(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	start, end := benchReportStart, benchReportEnd()
	cal := cycles.Default()
	tBuild := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	step := end.Sub(start) / time.Duration(benchReportPostings/2)
	type bal struct {
		debits, credits int64 // cents
		cycle           string
	}
	balances := map[string]*bal{}
	i, leg := 0, 0
	var tx pgtype.UUID
	var at time.Time
	var legs [2]string
	var cents int64
	var cycle string
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
			cents = int64(1 + rng.IntN(20000))
			r, p := rng.IntN(benchReportRenters), rng.IntN(benchReportProviders)
			cycle = cal.At(at).ID
			pending := prov(p, "pending:"+cycle)
			switch k := rng.IntN(100); {
			case k < 30: // deposit: larger than a charge, so most wallets stay in credit
				legs = [2]string{"bank:client", wallet(r)}
				cents *= 3
			case k < 80: // usage charge
				legs = [2]string{wallet(r), pending}
			case k < 95: // settled net
				legs = [2]string{pending, prov(p, "available")}
			default: // payout submitted
				legs = [2]string{prov(p, "available"), prov(p, "in_transit")}
			}
		}
		dir := "debit"
		b := balances[legs[leg]]
		if b == nil {
			b = &bal{}
			if strings.Contains(legs[leg], ":pending:") {
				b.cycle = cycle
			}
			balances[legs[leg]] = b
		}
		if leg == 1 {
			dir = "credit"
			b.credits += cents
		} else {
			b.debits += cents
		}
		row := []any{tx, int32(leg), legs[leg], "USD", dir, pgtype.Numeric{Int: big.NewInt(cents), Exp: -2, Valid: true}, at}
		if leg++; leg == 2 {
			leg, i = 0, i+1
		}
		return row, nil
	}
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `set synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	var n int64
	for i < benchReportPostings/2 {
		chunkEnd = i + benchReportCopyTx
		c, err := conn.Conn().CopyFrom(ctx, pgx.Identifier{"ledger", "postings"},
			[]string{"tx_id", "idx", "account", "currency", "direction", "amount", "created_at"}, pgx.CopyFromFunc(next))
		if err != nil {
			t.Fatalf("copy postings: %v", err)
		}
		n += c
		if i%(benchReportPostings/20) == 0 {
			t.Logf("copied %d postings (%s)", n, time.Since(tBuild).Round(time.Second))
		}
	}
	if n != benchReportPostings {
		t.Fatalf("copied %d postings, want %d", n, benchReportPostings)
	}
	t.Logf("copied %d postings in %s", n, time.Since(tBuild).Round(time.Second))

	var rows [][]any
	for acc, b := range balances {
		var cyc *string
		if b.cycle != "" {
			cyc = &b.cycle
		}
		rows = append(rows, []any{acc, "USD", pgtype.Numeric{Int: big.NewInt(b.debits), Exp: -2, Valid: true},
			pgtype.Numeric{Int: big.NewInt(b.credits), Exp: -2, Valid: true}, cyc})
	}
	for s := 0; s < len(rows); s += benchReportCopyRows {
		if _, err := conn.Conn().CopyFrom(ctx, pgx.Identifier{"ledger", "balances"}, []string{"account", "currency", "debits", "credits", "cycle_id"},
			pgx.CopyFromRows(rows[s:min(s+benchReportCopyRows, len(rows))])); err != nil {
			t.Fatalf("copy balances: %v", err)
		}
	}
	for _, q := range []string{`vacuum analyze ledger.postings`, `vacuum analyze ledger.balances`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d balances", len(rows))

	tCheck := time.Now()
	rp := f.svc.Reports()
	var last time.Time
	for d := benchReportCheckEvery; d < benchReportDays; d += benchReportCheckEvery {
		last = start.Add(time.Duration(d) * 24 * time.Hour)
		if made, err := rp.Store.MakeCheckpoint(ctx, last); err != nil || !made {
			t.Fatalf("checkpoint at %s: made %v, %v", last, made, err)
		}
	}
	if _, err := conn.Exec(ctx, `vacuum analyze ledger.checkpoint_balances`); err != nil {
		t.Fatal(err)
	}
	var cps int
	if err := f.pool.QueryRow(ctx, `select count(*) from ledger.checkpoint_balances where at = $1`, last).Scan(&cps); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoints in %s (%d balances in the last)", time.Since(tCheck).Round(time.Second), cps)
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU is the user + system CPU time so far of the Postgres
// backends connected to the fixture's database (read from /proc: the server
// runs on this machine; 0 when it cannot be read). A backend that ended
// in between, a parallel worker, or the server's own processes (WAL writer,
// checkpointer) are not counted.
func postgresCPU(t *testing.T, f *fixture) time.Duration {
	t.Helper()
	rows, err := f.pool.Query(context.Background(), `select pid from pg_stat_activity where datname = current_database()`)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
		var u, k int64
		if _, err := fmt.Sscan(fields[11]+" "+fields[12], &u, &k); err == nil {
			ticks += u + k
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ = 100
}

// loadAvg is the 1, 5 and 15-minute load averages (what else ran on the cores).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
