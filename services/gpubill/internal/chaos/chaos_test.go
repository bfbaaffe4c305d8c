// Package chaos runs gpubill as separate processes (one per service, the
// binaries `make build` makes) against a NATS server and a PostgreSQL of its
// own, sends usage continuously through metering's REST ingest, and kills
// and restarts every service, NATS and PostgreSQL in turn. At the end every
// accepted event is charged exactly once and the books balance.
//
// GPUBILL_SKIP_CHAOS=1 skips it (quick local runs); it runs in `make test`.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
	"github.com/gpubill/gpubill/services/ledger"
)

// serviceNames in start order: producers first, so the streams a consumer
// attaches to already exist.
var serviceNames = []string{"metering", "pricing", "ledger", "tax", "payout", "settlement"}

// The test's shape.
const (
	// Secrets must be at least 32 bytes.
	chaosSecret = "chaos-test-signing-secret-0123456789abcdef"
	pgBinDir    = "/usr/lib/postgresql/15/bin"
	hourly      = "2.83" // CNY per GPU-hour: 6 minutes of one GPU is 0.283, so rounding matters
	providers   = 40     // each request carries usage of every provider
	renters     = 4
	leaseEvents = 10 // events per lease, 6 minutes each
	batchEvents = 40 // one event of each of 40 leases per request
	sendEvery   = 100 * time.Millisecond
	outage      = time.Second // how long a killed process stays down
	readyWithin = 90 * time.Second
	// A message a killed consumer held waits the ack wait (60 s) before it
	// is redelivered; runs have seen up to three ack waits (3m02s) after a
	// ledger kill before the last of them was posted.
	recoverWithin  = 4 * time.Minute
	drainWithin    = 3 * time.Minute
	outboxWithin   = 30 * time.Second // the relays publish after the drain saw the charges posted
	depositPerRent = "1000000.00"
	// Daily cycles: the usage falls in yesterday's cycle, which the test
	// closes (a close request, then SIGKILL of settlement at once) while
	// usage flows and the other faults follow; usage accepted after the
	// close is late and accrues to today's cycle.
	cycleDays = 1
)

var calendar = cycles.Calendar{Anchor: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), LengthDays: cycleDays, Grace: 24 * time.Hour}

type service struct {
	*proc
	http, grpc int
}

func (s *service) url(path string) string { return fmt.Sprintf("http://127.0.0.1:%d%s", s.http, path) }

type cluster struct {
	t      *testing.T
	dir    string
	bins   string // the service binaries and nats-server (serviceBinaries)
	pg     *proc
	pgDir  string
	pgPort int
	nats   *proc // the one nats-server, unless spec.nats started others
	natsP  int
	// natsURL is what the services get as NATS_URL (every server's URL,
	// comma-separated, for a cluster).
	natsURL string
	// names are the services started, in start order.
	names  []string
	svcs   map[string]*service
	dsn    string
	pool   *pgxpool.Pool
	tok    string
	client *http.Client
	// others are more processes whose log tails a failure shows.
	others []*proc
}

// clusterSpec says what a cluster runs; the zero value is the chaos
// test's: every service, one nats-server and a Temporal dev server.
type clusterSpec struct {
	names []string // services to start, in order; nil: serviceNames
	// nats starts the NATS servers and returns the services' NATS_URL;
	// nil: one nats-server of the cluster's own (startNATS).
	nats       func(c *cluster) string
	noTemporal bool     // settlement is not started: no Temporal server
	env        []string // more settings for every service
}

