package payoutstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/pg"
	gsrv "github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/payout"
)

func as(role, sub string) context.Context {
	return auth.WithPrincipal(context.Background(), auth.Principal{Role: role, Subject: sub})
}

var fin = as(auth.RoleFinance, "")

// testTiming makes the workflows quick: polls from 200 ms to 1 s, a paid
// payout watched 4 s for a return, activity attempts cut after 3 s.
var testTiming = payout.Timing{GateRecheck: time.Hour, PollFirst: 200 * time.Millisecond, PollMax: time.Second,
	ReturnWindow: 4 * time.Second, ActivityTimeout: 3 * time.Second}

// stack is the real ledger and payout behind pkg/server on 127.0.0.1:0, on
// one fresh database, a JetStream server of its own and a Temporal dev
// server, composed as services/gpubill/internal/stack composes them.
type stack struct {
	s      *payout.Service
	js     jetstream.JetStream
	tc     client.Client
	ledger ledgerv1.LedgerServiceClient
	// settlement is the ledger as settlement calls it (the service identity).
	settlement ledgerv1.LedgerServiceClient
	report     ledgerv1.ReportServiceClient
	http       string
	secret     []byte

	d        svc.Deps
	dsn      string
	grpcAddr string
	queue    string
	cfg      payout.Config
	mu       sync.Mutex
	deposits map[string]decimal.Decimal // currency → deposited into bank:client
	runStop  context.CancelFunc
	runDone  chan error
	t        testing.TB
}

var temporalOnce struct {
	sync.Once
	addr string
}

