package ledger_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/pkg/testkit/ceiling"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// Bench sizes.
const (
	benchCharges       = 50_000 // 100 000 postings
	benchChargesPerMsg = 10
	benchRenters       = 1000
	benchProviders     = 200
	benchAPIClients    = 32
	benchAPIPerClient  = 500
	benchBenchCycleID  = "cyc-20261112"
)

// publishCharges puts n charges on CHARGES, benchChargesPerMsg per message,
// and returns what they must leave on each account (credits − debits in USD),
// summed from the generated amounts. Every charge, batch, lease and provider
// id starts with prefix (renter names its renters).
func publishCharges(t *testing.T, js *testkit.JetStream, prefix string, n int, renter func(i int) string) map[string]decimal.Decimal {
	t.Helper()
	want := map[string]decimal.Decimal{}
	eff := timestamppb.New(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	var futures []jetstream.PubAckFuture
	for m := 0; m*benchChargesPerMsg < n; m++ {
		b := &eventsv1.ChargesRatedBatch{BatchId: fmt.Sprintf("%sbench-%d", prefix, m)}
		for i := m * benchChargesPerMsg; i < min(n, (m+1)*benchChargesPerMsg); i++ {
			b.Charges = append(b.Charges, &eventsv1.RatedCharge{ChargeId: fmt.Sprintf("%sch-%d", prefix, i), LeaseId: fmt.Sprintf("%slease-%d", prefix, i%5000),
				RenterId: renter(i), ProviderId: fmt.Sprintf("%sp-%d", prefix, i%benchProviders), CycleId: benchBenchCycleID,
				Currency: "USD", Amount: decimal.New(int64(1+i%997), -2).String(), EffectiveAt: eff})
			amt := decimal.New(int64(1+i%997), -2)
			wallet, pending := "renter:"+renter(i)+":wallet", fmt.Sprintf("provider:%sp-%d:pending:%s", prefix, i%benchProviders, benchBenchCycleID)
			want[wallet] = want[wallet].Sub(amt)
			want[pending] = want[pending].Add(amt)
		}
		data, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(fmt.Sprintf("charges.rated.p-%d", m%benchProviders))
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, b.BatchId)
		f, err := js.JS.PublishMsgAsync(msg)
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("publish ack timeout")
		}
	}
	return want
}

// wantBalances checks every USD balance against want exactly (credits −
// debits), and that no other account moved: a benchmark reports a figure only
// for work it verified.
func wantBalances(t *testing.T, f *fixture, want map[string]decimal.Decimal) {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `select account, (credits - debits)::text from ledger.balances where currency = 'USD'`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]decimal.Decimal{}
	for rows.Next() {
		var acc, bal string
		if err := rows.Scan(&acc, &bal); err != nil {
			t.Fatal(err)
		}
		got[acc] = decimal.RequireFromString(bal)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for acc, w := range want {
		if g := got[acc]; !g.Equal(w) {
			t.Fatalf("%s: balance %s, want %s", acc, g, w)
		}
	}
	for acc, g := range got {
		if _, ok := want[acc]; !ok && !g.IsZero() {
			t.Fatalf("%s moved (%s) but nothing was posted to it", acc, g)
		}
	}
}

// runCharges starts the service (consumer, outbox relay, chain worker) and
// returns how long it took to commit n more charge transactions and the CPU
// it cost. It waits on the charges consumer (every message acked, which the
// consumer does after the batch's commit), not on a count(*) of the journal:
// that poll, every 20 ms over a growing table, cost Postgres more CPU than
// some of what it timed.
func runCharges(t *testing.T, f *fixture, js *testkit.JetStream, n int) (time.Duration, cpuCost) {
	t.Helper()
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	before := f.count(t, `select count(*) from ledger.transactions where kind = 'charge'`)
	meter := startCPU(t, f)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f.svc.Run(ctx) }()
	testkit.Eventually(t, 10*time.Minute, func() bool {
		c, err := js.JS.Consumer(ctx, natsx.StreamCharges, app.ChargesConsumer)
		if err != nil {
			return false // not made yet
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Consumer > 0
	}, "charges not all posted")
	elapsed := time.Since(start)
	cost := meter.stop(t, n)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f.count(t, `select count(*) from ledger.transactions where kind = 'charge'`) - before; got != n {
		t.Fatalf("%d charge transactions, want %d", got, n)
	}
	return elapsed, cost
}