func TestChaosNothingLostNothingDoubled(t *testing.T) {
	if os.Getenv("GPUBILL_SKIP_CHAOS") != "" {
		t.Skip("GPUBILL_SKIP_CHAOS set")
	}
	began := time.Now()
	c := newCluster(t)
	c.seed()

	s := newSender(c)
	go s.run()
	t.Cleanup(s.abandon)

	// Warm up: usage flows end to end before the first fault.
	c.waitCharged(s, "warm-up")

	// Settlement's kill comes right after the close request, so the cycle's
	// workflow is cut mid-way; ledger, tax, NATS and PostgreSQL go down
	// while it may still run.
	cycle := calendar.At(s.base).ID
	var faults []faultReport
	for _, name := range []string{"metering", "pricing", "settlement", "ledger", "tax", "payout"} {
		do := func() { c.killService(name) }
		label := "kill -9 " + name
		if name == "settlement" {
			label = "close, kill -9 settlement"
			do = func() {
				c.mustDo(c.svcs["settlement"], http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", map[string]any{})
				c.killService(name)
			}
		}
		faults = append(faults, c.fault(s, label, do))
	}
	faults = append(faults, c.fault(s, "kill -9 nats-server", c.restartNATS))
	faults = append(faults, c.fault(s, "pg_ctl stop -m immediate", c.restartPostgres))

	s.stop()
	acc := s.snapshot()
	if s.rejected() != "" {
		t.Fatalf("ingest rejected events it had accepted before or should accept: %s", s.rejected())
	}
	if len(acc) == 0 {
		t.Fatal("no event accepted")
	}
	drain := time.Now()
	c.waitDrained(len(acc))
	drained := time.Since(drain)

	c.checkEvents(acc)
	c.checkCharges(acc)
	c.checkSettled(cycle)
	c.checkBooks()
	c.checkNothingStuck()

	kills, restarts := 0, 0
	for _, f := range faults {
		kills++
		restarts++
		t.Logf("fault %-26s down %6s  ready again after %6s  caught up after %6s  client errors %d",
			f.name, f.down.Round(time.Millisecond), f.ready.Round(time.Millisecond), f.recovered.Round(time.Millisecond), f.clientErrors)
	}
	t.Logf("chaos: %d events accepted in %d requests (%d client errors retried, %d events already stored when retried), %d kills, %d restarts, drained in %s, total %s",
		len(acc), s.requests, s.errors, s.duplicates, kills, restarts, drained.Round(time.Millisecond), time.Since(began).Round(time.Second))
}

// ---- the cluster ----

func newCluster(t *testing.T) *cluster { return newClusterOf(t, clusterSpec{}) }

// newClusterOf starts PostgreSQL, NATS (and Temporal) and the spec's
// services, each ready, and seeds nothing.
func newClusterOf(t *testing.T, spec clusterSpec) *cluster {
	t.Helper()
	if spec.names == nil {
		spec.names = serviceNames
	}
	// A directory PostgreSQL (run as the postgres user under root) can enter.
	dir, err := os.MkdirTemp("", "gpubill-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("GPUBILL_CHAOS_KEEP") != "" {
			t.Logf("logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Join(dir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bins := serviceBinaries(t, binDir)
	tok, err := auth.Issue([]byte(chaosSecret), auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir, bins: bins, names: spec.names, svcs: map[string]*service{}, tok: tok, client: &http.Client{Timeout: 10 * time.Second}}
	c.startPostgres()
	if spec.nats == nil {
		c.startNATS()
		c.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", c.natsP)
	} else {
		c.natsURL = spec.nats(c)
	}
	env := []string{
		"NATS_URL=" + c.natsURL,
		"DATABASE_URL=" + c.dsn,
		"GPUBILL_AUTH_SECRET=" + chaosSecret,
		"GPUBILL_DATA_DIR=" + filepath.Join(dir, "data"),
		// Payout alone needs its rail chosen and its webhook key given.
		"GPUBILL_PAYOUT_RAIL_BANK=sandbox",
		"GPUBILL_WEBHOOK_KEY=chaos-test-webhook-key-0123456789abcdef",
		"GPUBILL_LOG_LEVEL=info",
		// A service stuck at the end is sent SIGQUIT (dumpStacks): every
		// goroutine's stack then goes to its log, not only the signalled one.
		"GOTRACEBACK=all",
		fmt.Sprintf("GPUBILL_CYCLE_DAYS=%d", cycleDays),
		"GPUBILL_CYCLE_ANCHOR=" + calendar.Anchor.Format("2006-01-02"),
		"GPUBILL_CYCLE_GRACE=" + calendar.Grace.String(),
	}
	if !spec.noTemporal {
		env = append(env, "TEMPORAL_ADDRESS="+testkit.NewTemporal(t))
	}
	env = append(env, spec.env...)
	for _, name := range c.names {
		c.svcs[name] = &service{http: freePort(t), grpc: freePort(t)}
		env = append(env, fmt.Sprintf("GPUBILL_%s_GRPC=127.0.0.1:%d", strings.ToUpper(name), c.svcs[name].grpc))
	}
	for _, name := range c.names {
		s := c.svcs[name]
		s.proc = &proc{name: name, bin: filepath.Join(bins, name), log: filepath.Join(dir, name+".log"),
			env: append([]string{fmt.Sprintf("GPUBILL_HTTP_ADDR=127.0.0.1:%d", s.http), fmt.Sprintf("GPUBILL_GRPC_ADDR=127.0.0.1:%d", s.grpc)}, env...)}
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.stop)
		c.waitReady(s)
	}
	pool, err := pgxpool.New(context.Background(), c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c.pool = pool
	return c
}

func (c *cluster) startPostgres() {
	t := c.t
	c.pgDir = filepath.Join(c.dir, "pg")
	if err := os.Mkdir(c.pgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cred := postgresCred(t, c.pgDir)
	if err := runAs(cred, filepath.Join(pgBinDir, "initdb"), "-D", c.pgDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatal(err)
	}
	c.pgPort = freePort(t)
	// fsync off: the test kills the server, never the machine, so the
	// kernel keeps every write; commits stay synchronous.
	c.pg = &proc{name: "postgres", bin: filepath.Join(pgBinDir, "postgres"), log: filepath.Join(c.dir, "postgres.log"), cred: cred,
		deathSig: syscall.SIGQUIT,
		args: []string{"-D", c.pgDir, "-p", fmt.Sprint(c.pgPort), "-k", c.pgDir, "-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off", "-c", "max_connections=200", "-c", "shared_buffers=64MB"}}
	if err := c.pg.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.pg.running() {
			if err := runAs(cred, filepath.Join(pgBinDir, "pg_ctl"), "stop", "-D", c.pgDir, "-m", "fast", "-w"); err != nil {
				t.Logf("pg_ctl stop: %v (stopping the process instead)", err)
			}
			c.pg.stop()
		}
	})
	c.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/gpubill?sslmode=disable", c.pgPort)
	c.waitPostgres()
}

func (c *cluster) waitPostgres() {
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.pgPort)
	testkit.Eventually(c.t, readyWithin, func() bool {
		if !c.pg.running() {
			c.t.Fatalf("postgres exited:\n%s", c.pg.tail(30))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx) == nil
	}, "postgres on port %d accepts connections", c.pgPort)
}

func (c *cluster) startNATS() {
	t := c.t
	c.natsP = freePort(t)
	conf := filepath.Join(c.dir, "nats.conf")
	// Room for every stream's byte cap (the file store reserves nothing).
	body := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n  max_memory_store: 64MB\n  max_file_store: 64GB\n}\n",
		c.natsP, filepath.Join(c.dir, "nats"))
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c.nats = &proc{name: "nats-server", bin: filepath.Join(c.bins, "nats-server"), args: []string{"-c", conf}, log: filepath.Join(c.dir, "nats.log")}
	if err := c.nats.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.nats.stop)
	c.waitNATS()
}

