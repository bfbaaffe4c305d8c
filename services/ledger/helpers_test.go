package ledger_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

type fixture struct {
	svc  *ledger.Service
	app  *app.App
	pool *pgxpool.Pool
	ctx  context.Context
}

func newFixture(t testing.TB, js *testkit.JetStream) *fixture {
	t.Helper()
	return newFixtureAt(t, js, clock.System{})
}

// newFixtureAt is newFixture with the ledger's clock given (a clock.Manual
// orders the as-of instants without sleeping).
func newFixtureAt(t testing.TB, js *testkit.JetStream, clk clock.Clock) *fixture {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	return newFixtureOn(t, pool, js, clk)
}

// newFixtureOn is newFixtureAt on a given database (the report benchmark's
// kept fixture), with the service's options.
func newFixtureOn(t testing.TB, pool *pgxpool.Pool, js *testkit.JetStream, clk clock.Clock, opts ...ledger.Option) *fixture {
	t.Helper()
	ctx := testkit.Context(t)
	d := svc.Deps{Pool: pool, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Clock: clk, Calendar: cycles.Default()}
	if js != nil {
		d.JS = js.JS
	}
	s, err := ledger.New(ctx, d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{svc: s, app: s.App(), pool: pool, ctx: ctx}
}

// runService runs the service's workers (consumers, outbox relay, chain
// worker, lease control) until t ends, and fails t if they end with an error.
func (f *fixture) runService(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- f.svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func (f *fixture) balance(t testing.TB, addr, cur string) decimal.Decimal {
	t.Helper()
	v, err := f.app.GetAccount(f.ctx, addr, nil)
	if errors.Is(err, apperr.ErrNotFound) {
		return decimal.Zero
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range v.Balances {
		if b.Currency == cur {
			return b.Amount
		}
	}
	return decimal.Zero
}

func (f *fixture) deposit(t testing.TB, renter, amount, cur, ref string) *domain.Transaction {
	t.Helper()
	tx, err := f.app.Deposit(f.ctx, app.DepositInput{RenterID: renter, Amount: amount, Currency: cur, ExternalRef: ref})
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func transfer(key, from, to, amount, cur string) app.CreateTransactionInput {
	return app.CreateTransactionInput{IdempotencyKey: key, Postings: []domain.RawPosting{
		{Account: from, Direction: "debit", Amount: amount, Currency: cur},
		{Account: to, Direction: "credit", Amount: amount, Currency: cur},
	}}
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func wantBalance(t testing.TB, f *fixture, addr, cur, want string) {
	t.Helper()
	if got := f.balance(t, addr, cur); !got.Equal(dec(want)) {
		t.Fatalf("balance of %s %s = %s, want %s", addr, cur, got, want)
	}
}

func wantInvalid(t testing.TB, err error, contains string) {
	t.Helper()
	var inv *apperr.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("want an invalid-input error containing %q, got %v", contains, err)
	}
	if contains != "" && !containsStr(err.Error(), contains) {
		t.Fatalf("error %q does not mention %q", err, contains)
	}
}

func containsStr(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0))
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// chainAll waits until the chain worker's step has chained every transaction
// (a transaction is chained once no older Postgres transaction is running).
func chainAll(t testing.TB, f *fixture) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool {
		if _, err := f.svc.ChainOnce(f.ctx); err != nil { // as the service chains: what it wrote, as written
			t.Fatal(err)
		}
		var n int
		if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.transactions t
			where not exists (select 1 from ledger.journal_chain c where c.tx_id = t.id)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, "transactions left unchained")
}