// cpuMeter measures the CPU of this process and of the fixture database's
// Postgres backends over a benchmark's timed part.
type cpuMeter struct {
	f        *fixture
	go0, pg0 time.Duration
	machine  testkit.Machine
}

// cpuCost is CPU per item: this process (service and load generator) and
// the Postgres backends.
type cpuCost struct {
	goPer, pgPer time.Duration
	machine      string // the whole machine's (testkit.Machine)
}

func (c cpuCost) String() string {
	return fmt.Sprintf("CPU per transaction: test process %s, Postgres backends %s; %s", c.goPer, c.pgPer, c.machine)
}

func startCPU(t *testing.T, f *fixture) *cpuMeter {
	return &cpuMeter{f: f, go0: processCPU(), pg0: postgresCPU(t, f), machine: testkit.StartMachine()}
}

func (m *cpuMeter) stop(t *testing.T, n int) cpuCost {
	used := m.machine.Note(n, "transaction")
	g, p := processCPU()-m.go0, postgresCPU(t, m.f)-m.pg0
	return cpuCost{goPer: (g / time.Duration(n)).Round(time.Microsecond), pgPer: (p / time.Duration(n)).Round(time.Microsecond), machine: used}
}

// TestBenchLedgerPostings times the second of two passes of benchCharges
// charges (each pass its own renters, providers and charges) through the
// service on the same database and pool: the first warms the pool's
// Postgres backends, as the ceiling after it finds them and a running
// deployment's are (see runPipeline in services/gpubill/internal/e2e), and
// is printed beside the figure.
func TestBenchLedgerPostings(t *testing.T) {
	testkit.Bench(t, "ledger_postings", "ceiling_copy")
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	want := map[string]decimal.Decimal{}
	pass := func(prefix string) (time.Duration, cpuCost) {
		for acc, amt := range publishCharges(t, js, prefix, benchCharges, func(i int) string { return fmt.Sprintf("%sr-%d", prefix, i%benchRenters) }) {
			want[acc] = amt
		}
		return runCharges(t, f, js, benchCharges)
	}
	firstElapsed, firstCost := pass("w")
	elapsed, cost := pass("t")
	postings := 2 * benchCharges
	wantBalances(t, f, want)
	checkInvariants(t, f)
	fig := testkit.Figure{Bench: "ledger_postings", Value: float64(int(float64(postings) / elapsed.Seconds())), Unit: "postings/s", N: postings, Load: testkit.LoadAvg(),
		Note: fmt.Sprintf("%d charges from JetStream in %s, %d per message, fetch batches of 500 messages in one Postgres transaction each, fsync on, relay and chain worker running; %s; first pass (the same load, its own parties, on the same pool just before, not in the figure) %.0f postings/s, %s",
			benchCharges, elapsed.Round(time.Millisecond), benchChargesPerMsg, cost, float64(postings)/firstElapsed.Seconds(), firstCost)}
	// The ceiling on the same database, after the figure: as many posting
	// rows by COPY, as many per transaction as one fetched batch writes.
	testkit.ReportAgainst(t, fig, testkit.MedianOf(testkit.CeilingRuns, func() testkit.Figure { return ceiling.Copy(t, f.ctx, f.pool, postings) }))
}

func TestBenchLedgerHotAccount(t *testing.T) {
	testkit.Bench(t, "ledger_hot_account")
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	want := publishCharges(t, js, "", benchCharges, func(int) string { return "r-hot" })
	elapsed, cost := runCharges(t, f, js, benchCharges)
	postings := 2 * benchCharges
	// −Σ of the generated amounts, through the API read path and the balances table.
	wantBalance(t, f, "renter:r-hot:wallet", "USD", want["renter:r-hot:wallet"].String())
	wantBalances(t, f, want)
	checkInvariants(t, f)
	testkit.Report(t, testkit.Figure{Bench: "ledger_hot_account", Value: float64(int(float64(postings) / elapsed.Seconds())), Unit: "postings/s", N: postings,
		Note: "every charge debits renter:r-hot:wallet; one balance update per account per batch; " + cost.String()})
}