func (c *cluster) waitNATS() {
	testkit.Eventually(c.t, readyWithin, func() bool {
		if !c.nats.running() {
			c.t.Fatalf("nats-server exited:\n%s", c.nats.tail(30))
		}
		return portOpen(fmt.Sprintf("127.0.0.1:%d", c.natsP))
	}, "nats-server on port %d", c.natsP)
}

func (c *cluster) waitReady(s *service) {
	c.t.Helper()
	testkit.Eventually(c.t, readyWithin, func() bool {
		if !s.running() {
			c.t.Fatalf("%s exited (%v):\n%s", s.name, s.exitState(), s.tail(40))
		}
		return httpOK(s.url("/readyz"))
	}, "%s /readyz", s.name)
}

func (c *cluster) waitAllReady() {
	for _, name := range c.names {
		c.waitReady(c.svcs[name])
	}
}

// do sends a JSON request to a service's REST port with the finance token.
func (c *cluster) do(s *service, method, path string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url(path), rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	out := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("HTTP %d, body %q: %w", resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode, out, nil
}

func (c *cluster) mustDo(s *service, method, path string, body any) map[string]any {
	c.t.Helper()
	code, out, err := c.do(s, method, path, body)
	if err != nil || code/100 != 2 {
		c.t.Fatalf("%s %s %s: HTTP %d %v %v", s.name, method, path, code, out, err)
	}
	return out
}

// seed creates the parties (metering), the rate card (pricing) and a deposit
// per renter (ledger) so every wallet stays in credit.
func (c *cluster) seed() {
	m, p, l := c.svcs["metering"], c.svcs["pricing"], c.svcs["ledger"]
	for i := 0; i < providers; i++ {
		c.mustDo(m, http.MethodPost, "/v1/providers", map[string]any{"provider_id": fmt.Sprintf("p-%03d", i), "name": "Rig", "tier": "standard",
			"tax_profile": "individual", "jurisdiction": "CN", "pue": "1.2", "currency": "CNY"})
	}
	for i := 0; i < renters; i++ {
		c.mustDo(m, http.MethodPost, "/v1/renters", map[string]any{"renter_id": fmt.Sprintf("r-%03d", i), "name": "Lab", "currency": "CNY", "credit_limit": "0"})
		c.mustDo(l, http.MethodPost, "/v1/deposits", map[string]any{"renter_id": fmt.Sprintf("r-%03d", i), "amount": depositPerRent,
			"currency": "CNY", "external_ref": fmt.Sprintf("chaos-deposit-%d", i)})
	}
	c.mustDo(p, http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": hourly}}})
}

// ---- faults ----

type faultReport struct {
	name                   string
	down, ready, recovered time.Duration
	clientErrors           int
}

// fault runs one fault while usage keeps flowing, then waits until every
// service is ready and the pipeline has charged the last event accepted by
// then: the recovery time counts from the fault's start.
func (c *cluster) fault(s *sender, name string, do func()) faultReport {
	c.t.Helper()
	errsBefore := s.errorCount()
	began := time.Now()
	do()
	down := time.Since(began)
	c.waitAllReady()
	ready := time.Since(began)
	c.waitCharged(s, name)
	return faultReport{name: name, down: down, ready: ready, recovered: time.Since(began), clientErrors: s.errorCount() - errsBefore}
}

// killService SIGKILLs a service, proves it died of it, and starts it again.
func (c *cluster) killService(name string) {
	s := c.svcs[name]
	old := s.pid()
	if err := s.kill9(); err != nil {
		c.t.Fatal(err)
	}
	if portOpen(fmt.Sprintf("127.0.0.1:%d", s.http)) {
		c.t.Fatalf("%s killed but its REST port still answers", name)
	}
	time.Sleep(outage) // the outage itself, not a wait for a condition
	if err := s.start(); err != nil {
		c.t.Fatal(err)
	}
	if s.pid() == old {
		c.t.Fatalf("%s restarted with the same pid", name)
	}
}

// restartNATS SIGKILLs nats-server and starts it again on the same port and
// store; the services must see the outage (readiness fails) and reconnect.
func (c *cluster) restartNATS() {
	if err := c.nats.kill9(); err != nil {
		c.t.Fatal(err)
	}
	c.waitNotReady("metering", "nats")
	time.Sleep(outage)
	if err := c.nats.start(); err != nil {
		c.t.Fatal(err)
	}
	c.waitNATS()
}

// restartPostgres stops PostgreSQL the crash way (pg_ctl stop -m immediate:
// no checkpoint, recovery from WAL on start) and starts it again.
func (c *cluster) restartPostgres() {
	if err := runAs(c.pg.cred, filepath.Join(pgBinDir, "pg_ctl"), "stop", "-D", c.pgDir, "-m", "immediate", "-w"); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.pg.wait(30 * time.Second); err != nil {
		c.t.Fatal(err)
	}
	c.waitNotReady("ledger", "database")
	time.Sleep(outage)
	if err := c.pg.start(); err != nil {
		c.t.Fatal(err)
	}
	c.waitPostgres()
	if !strings.Contains(c.pg.lastRun(), "automatic recovery in progress") {
		c.t.Fatalf("postgres restarted without crash recovery: was it really stopped immediately?\n%s", c.pg.tail(30))
	}
}

// waitNotReady proves a service saw the outage: its /readyz fails.
func (c *cluster) waitNotReady(name, dep string) {
	s := c.svcs[name]
	testkit.Eventually(c.t, 30*time.Second, func() bool { return !httpOK(s.url("/readyz")) },
		"%s /readyz still ok while %s is down", name, dep)
}

// waitCharged waits until every event the sender had accepted when this is
// called sits in a rated charge the ledger posted (or one of zero amount),
// or fails with every process's log tail.
func (c *cluster) waitCharged(s *sender, what string) {
	c.t.Helper()
	c.waitChargedWithin(s, what, recoverWithin)
}

// waitChargedWithin is waitCharged with its own bound.
func (c *cluster) waitChargedWithin(s *sender, what string, within time.Duration) {
	c.t.Helper()
	testkit.Eventually(c.t, 30*time.Second, func() bool { return s.lastAccepted().id != "" }, "%s: no event accepted", what)
	last := s.lastAccepted().batch
	want := s.acceptedUpTo(last)
	deadline := time.Now().Add(within)
	for {
		got, err := c.chargedUpTo(last)
		if err == nil && got >= want {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: %d of the %d events accepted up to request %d charged after %s (%v)\n%s", what, got, want, last, within, err, c.logTails())
		}
		time.Sleep(100 * time.Millisecond) // polling the database, not waiting blindly
	}
}

// chargedUpTo counts the events of requests up to b that are in a rated
// charge the ledger posted (or one of zero amount).
func (c *cluster) chargedUpTo(b int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	err := c.pool.QueryRow(ctx, `select count(*) from pricing.charges c, unnest(c.event_ids) e
		where e collate "C" <= $1
		  and (c.amount = 0 or exists (select 1 from ledger.transactions t where t.idempotency_key = c.charge_id))`, eventID(b, batchEvents)).Scan(&n)
	return n, err
}

func (c *cluster) logTails() string {
	var b strings.Builder
	for _, name := range c.names {
		fmt.Fprintf(&b, "---- %s ----\n%s\n", name, c.svcs[name].tail(15))
	}
	others := c.others
	if c.nats != nil {
		others = append([]*proc{c.nats}, others...)
	}
	for _, p := range append(others, c.pg) {
		fmt.Fprintf(&b, "---- %s ----\n%s\n", p.name, p.tail(10))
	}
	return b.String()
}

// ---- the sender ----

type event struct {
	id, lease, provider, renter string
	batch, count                int
	start, end                  time.Time
}

// eventID orders events by request: ids of batches up to b sort (in "C"
// collation) at or below eventID(b, batchEvents).
func eventID(b, j int) string { return fmt.Sprintf("ev-%07d-%03d", b, j) }

// sender posts usage to metering's REST ingest every sendEvery (or its own
// pace, every, set before run); a request
// that fails (connection refused, 5xx, timeout) is retried with the same
// events until it is answered, so every event is finally accepted once.
type sender struct {
	c     *cluster
	base  time.Time
	every time.Duration
	quit  chan struct{} // no new request after the current one
	abort chan struct{} // the test is ending: give up even mid-retry
	done  chan struct{}

	mu         sync.Mutex
	accepted   map[string]event
	last       event
	requests   int
	errors     int
	duplicates int
	rejections []string
}

func newSender(c *cluster) *sender {
	// Usage from 01:00 to at most 11:54 of the previous (daily) cycle.
	today := calendar.At(time.Now())
	return &sender{c: c, base: calendar.At(today.Start.Add(-time.Minute)).Start.Add(time.Hour), every: sendEvery,
		quit: make(chan struct{}), abort: make(chan struct{}), done: make(chan struct{}), accepted: map[string]event{}}
}

// batch b holds event b%leaseEvents of leases (b/leaseEvents)*batchEvents…+batchEvents-1,
// so a lease's ten events arrive across ten requests (and across faults).
func (s *sender) batch(b int) []event {
	out := make([]event, batchEvents)
	k := b % leaseEvents
	for j := range out {
		lease := (b/leaseEvents)*batchEvents + j
		start := s.base.Add(time.Duration(lease%600) * time.Minute).Add(time.Duration(k) * 6 * time.Minute)
		out[j] = event{id: eventID(b, j), batch: b, lease: fmt.Sprintf("lease-%d", lease),
			provider: fmt.Sprintf("p-%03d", lease%providers), renter: fmt.Sprintf("r-%03d", (lease/providers)%renters),
			count: 1 + lease%4, start: start, end: start.Add(6 * time.Minute)}
	}
	return out
}

func (s *sender) run() {
	defer close(s.done)
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for b := 0; ; b++ {
		select {
		case <-s.quit:
			return
		case <-tick.C:
		}
		evs := s.batch(b)
		body := make([]map[string]any, len(evs))
		for i, e := range evs {
			body[i] = map[string]any{"id": e.id, "lease_id": e.lease, "provider_id": e.provider, "renter_id": e.renter,
				"gpu_model": "RTX_4090", "gpu_count": e.count, "start_time": e.start.Format(time.RFC3339),
				"end_time": e.end.Format(time.RFC3339), "region": "cn-east", "workload": "training"}
		}
		// Once begun, a request is retried until answered even after quit:
		// the client owns its events until the server has taken them.
		for {
			code, out, err := s.c.do(s.c.svcs["metering"], http.MethodPost, "/v1/usage-events", map[string]any{"events": body})
			s.mu.Lock()
			s.requests++
			if err != nil || code != http.StatusOK {
				s.errors++
				s.mu.Unlock()
				select {
				case <-s.abort:
					return
				case <-time.After(s.every): // retry pacing
				}
				continue
			}
			acc, dup := num(out["accepted"]), num(out["duplicates"])
			if rej, _ := out["rejected"].([]any); len(rej) > 0 || acc+dup != len(evs) {
				s.rejections = append(s.rejections, fmt.Sprintf("batch %d: %v", b, out))
			}
			s.duplicates += dup
			for _, e := range evs {
				s.accepted[e.id] = e
			}
			s.last = evs[len(evs)-1]
			s.mu.Unlock()
			break
		}
	}
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// stop lets the request in flight finish and stops sending.
func (s *sender) stop() {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	<-s.done
}

// abandon stops sending even if the request in flight is not answered
// (the test failed while metering or PostgreSQL was down).
func (s *sender) abandon() {
	close(s.abort)
	s.stop()
}

func (s *sender) errorCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errors
}

func (s *sender) lastAccepted() event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// acceptedUpTo counts the accepted events of requests up to b.
func (s *sender) acceptedUpTo(b int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.accepted {
		if e.batch <= b {
			n++
		}
	}
	return n
}

func (s *sender) rejected() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.rejections, "; ")
}