// sharedTemporal is one dev server for the package's tests (each test uses
// its own task queue).
func sharedTemporal(t *testing.T) client.Client {
	t.Helper()
	temporalOnce.Do(func() { temporalOnce.addr = testkit.NewTemporal(&noCleanupT{t}) })
	// The frontend accepts TCP before it answers healthy: dial again until
	// it does ("Frontend is not healthy yet" failed a test under load).
	deadline := time.Now().Add(60 * time.Second)
	for {
		tc, err := client.DialContext(context.Background(), client.Options{HostPort: temporalOnce.addr, Logger: payout.TemporalLogger(slog.New(slog.DiscardHandler))})
		if err == nil {
			t.Cleanup(tc.Close)
			return tc
		}
		if time.Now().After(deadline) {
			t.Fatalf("temporal at %s not healthy: %v", temporalOnce.addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// noCleanupT keeps the shared dev server alive past the first test (it is
// stopped with the test process).
type noCleanupT struct{ *testing.T }

func (noCleanupT) Cleanup(func()) {}

func newStack(t *testing.T, cfg payout.Config) *stack {
	t.Helper()
	return newStackOn(t, "", cfg)
}

// newStackOn is newStack on the database at dsn ("": a fresh one).
func newStackOn(t *testing.T, dsn string, cfg payout.Config) *stack {
	t.Helper()
	ctx := context.Background()
	var pool *pgxpool.Pool
	if dsn == "" {
		pool, dsn = testkit.NewPool(t)
	} else {
		var err error
		if pool, err = pg.Open(ctx, dsn, 16); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
	}
	js := testkit.NewJetStream(t)
	tc := sharedTemporal(t)
	log := slog.New(slog.DiscardHandler)
	secret := []byte("payout-integration-test-secret-0123456789")
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conn := func(role, sub string) *grpc.ClientConn {
		tok, err := auth.Issue(secret, role, sub, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(auth.BearerCreds(tok)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	internal := conn(auth.RoleService, "gpubill-internal") // payout's calls, as deployed: the services' own identity
	admin := conn(auth.RoleAdmin, "payout-stack")          // the test's own reads and corrections
	// The segregated-funds report is read as an auditor reads it (DESIGN §7:
	// finance and auditor only; admin is refused).
	auditor := conn(auth.RoleAuditor, "payout-stack-auditor")
	d := svc.Deps{Pool: pool, JS: js.JS, Log: log, Clock: clock.System{}, Calendar: cycles.Default(), Internal: internal}
	ls, err := ledger.New(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timing == (payout.Timing{}) {
		cfg.Timing = testTiming
	}
	if cfg.SandboxLatency == 0 {
		cfg.SandboxLatency, cfg.SandboxReturnAfter = time.Second, time.Second
	}
	if cfg.WebhookKey == nil && cfg.DataDir == "" {
		cfg.DataDir = t.TempDir() // webhook.key made on first start
	}
	queue := testkit.Name("payout")
	ps, err := payout.New(ctx, d, tc, queue, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ps.TestHooks().SetWebhookBackoff(100 * time.Millisecond)
	srv, err := gsrv.Start(ctx, gsrv.Options{GRPCListener: gl, HTTPAddr: "127.0.0.1:0", Secret: secret, Log: log,
		Services: []gsrv.Service{ls, ps}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	stopLedger := testkit.Run(t, "ledger", ls.Run)
	st := &stack{s: ps, js: js.JS, tc: tc, ledger: ledgerv1.NewLedgerServiceClient(admin), settlement: ledgerv1.NewLedgerServiceClient(internal),
		report: ledgerv1.NewReportServiceClient(auditor),
		http:   srv.HTTPAddr, secret: secret, t: t, deposits: map[string]decimal.Decimal{}, d: d, queue: queue, cfg: cfg, dsn: dsn, grpcAddr: gl.Addr().String()}
	st.startPayout()
	t.Cleanup(func() { st.stopPayout(); stopLedger() })
	return st
}

// startPayout runs the payout service (worker, starter, consumer, relay).
func (st *stack) startPayout() {
	ctx, cancel := context.WithCancel(context.Background())
	st.runStop, st.runDone = cancel, make(chan error, 1)
	done, s := st.runDone, st.s
	go func() { done <- s.Run(ctx) }()
}

func (st *stack) stopPayout() {
	if st.runStop != nil {
		st.runStop()
		if err := <-st.runDone; err != nil && !errors.Is(err, context.Canceled) {
			st.t.Errorf("payout: %v", err)
		}
		st.runStop = nil
	}
}

// settleLedgerOnly does in the ledger what settlement does for a provider:
// the renter's money comes into bank:client (a deposit) and the
// provider's net lands in provider:{id}:available.
func (st *stack) settleLedgerOnly(t *testing.T, provider, cycle, currency, net string) {
	t.Helper()
	ctx := context.Background()
	renter := "r-" + provider
	if _, err := st.ledger.CreateDeposit(ctx, &ledgerv1.CreateDepositRequest{RenterId: renter, Amount: net, Currency: currency,
		ExternalRef: "dep-" + provider + "-" + cycle}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.settlement.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: "settle-" + provider + "-" + cycle, Description: "net of " + cycle,
		Postings: []*ledgerv1.Posting{
			{Account: "renter:" + renter + ":wallet", Direction: "debit", Amount: net, Currency: currency},
			{Account: "provider:" + provider + ":available", Direction: "credit", Amount: net, Currency: currency},
		},
	}); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.deposits[currency] = st.deposits[currency].Add(decimal.RequireFromString(net))
	st.mu.Unlock()
}

// settle does settleLedgerOnly and publishes settlement.settled.{provider}
// (twice, under two message ids: one payout all the same).
func (st *stack) settle(t *testing.T, provider, cycle, currency, net string) {
	t.Helper()
	st.settleLedgerOnly(t, provider, cycle, currency, net)
	st.publishSettled(t, provider, cycle, currency, net)
}

// publishSettled publishes settlement.settled.{provider} (twice, under two
// message ids).
func (st *stack) publishSettled(t *testing.T, provider, cycle, currency, net string) {
	t.Helper()
	ctx := context.Background()
	b, err := proto.Marshal(&eventsv1.ProviderSettled{ProviderId: provider, CycleId: cycle, Currency: currency,
		Gross: net, Commission: "0", TaxWithheld: "0", Net: net, TransactionId: "tx-" + provider + "-" + cycle, Jurisdiction: "CN"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // a redelivery under another message id is still one payout
		m := nats.NewMsg("settlement.settled." + provider)
		m.Data = b
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("settled-%s-%s-%d", provider, cycle, i))
		if _, err := st.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// setup gives a provider verified KYC (finance) and a bank account.
func (st *stack) setup(t *testing.T, provider, account string) {
	t.Helper()
	if _, err := st.s.API().PutKyc(fin, &payoutv1.PutKycRequest{ProviderId: provider, Status: "verified", Reference: "kyc-" + provider}); err != nil {
		t.Fatal(err)
	}
	st.method(t, provider, account)
}

func (st *stack) method(t *testing.T, provider, account string) {
	t.Helper()
	if _, err := st.s.API().PutPayoutMethod(as(auth.RoleProvider, provider), &payoutv1.PutPayoutMethodRequest{ProviderId: provider,
		Type: "bank", AccountName: "Provider " + provider, AccountNumber: account, BankCode: "ICBKCNBJ"}); err != nil {
		t.Fatal(err)
	}
}

// payouts lists a provider's payouts as the provider sees them.
func (st *stack) payouts(t *testing.T, provider string) []*payoutv1.Payout {
	t.Helper()
	resp, err := st.s.API().ListProviderPayouts(as(auth.RoleProvider, provider), &payoutv1.ListProviderPayoutsRequest{ProviderId: provider})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Payouts
}

// waitStatus waits for the provider's payout of the cycle to reach status.
func (st *stack) waitStatus(t *testing.T, provider, cycle, status string, within time.Duration) *payoutv1.Payout {
	t.Helper()
	return st.waitPayout(t, provider, cycle, "status "+status, within, func(p *payoutv1.Payout) bool { return p.Status == status })
}

// waitPayout waits for the provider's payout of the cycle to be as done
// (what) says.
func (st *stack) waitPayout(t *testing.T, provider, cycle, what string, within time.Duration, done func(*payoutv1.Payout) bool) *payoutv1.Payout {
	t.Helper()
	var got *payoutv1.Payout
	deadline := time.Now().Add(within)
	for {
		for _, p := range st.payouts(t, provider) {
			if p.CycleId == cycle {
				got = p
			}
		}
		if got != nil && done(got) {
			return got
		}
		if time.Now().After(deadline) {
			last := "no payout"
			if got != nil {
				last = got.Status + " (" + got.StatusReason + ") " + history(got)
			}
			t.Fatalf("payout of %s %s did not reach %s within %s: %s", provider, cycle, what, within, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (st *stack) balance(t *testing.T, account, currency string) decimal.Decimal {
	t.Helper()
	resp, err := st.ledger.GetAccount(context.Background(), &ledgerv1.GetAccountRequest{Address: account})
	if err != nil {
		if strings.Contains(err.Error(), "NotFound") || strings.Contains(err.Error(), "not found") {
			return decimal.Zero
		}
		t.Fatalf("account %s: %v", account, err)
	}
	for _, b := range resp.Account.Balances {
		if b.Currency == currency {
			return decimal.RequireFromString(b.Amount)
		}
	}
	return decimal.Zero
}

// checkProvider proves a provider's ledger accounts: available and
// in_transit hold exactly what the test expects.
func (st *stack) checkProvider(t *testing.T, provider, currency, wantAvailable, wantInTransit string) {
	t.Helper()
	if got := st.balance(t, "provider:"+provider+":available", currency); !got.Equal(decimal.RequireFromString(wantAvailable)) {
		t.Errorf("%s available %s, want %s", provider, got, wantAvailable)
	}
	if got := st.balance(t, "provider:"+provider+":in_transit", currency); !got.Equal(decimal.RequireFromString(wantInTransit)) {
		t.Errorf("%s in_transit %s, want %s", provider, got, wantInTransit)
	}
}

// checkFunds proves the whole ledger after every path: bank:client holds
// what was deposited minus what was paid out (and not returned), the sum
// of every renter wallet, available and in_transit equals that (settle
// empties a renter's wallet into available; a top-up stays in its wallet),
// and the segregated-funds report is balanced.
func (st *stack) checkFunds(t *testing.T, currency string, paidOut decimal.Decimal) {
	t.Helper()
	ctx := context.Background()
	st.mu.Lock()
	deposited := st.deposits[currency]
	st.mu.Unlock()
	if got := st.balance(t, "bank:client", currency); !got.Equal(deposited.Sub(paidOut)) {
		t.Errorf("bank:client %s %s, want deposits %s - paid out %s", got, currency, deposited, paidOut)
	}
	var liabilities decimal.Decimal
	for _, prefix := range []string{"provider:", "renter:"} {
		resp, err := st.ledger.ListAccounts(ctx, &ledgerv1.ListAccountsRequest{Prefix: prefix, PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.Accounts {
			for _, b := range a.Balances {
				if b.Currency == currency && (strings.HasSuffix(a.Address, ":available") || strings.HasSuffix(a.Address, ":in_transit") ||
					strings.HasSuffix(a.Address, ":wallet")) {
					liabilities = liabilities.Add(decimal.RequireFromString(b.Amount))
				}
			}
		}
	}
	if !liabilities.Equal(deposited.Sub(paidOut)) {
		t.Errorf("Σ wallets + available + in_transit %s, want bank:client %s", liabilities, deposited.Sub(paidOut))
	}
	body, err := st.report.GetSegregatedFundsReport(ctx, &ledgerv1.GetSegregatedFundsReportRequest{Currency: currency})
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Verdict    string `json:"verdict"`
		Difference string `json:"difference"`
	}
	if err := json.Unmarshal(body.Data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != "balanced" {
		t.Errorf("segregated-funds report %s: %s (difference %s)", currency, rep.Verdict, rep.Difference)
	}
}

// submissions counts the sandbox's submissions of a reference.
func (st *stack) submissions(t *testing.T, ref string) int {
	t.Helper()
	n, err := st.s.TestHooks().SandboxSubmissions(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func history(p *payoutv1.Payout) string {
	var s []string
	for _, c := range p.StatusHistory {
		s = append(s, c.Status)
	}
	return strings.Join(s, ">")
}