// TestBenchLedgerAPI is ledger_api: tx/s of benchAPIClients clients each
// posting benchAPIPerClient manual transactions through REST (the path
// finance uses: the gateway's JSON over HTTP), its p99 beside it
// (ledger_api_p99), and the ratio to ceiling_autocommit (one-row committed
// INSERTs from as many connections, measured after on the same database).
func TestBenchLedgerAPI(t *testing.T) {
	testkit.Bench(t, "ledger_api", "ledger_api_p99", "ceiling_autocommit")
	f, lat, rate, cost, groups := benchAPI(t, restPoster)
	c := testkit.MedianOf(testkit.CeilingRuns, func() testkit.Figure {
		return ceiling.Autocommit(t, f.ctx, f.pool, benchAPIClients, benchAPIPerClient)
	})
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	load := testkit.LoadAvg()
	testkit.ReportAgainst(t, testkit.Figure{Bench: "ledger_api", Value: float64(int(rate)), Unit: "tx/s", N: len(lat), Load: load,
		Note: fmt.Sprintf("%d clients, POST /v1/transactions (REST, JSON, auth, each write audited as in production, the service's workers running), two postings each, every call debits bank:client (a hot account); p99 %.1f ms; %s; %s", benchAPIClients, ms(p(0.99)), cost, groups)}, c)
	testkit.Report(t, testkit.Figure{Bench: "ledger_api_p99", Value: ms(p(0.99)), Unit: "ms", N: len(lat), Rate: float64(int(rate)), Load: load,
		Note: fmt.Sprintf("%d clients, CreateTransaction over REST with auth and audit; p50 %.1f ms, p95 %.1f ms, %.0f tx/s; every call debits bank:client (a hot account)",
			benchAPIClients, ms(p(0.5)), ms(p(0.95)), rate)})
}

// TestBenchLedgerAPIGRPC is ledger_api_grpc_p99: the same load over gRPC
// (what ledger_api_p99 measured before it moved to REST).
func TestBenchLedgerAPIGRPC(t *testing.T) {
	testkit.Bench(t, "ledger_api_grpc_p99")
	_, lat, rate, cost, groups := benchAPI(t, grpcPoster)
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	testkit.Report(t, testkit.Figure{Bench: "ledger_api_grpc_p99", Value: ms(p(0.99)), Unit: "ms", N: len(lat), Rate: float64(int(rate)), Load: testkit.LoadAvg(),
		Note: fmt.Sprintf("%d clients, CreateTransaction over gRPC with auth and audit; p50 %.1f ms, p95 %.1f ms, %.0f tx/s; every call debits bank:client (a hot account); %s; %s",
			benchAPIClients, ms(p(0.5)), ms(p(0.95)), rate, cost, groups)})
}

// poster makes the clients. Given a client's number and a request it
// returns the call that creates that one transaction: what a client
// prepares (REST: the request's bytes) is prepared before the clock starts,
// the call is timed. One client's calls run one after another.
type poster func(t *testing.T, srv *server.Server, tok string) func(client int, req *ledgerv1.CreateTransactionRequest) func(context.Context) error

func grpcPoster(t *testing.T, srv *server.Server, tok string) func(int, *ledgerv1.CreateTransactionRequest) func(context.Context) error {
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.BearerCreds(tok)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := ledgerv1.NewLedgerServiceClient(conn)
	return func(_ int, req *ledgerv1.CreateTransactionRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := client.CreateTransaction(ctx, req)
			return err
		}
	}
}