func (s *sender) snapshot() map[string]event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]event, len(s.accepted))
	for k, v := range s.accepted {
		out[k] = v
	}
	return out
}

// ---- the checks ----

func (c *cluster) query(sql string, args ...any) pgx.Rows {
	c.t.Helper()
	rows, err := c.pool.Query(context.Background(), sql, args...)
	if err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
	return rows
}

func (c *cluster) count(sql string, args ...any) int {
	c.t.Helper()
	var n int
	if err := c.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waitDrained waits until every accepted event sits in a rated charge and
// every charge with an amount is posted.
func (c *cluster) waitDrained(events int) {
	deadline := time.Now().Add(drainWithin)
	lastLog := time.Now()
	for {
		rated := c.count(`select coalesce(sum(cardinality(event_ids)), 0) from pricing.charges`)
		unposted := c.count(`select count(*) from pricing.charges c where c.amount <> 0
			and not exists (select 1 from ledger.transactions t where t.idempotency_key = c.charge_id)`)
		if rated >= events && unposted == 0 {
			return
		}
		if time.Since(lastLog) > 5*time.Second {
			c.t.Logf("draining: %d of %d events rated, %d charges not posted", rated, events, unposted)
			lastLog = time.Now()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("not drained within %s: %d of %d events rated, %d charges not posted\n%s", drainWithin, rated, events, unposted, c.logTails())
		}
		time.Sleep(250 * time.Millisecond) // polling the database
	}
}

// checkEvents: metering recorded exactly the accepted events.
func (c *cluster) checkEvents(acc map[string]event) {
	t := c.t
	rows := c.query(`select id from metering.usage_events`)
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, id := range stored {
		if _, ok := acc[id]; !ok {
			t.Errorf("metering stored %s, never accepted", id)
		}
		seen[id] = true
	}
	for id := range acc {
		if !seen[id] {
			t.Errorf("accepted event %s not stored by metering", id)
		}
	}
}

// checkCharges: each accepted event is in exactly one rated charge, each
// lease is charged exactly round(Σ GPU-hours × hourly) (computed here from
// the events and the rate card), and each charge with an amount is posted
// once, for that amount, wallet to the provider's pending account.
func (c *cluster) checkCharges(acc map[string]event) {
	t := c.t
	type row struct {
		Event string
		N     int
	}
	rows := c.query(`select e, count(*) from pricing.charges, unnest(event_ids) e group by e`)
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	rated := map[string]int{}
	for _, r := range counts {
		rated[r.Event] = r.N
		if _, ok := acc[r.Event]; !ok {
			t.Errorf("charged event %s never accepted", r.Event)
		}
	}
	bad := 0
	for id := range acc {
		if rated[id] != 1 {
			if bad < 10 {
				t.Errorf("event %s charged %d times, want 1", id, rated[id])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d events not charged exactly once", bad, len(acc))
	}

	// Expected per lease, independently of pricing's code.
	cny, err := money.Lookup("CNY")
	if err != nil {
		t.Fatal(err)
	}
	price := decimal.RequireFromString(hourly)
	exact := map[string]decimal.Decimal{}
	for _, e := range acc {
		hours := decimal.NewFromInt(int64(e.end.Sub(e.start) / time.Second)).Div(decimal.NewFromInt(3600))
		exact[e.lease] = exact[e.lease].Add(hours.Mul(decimal.NewFromInt(int64(e.count))).Mul(price))
	}
	want := map[string]decimal.Decimal{}
	for lease, x := range exact {
		want[lease] = cny.Round(x)
	}
	leaseTotals := func(sql string) map[string]decimal.Decimal {
		type tot struct {
			Lease  string
			Amount decimal.Decimal
		}
		got, err := pgx.CollectRows(c.query(sql), pgx.RowToStructByPos[tot])
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]decimal.Decimal{}
		for _, g := range got {
			m[g.Lease] = g.Amount
		}
		return m
	}
	compare := func(where string, got map[string]decimal.Decimal) {
		leases := make([]string, 0, len(want))
		for l := range want {
			leases = append(leases, l)
		}
		sort.Strings(leases)
		wrong := 0
		for _, l := range leases {
			if !got[l].Equal(want[l]) {
				if wrong < 10 {
					t.Errorf("%s: lease %s charged %s, want %s", where, l, got[l], want[l])
				}
				wrong++
			}
		}
		for l := range got {
			if _, ok := want[l]; !ok {
				t.Errorf("%s: lease %s charged, never sent", where, l)
			}
		}
		if wrong > 0 {
			t.Errorf("%s: %d of %d leases charged wrongly", where, wrong, len(want))
		}
	}
	compare("pricing", leaseTotals(`select lease_id, sum(amount) from pricing.charges group by lease_id`))
	compare("ledger", leaseTotals(`select t.metadata->>'lease_id', sum(p.amount) from ledger.transactions t
		join ledger.postings p on p.tx_id = t.id and p.direction = 'debit' where t.kind = 'charge' group by 1`))

	for what, sql := range map[string]string{
		"charge with an amount not posted": `select c.charge_id from pricing.charges c where c.amount <> 0
			and not exists (select 1 from ledger.transactions t where t.idempotency_key = c.charge_id)`,
		"ledger charge without a rated charge": `select t.idempotency_key from ledger.transactions t where t.kind = 'charge'
			and not exists (select 1 from pricing.charges c where c.charge_id = t.idempotency_key)`,
		"charge posted for another amount or accounts": `select c.charge_id from pricing.charges c
			join ledger.transactions t on t.idempotency_key = c.charge_id
			join ledger.postings p on p.tx_id = t.id
			group by c.charge_id, c.amount, c.renter_id, c.provider_id
			having count(*) <> 2
			    or sum(p.amount) filter (where p.direction = 'debit' and p.account = 'renter:' || c.renter_id || ':wallet') is distinct from c.amount
			    or sum(p.amount) filter (where p.direction = 'credit' and p.account like 'provider:' || c.provider_id || ':pending:%') is distinct from c.amount`,
	} {
		ids, err := pgx.CollectRows(c.query(sql), pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) > 0 {
			t.Errorf("%s: %d, e.g. %v", what, len(ids), ids[:min(5, len(ids))])
		}
	}
}

// splitLargestRemainder is DESIGN §5's split, worked out here: exact
// commission (gross × rate), tax (taxRate × (gross − commission)) and net,
// then each floored to the minor unit and the units left over handed one by
// one to the largest fractional parts (ties to the earlier part).
func splitLargestRemainder(gross, rate, taxRate decimal.Decimal, minor int32) (commission, tax, net decimal.Decimal) {
	unit := decimal.New(1, -minor)
	c := gross.Mul(rate)
	t := gross.Sub(c).Mul(taxRate)
	exact := []decimal.Decimal{c, t, gross.Sub(c).Sub(t)}
	parts := make([]decimal.Decimal, 3)
	frac := make([]decimal.Decimal, 3)
	left := gross
	for i, x := range exact {
		parts[i] = x.Div(unit).Floor().Mul(unit)
		frac[i] = x.Sub(parts[i])
		left = left.Sub(parts[i])
	}
	for ; left.IsPositive(); left = left.Sub(unit) {
		best := 0
		for i := range frac {
			if frac[i].GreaterThan(frac[best]) {
				best = i
			}
		}
		parts[best] = parts[best].Add(unit)
		frac[best] = decimal.NewFromInt(-1)
	}
	return parts[0], parts[1], parts[2]
}

// checkSettled: the cycle closed under chaos is settled once per provider:
// its gross is what the ledger charged to the provider's pending account of
// the cycle, commission (standard tier, 25 %) and tax (20 % of the rest)
// are computed here (largest remainder, DESIGN §5), the pending account is empty (a second settlement
// would leave it negative) and the provider's available account received
// the net exactly once.
func (c *cluster) checkSettled(cycle string) {
	t := c.t
	testkit.Eventually(t, drainWithin, func() bool {
		code, out, err := c.do(c.svcs["settlement"], http.MethodGet, "/v1/settlement-cycles/"+cycle, nil)
		return err == nil && code == http.StatusOK && out["status"] == "settled"
	}, "cycle %s settled", cycle)
	type row struct {
		Provider, Status                  string
		Gross, Commission, Tax, Net       decimal.Decimal
		Charged, PendingLeft, ToAvailable decimal.Decimal
	}
	rows, err := pgx.CollectRows(c.query(`
		with charged as (
			select split_part(p.account, ':', 2) provider, sum(p.amount) amount
			from ledger.postings p join ledger.transactions t on t.id = p.tx_id
			where t.kind = 'charge' and p.direction = 'credit' and p.account like 'provider:%:pending:' || $1
			group by 1),
		available as (
			select split_part(account, ':', 2) provider, sum(amount) amount
			from ledger.postings where direction = 'credit' and account like 'provider:%:available'
			group by 1)
		select coalesce(s.provider_id, ch.provider), coalesce(s.status, 'missing'),
		       coalesce(s.gross, 0), coalesce(s.commission, 0), coalesce(s.tax_withheld, 0), coalesce(s.net, 0),
		       coalesce(ch.amount, 0),
		       coalesce((select b.credits - b.debits from ledger.balances b
		                 where b.account = 'provider:' || coalesce(s.provider_id, ch.provider) || ':pending:' || $1), 0),
		       coalesce(a.amount, 0)
		from (select * from settlement.settlements where cycle_id = $1) s
		full join charged ch on ch.provider = s.provider_id
		left join available a on a.provider = coalesce(s.provider_id, ch.provider)
		order by 1`, cycle), pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("cycle %s: nothing charged or settled", cycle)
	}
	cny, err := money.Lookup("CNY")
	if err != nil {
		t.Fatal(err)
	}
	quarter, fifth := decimal.RequireFromString("0.25"), decimal.RequireFromString("0.20")
	gross := decimal.Zero
	for _, r := range rows {
		commission, tax, net := splitLargestRemainder(r.Charged, quarter, fifth, cny.MinorUnits)
		if r.Status != "settled" || !r.Gross.Equal(r.Charged) || !r.Commission.Equal(commission) || !r.Tax.Equal(tax) ||
			!r.Net.Equal(net) || !r.PendingLeft.IsZero() || !r.ToAvailable.Equal(net) {
			t.Errorf("cycle %s provider %s: %s gross %s (charged %s), commission %s (want %s), tax %s (want %s), net %s (want %s); pending left %s, credited to available %s",
				cycle, r.Provider, r.Status, r.Gross, r.Charged, r.Commission, commission, r.Tax, tax, r.Net, net, r.PendingLeft, r.ToAvailable)
		}
		gross = gross.Add(r.Gross)
	}
	c.t.Logf("cycle %s closed under chaos: %d providers settled once, gross %s CNY", cycle, len(rows), gross)
}

// checkBooks: debits equal credits per currency and per transaction, the
// balances table agrees with the postings, the segregated-funds report is
// balanced, and `gpubill ledger verify` passes once the chain caught up.
func (c *cluster) checkBooks() {
	t := c.t
	for what, sql := range map[string]string{
		"currency where debits ≠ credits": `select currency from ledger.postings group by currency
			having coalesce(sum(amount) filter (where direction = 'debit'), 0)
			    is distinct from coalesce(sum(amount) filter (where direction = 'credit'), 0)`,
		"transaction where debits ≠ credits": `select tx_id::text || ' ' || currency from ledger.postings group by tx_id, currency
			having coalesce(sum(amount) filter (where direction = 'debit'), 0)
			    is distinct from coalesce(sum(amount) filter (where direction = 'credit'), 0)`,
		"balance that disagrees with its postings": `with p as (
				select account, currency, coalesce(sum(amount) filter (where direction = 'debit'), 0) d,
				       coalesce(sum(amount) filter (where direction = 'credit'), 0) c
				from ledger.postings group by account, currency)
			select coalesce(p.account, b.account) || ' ' || coalesce(p.currency, b.currency)
			from p full join ledger.balances b on b.account = p.account and b.currency = p.currency
			where coalesce(p.d, 0) is distinct from coalesce(b.debits, 0) or coalesce(p.c, 0) is distinct from coalesce(b.credits, 0)`,
	} {
		bad, err := pgx.CollectRows(c.query(sql), pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Errorf("%s: %v", what, bad[:min(5, len(bad))])
		}
	}
	if n := c.count(`select count(*) from ledger.postings`); n == 0 {
		t.Error("no postings at all")
	}

	rep := c.mustDo(c.svcs["ledger"], http.MethodGet, "/v1/reports/segregated-funds?currency=CNY", nil)
	if rep["verdict"] != "balanced" || rep["difference"] != "0.00" {
		t.Errorf("segregated funds: %v", rep)
	}

	testkit.Eventually(t, time.Minute, func() bool {
		res, err := ledger.VerifyChain(context.Background(), c.pool)
		return err == nil && res.Unchained == 0
	}, "journal chain catches up")
	var out, errOut bytes.Buffer
	if code := cli.Main(context.Background(), []string{"ledger", "verify", "--database-url", c.dsn}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "ok:") {
		t.Errorf("gpubill ledger verify: exit %d: %s %s", code, out.String(), errOut.String())
	} else {
		t.Logf("gpubill ledger verify: %s", strings.TrimSpace(out.String()))
	}
}

// describeUnacked logs, for each consumer holding an unacknowledged message,
// the first message above its ack floor (stream sequence, subject, Nats-Msg-Id)
// and whether a service's inbox already holds that id, i.e. whether the
// message was applied and only its ack is missing.
func (c *cluster) describeUnacked(js jetstream.JetStream, lags []natsx.Lag) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range lags {
		if l.AckPending == 0 {
			continue
		}
		cons, err := js.Consumer(ctx, l.Stream, l.Consumer)
		if err != nil {
			c.t.Logf("consumer %s: %v", l.Consumer, err)
			continue
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			c.t.Logf("consumer %s: %v", l.Consumer, err)
			continue
		}
		st, err := js.Stream(ctx, l.Stream)
		if err != nil {
			c.t.Logf("stream %s: %v", l.Stream, err)
			continue
		}
		seq := ci.AckFloor.Stream + 1
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			c.t.Logf("%s/%s ack floor %d: message %d: %v", l.Stream, l.Consumer, ci.AckFloor.Stream, seq, err)
			continue
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		in := c.inboxesHolding(id)
		// Waiting pulls hint at which: an idle consumer keeps a pull waiting
		// (10–250 ms fetches back to back), so none suggests one that
		// stopped fetching, and some suggest a handler holding the message.
		c.t.Logf("%s/%s: first unacknowledged message seq %d subject %s id %s (in the inbox of %v); ack floor %d, delivered %d (last %v), redelivered %d, waiting pulls %d",
			l.Stream, l.Consumer, seq, m.Subject, id, in, ci.AckFloor.Stream, ci.Delivered.Stream, ci.Delivered.Last, ci.NumRedelivered, ci.NumWaiting)
	}
}

// takePending names the messages a stuck consumer still holds: its owner
// is stopped (dumpStacks), so a fetch of the test's own, waiting past the
// ack wait, is handed whatever JetStream redelivers. (describeUnacked's
// "first message above the ack floor" may not be one of them.)
func (c *cluster) takePending(js jetstream.JetStream, lags []natsx.Lag) {
	for _, l := range lags {
		if l.AckPending == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), natsx.DefaultAckWait+10*time.Second)
		cons, err := js.Consumer(ctx, l.Stream, l.Consumer)
		if err != nil {
			cancel()
			c.t.Logf("consumer %s: %v", l.Consumer, err)
			continue
		}
		batch, err := cons.Fetch(l.AckPending, jetstream.FetchMaxWait(natsx.DefaultAckWait+5*time.Second))
		if err != nil {
			cancel()
			c.t.Logf("fetch from %s: %v", l.Consumer, err)
			continue
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				c.t.Logf("%s: pending message %s: %v", l.Consumer, natsx.MsgID(m), err)
				continue
			}
			c.t.Logf("%s: pending message seq %d subject %s id %s, delivered %d times (in the inbox of %v)",
				l.Consumer, md.Sequence.Stream, m.Subject(), natsx.MsgID(m), md.NumDelivered, c.inboxesHolding(natsx.MsgID(m)))
		}
		if err := batch.Error(); err != nil {
			c.t.Logf("fetch from %s ended: %v", l.Consumer, err)
		}
		cancel()
	}
}

