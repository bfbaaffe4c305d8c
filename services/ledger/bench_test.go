package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
)

// Bench sizes.
const (
	benchCharges       = 50_000 // 100 000 postings
	benchChargesPerMsg = 10
	benchRenters       = 1000
	benchProviders     = 200
	benchAPIClients    = 32
	benchAPIPerClient  = 100
	benchCopyRowsPerTx = 10_000 // what one fetched batch of 500 messages writes
	benchBenchCycleID  = "cyc-20261112"
)

// publishCharges puts n charges on CHARGES, benchChargesPerMsg per message.
func publishCharges(t *testing.T, js *testkit.JetStream, n int, renter func(i int) string) {
	t.Helper()
	ctx := context.Background()
	eff := timestamppb.New(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	var futures []jetstream.PubAckFuture
	for m := 0; m*benchChargesPerMsg < n; m++ {
		b := &eventsv1.ChargesRatedBatch{BatchId: fmt.Sprintf("bench-%d", m)}
		for i := m * benchChargesPerMsg; i < min(n, (m+1)*benchChargesPerMsg); i++ {
			b.Charges = append(b.Charges, &eventsv1.RatedCharge{ChargeId: fmt.Sprintf("ch-%d", i), LeaseId: fmt.Sprintf("lease-%d", i%5000),
				RenterId: renter(i), ProviderId: fmt.Sprintf("p-%d", i%benchProviders), CycleId: benchBenchCycleID,
				Currency: "USD", Amount: decimal.New(int64(1+i%997), -2).String(), EffectiveAt: eff})
		}
		data, _ := proto.Marshal(b)
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
	_ = ctx
}

// runCharges starts the service (consumer, outbox relay, chain worker) and
// returns how long it took to commit n charge transactions.
func runCharges(t *testing.T, f *fixture, n int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f.svc.Run(ctx) }()
	testkit.Eventually(t, 10*time.Minute, func() bool {
		var c int
		_ = f.pool.QueryRow(f.ctx, `select count(*) from ledger.transactions`).Scan(&c)
		return c >= n
	}, "charges not all posted")
	elapsed := time.Since(start)
	cancel()
	<-done
	return elapsed
}

func TestBenchLedgerPostings(t *testing.T) {
	testkit.Bench(t, "ledger_postings")
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	publishCharges(t, js, benchCharges, func(i int) string { return fmt.Sprintf("r-%d", i%benchRenters) })
	elapsed := runCharges(t, f, benchCharges)
	postings := 2 * benchCharges
	checkInvariants(t, f)
	testkit.Report(t, testkit.Figure{Bench: "ledger_postings", Value: float64(int(float64(postings) / elapsed.Seconds())), Unit: "postings/s", N: postings,
		Note: fmt.Sprintf("%d charges from JetStream in %s, %d per message, fetch batches of 500 messages in one Postgres transaction each, fsync on, relay and chain worker running", benchCharges, elapsed.Round(time.Millisecond), benchChargesPerMsg)})
}

func TestBenchLedgerHotAccount(t *testing.T) {
	testkit.Bench(t, "ledger_hot_account")
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	publishCharges(t, js, benchCharges, func(int) string { return "r-hot" })
	elapsed := runCharges(t, f, benchCharges)
	postings := 2 * benchCharges
	wantBalance(t, f, "renter:r-hot:wallet", "USD", f.balance(t, "renter:r-hot:wallet", "USD").String())
	checkInvariants(t, f)
	testkit.Report(t, testkit.Figure{Bench: "ledger_hot_account", Value: float64(int(float64(postings) / elapsed.Seconds())), Unit: "postings/s", N: postings,
		Note: "every charge debits renter:r-hot:wallet; one balance update per account per batch"})
}

func TestBenchLedgerAPIP99(t *testing.T) {
	testkit.Bench(t, "ledger_api_p99")
	f := newFixture(t, nil)
	secret := []byte("bench")
	srv, err := server.Start(f.ctx, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: secret,
		Log: f.app.Log, Services: []server.Service{f.svc}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(f.ctx)
	tok, _ := auth.Issue(secret, auth.RoleFinance, "", time.Hour)
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.BearerCreds(tok)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ledgerv1.NewLedgerServiceClient(conn)
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < benchAPIClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for i := 0; i < benchAPIPerClient; i++ {
				amt := decimal.New(int64(1+rng.IntN(100000)), -2).String()
				req := &ledgerv1.CreateTransactionRequest{IdempotencyKey: fmt.Sprintf("api-%d-%d", c, i), Description: "manual",
					Metadata: map[string]string{"ticket": fmt.Sprintf("FIN-%d", i)},
					Postings: []*ledgerv1.Posting{
						{Account: "bank:client", Direction: "debit", Amount: amt, Currency: "USD"},
						{Account: fmt.Sprintf("renter:r-%d:wallet", rng.IntN(500)), Direction: "credit", Amount: amt, Currency: "USD"},
					}}
				t0 := time.Now()
				if _, err := client.CreateTransaction(f.ctx, req); err != nil {
					t.Error(err)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	testkit.Report(t, testkit.Figure{Bench: "ledger_api_p99", Value: ms(p(0.99)), Unit: "ms", N: len(lat),
		Note: fmt.Sprintf("%d clients, CreateTransaction over gRPC with auth; p50 %.1f ms, p95 %.1f ms, %.0f tx/s; every call debits bank:client (a hot account)",
			benchAPIClients, ms(p(0.5)), ms(p(0.95)), float64(len(lat))/elapsed.Seconds())})
}

func TestBenchCeilingCopy(t *testing.T) {
	testkit.Bench(t, "ceiling_copy")
	f := newFixture(t, nil)
	if _, err := f.pool.Exec(f.ctx, `create table ledger.bench_copy (like ledger.postings including all)`); err != nil {
		t.Fatal(err)
	}
	const rows = 2 * benchCharges
	created := time.Now().UTC()
	start := time.Now()
	for off := 0; off < rows; off += benchCopyRowsPerTx {
		batch := make([][]any, 0, benchCopyRowsPerTx)
		for i := off; i < min(rows, off+benchCopyRowsPerTx); i += 2 {
			id := pgtype.UUID{Bytes: uuid.Must(uuid.NewV7()), Valid: true}
			amt := pgtype.Numeric{Int: decimal.New(int64(1+i%997), -2).Coefficient(), Exp: -2, Valid: true}
			batch = append(batch,
				[]any{id, int32(0), fmt.Sprintf("renter:r-%d:wallet", i%benchRenters), "USD", "debit", amt, created},
				[]any{id, int32(1), fmt.Sprintf("provider:p-%d:pending:%s", i%benchProviders, benchBenchCycleID), "USD", "credit", amt, created})
		}
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.CopyFrom(f.ctx, pgx.Identifier{"ledger", "bench_copy"},
			[]string{"tx_id", "idx", "account", "currency", "direction", "amount", "created_at"}, pgx.CopyFromRows(batch)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	testkit.Report(t, testkit.Figure{Bench: "ceiling_copy", Value: float64(int(float64(rows) / elapsed.Seconds())), Unit: "rows/s", N: rows,
		Note: fmt.Sprintf("COPY of posting rows into a table shaped and indexed like ledger.postings, %d rows per committed transaction", benchCopyRowsPerTx)})
}