// restPoster posts each request's JSON, each client on a keep-alive
// HTTP/1.1 connection of its own: the request's bytes are written as they
// were prepared and the answer read with http.ReadResponse. (net/http's
// client Transport, which the bench used before, hands every request to two
// goroutines of its connection and back: ~35 µs of this process's CPU per
// transaction, a sixth of it, spent by the load generator, not the path
// measured.) An answer must be 200 and name the transaction created; the
// bench checks every balance and the number of transactions after the run.
func restPoster(t *testing.T, srv *server.Server, tok string) func(int, *ledgerv1.CreateTransactionRequest) func(context.Context) error {
	type client struct {
		conn net.Conn
		r    *bufio.Reader
	}
	clients := map[int]*client{}
	t.Cleanup(func() {
		for _, c := range clients {
			c.conn.Close()
		}
	})
	return func(n int, req *ledgerv1.CreateTransactionRequest) func(context.Context) error {
		body, err := protojson.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		c := clients[n]
		if c == nil {
			conn, err := net.Dial("tcp", srv.HTTPAddr)
			if err != nil {
				t.Fatal(err)
			}
			// One deadline for the connection's whole run (one per
			// call cost this process up to ~3.5 µs each in window
			// profiles, the load generator's and not the path measured).
			if err := conn.SetDeadline(time.Now().Add(10 * time.Minute)); err != nil {
				t.Fatal(err)
			}
			c = &client{conn: conn, r: bufio.NewReader(conn)}
			clients[n] = c
		}
		msg := fmt.Appendf(nil, "POST /v1/transactions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", srv.HTTPAddr, tok, len(body), body)
		return func(ctx context.Context) error {
			if _, err := c.conn.Write(msg); err != nil {
				return err
			}
			resp, err := http.ReadResponse(c.r, nil)
			if err != nil {
				return err
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("POST /v1/transactions: %s: %s", resp.Status, b)
			}
			if answeredID(b) == "" {
				return fmt.Errorf("POST /v1/transactions answered no transaction: %s", b)
			}
			return nil
		}
	}
}

// answeredID is the transaction_id of a CreateTransaction answer (the
// gateway's protojson, which may put a space after a colon), "" when it
// names none. The rest of the answer is not decoded: that cost this process
// ~12 µs per transaction of encoding/json, the load generator's and not the
// path measured, and the bench checks every balance and the number of
// transactions after the run.
func answeredID(b []byte) string {
	const key = `"transaction_id":`
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return ""
	}
	rest := bytes.TrimLeft(b[i+len(key):], " ")
	if len(rest) == 0 || rest[0] != '"' {
		return ""
	}
	id, _, ok := bytes.Cut(rest[1:], []byte(`"`))
	if !ok {
		return ""
	}
	return string(id)
}