// inboxesHolding names the services whose inbox holds message id.
func (c *cluster) inboxesHolding(id string) []string {
	var in []string
	for _, schema := range c.names {
		if c.count(`select count(*) from pg_tables where schemaname = $1 and tablename = 'inbox'`, schema) == 0 {
			continue
		}
		if c.count(`select count(*) from `+schema+`.inbox where message_id = $1`, id) > 0 {
			in = append(in, schema)
		}
	}
	return in
}

// dumpStacks sends SIGQUIT to each service owning a consumer with messages
// unacknowledged (a durable is named after its service: "pricing-rating"),
// so the goroutine that holds them shows in that service's log.
func (c *cluster) dumpStacks(lags []natsx.Lag) {
	for _, l := range lags {
		name, _, _ := strings.Cut(l.Consumer, "-")
		s, ok := c.svcs[name]
		if l.AckPending == 0 || !ok || !s.running() {
			continue
		}
		if err := syscall.Kill(s.pid(), syscall.SIGQUIT); err != nil {
			c.t.Logf("SIGQUIT %s: %v", name, err)
			continue
		}
		if _, err := s.wait(10 * time.Second); err != nil {
			c.t.Logf("%s after SIGQUIT: %v", name, err)
			continue
		}
		c.t.Logf("%s goroutine stacks (SIGQUIT) are at the end of %s", name, s.log)
	}
}