// benchAPI runs benchAPIClients clients of benchAPIPerClient transactions
// each through the poster, against a server that audits every write as the
// services' servers do (pkg/audit: a record in the ledger's outbox before
// the answer) with the ledger service's workers running beside it, verifies
// every balance and the invariants, and returns the
// fixture, the sorted latencies, the tx/s achieved and the CPU per
// transaction (the clients' included).
func benchAPI(t *testing.T, mk poster) (*fixture, []time.Duration, float64, cpuCost, groupStats) {
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	// The service's workers run beside the API, as in production: the
	// outbox relay, the chain worker, the audit consumer (every write's
	// record reaches ledger.audit_events through it), lease control.
	f.runService(t)
	secret := []byte("gpubill-bench-secret-0123456789abcdef")
	srv, err := server.Start(f.ctx, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: secret,
		Log: f.app.Log, Services: []server.Service{f.svc}, Audit: audit.New(audit.PoolStore{Pool: f.pool}, f.app.Log, "ledger")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	prepare := mk(t, srv, testkit.Token(t, secret, auth.RoleFinance, "", time.Hour))
	want := map[string]decimal.Decimal{}
	calls := make([][]func(context.Context) error, benchAPIClients)
	for c := range calls {
		rng := rand.New(rand.NewPCG(uint64(c), 1))
		for i := 0; i < benchAPIPerClient; i++ {
			amt := decimal.New(int64(1+rng.IntN(100000)), -2)
			wallet := fmt.Sprintf("renter:r-%d:wallet", rng.IntN(500))
			calls[c] = append(calls[c], prepare(c, &ledgerv1.CreateTransactionRequest{IdempotencyKey: fmt.Sprintf("api-%d-%d", c, i), Description: "manual",
				Metadata: map[string]string{"ticket": fmt.Sprintf("FIN-%d", i)},
				Postings: []*ledgerv1.Posting{
					{Account: "bank:client", Direction: "debit", Amount: amt.String(), Currency: "USD"},
					{Account: wallet, Direction: "credit", Amount: amt.String(), Currency: "USD"},
				}}))
			want["bank:client"] = want["bank:client"].Sub(amt)
			want[wallet] = want[wallet].Add(amt)
		}
	}
	lat := make([]time.Duration, 0, benchAPIClients*benchAPIPerClient)
	var mu sync.Mutex
	var wg sync.WaitGroup
	meter := startCPU(t, f)
	groups := startGroups(t)
	start := time.Now()
	for _, mine := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			took := make([]time.Duration, 0, len(mine))
			for _, call := range mine {
				t0 := time.Now()
				if err := call(f.ctx); err != nil {
					t.Error(err)
					return
				}
				took = append(took, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, took...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cost := meter.stop(t, benchAPIClients*benchAPIPerClient)
	groups.stop(t, elapsed)
	if t.Failed() {
		t.FailNow()
	}
	if got := f.count(t, `select count(*) from ledger.transactions`); got != benchAPIClients*benchAPIPerClient || len(lat) != got {
		t.Fatalf("%d transactions, %d answered; want %d", got, len(lat), benchAPIClients*benchAPIPerClient)
	}
	wantBalances(t, f, want)
	checkInvariants(t, f)
	slices.Sort(lat)
	return f, lat, float64(len(lat)) / elapsed.Seconds(), cost, groups
}

// groupStats are the API write group commits of a timed run, from the
// ledger's histograms (gpubill_ledger_write_group_*).
type groupStats struct {
	groups         uint64
	writes, busy   float64 // writes committed in the groups; seconds spent committing them
	elapsed        time.Duration
	groups0        uint64
	writes0, busy0 float64
}

func startGroups(t *testing.T) groupStats {
	var g groupStats
	g.writes0, g.groups0 = histogramTotals(t, "gpubill_ledger_write_group_size")
	g.busy0, _ = histogramTotals(t, "gpubill_ledger_write_group_seconds")
	return g
}

func (g *groupStats) stop(t *testing.T, elapsed time.Duration) {
	writes, groups := histogramTotals(t, "gpubill_ledger_write_group_size")
	busy, _ := histogramTotals(t, "gpubill_ledger_write_group_seconds")
	g.groups, g.writes, g.busy, g.elapsed = groups-g.groups0, writes-g.writes0, busy-g.busy0, elapsed
}

func (g groupStats) String() string {
	if g.groups == 0 {
		return "no group commits"
	}
	return fmt.Sprintf("%d group commits of %.1f writes on average, the write path busy %.0f %% of the run",
		g.groups, g.writes/float64(g.groups), 100*g.busy/g.elapsed.Seconds())
}

// TestAnsweredID: the load generator finds the id in either spacing
// protojson writes, and refuses an answer that names none.
func TestAnsweredID(t *testing.T) {
	for b, want := range map[string]string{
		`{"transaction_id":"0192-ab","kind":"manual"}`:         "0192-ab",
		`{"kind":"manual", "transaction_id": "0192-ab"}`:       "0192-ab",
		`{"transaction_id":"","kind":"manual"}`:                "",
		`{"kind":"manual"}`:                                    "",
		`{"transaction_id":null}`:                              "",
		`{"transaction_id":"0192-ab`:                           "",
		`{"original_transaction_id":"x","transaction_id":"y"}`: "y",
	} {
		if got := answeredID([]byte(b)); got != want {
			t.Errorf("answeredID(%s) = %q, want %q", b, got, want)
		}
	}
}