// checkNothingStuck: no outbox row left unpublished, no consumer behind or
// holding unacknowledged messages, no usage waiting for a rate card, and no
// dead letter.
func (c *cluster) checkNothingStuck() {
	t := c.t
	// The relays publish asynchronously: a row written by the last charges
	// the drain saw posted may still be on its way to JetStream (an R3
	// publish waits for a quorum). A row still there after outboxWithin was
	// never published.
	outboxes := time.Now()
	for {
		left := map[string]int{}
		for _, schema := range c.names {
			if n := c.count(`select count(*) from ` + schema + `.outbox`); n != 0 {
				left[schema] = n
			}
		}
		if len(left) == 0 {
			t.Logf("outboxes empty %s after the drain", time.Since(outboxes).Round(time.Millisecond))
			break
		}
		if time.Since(outboxes) > outboxWithin {
			for schema, n := range left {
				t.Errorf("%s.outbox: %d rows never published (still there %s after the drain)", schema, n, outboxWithin)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := c.count(`select count(*) from pricing.pending_rating`); n != 0 {
		t.Errorf("pricing.pending_rating: %d events waiting for a rate card", n)
	}
	// Every service keeps a dead_letters table; none may hold a letter.
	for _, schema := range c.names {
		if n := c.count(`select count(*) from ` + schema + `.dead_letters`); n != 0 {
			t.Errorf("%s.dead_letters: %d messages dead-lettered", schema, n)
		}
	}

	nc, js, err := natsx.Connect(c.natsURL, "chaos-check")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// An ack lost with a killed NATS server, or a redelivery that reached a
	// fetch that had just expired (the consumers fetch with 10–250 ms
	// waits), leaves its message pending until the ack wait (natsx.DefaultAckWait) passes;
	// it is then redelivered, found in the inbox and acked. Runs have seen
	// this take up to three ack waits; anything pending longer is stuck.
	began := time.Now()
	deadline := began.Add(recoverWithin)
	defer func() {
		t.Logf("consumers caught up (nothing pending or unacknowledged) %s after the drain", time.Since(began).Round(time.Millisecond))
	}()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lags, err := natsx.ConsumerLags(ctx, js)
		cancel()
		behind := err != nil || len(lags) == 0
		for _, l := range lags {
			behind = behind || l.Pending != 0 || l.AckPending != 0
		}
		if !behind {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("consumers not caught up: %+v %v", lags, err)
			c.describeUnacked(js, lags)
			c.dumpStacks(lags)
			c.takePending(js, lags)
			return
		}
		time.Sleep(250 * time.Millisecond) // polling NATS
	}
}
