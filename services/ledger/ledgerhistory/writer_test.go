package ledgerhistory_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/ledgerhistory"
)

// TestWrittenHistoryIsAJournalTheLedgerContinues: a history written with
// COPY (several COPY rounds) verifies link by link with the ledger's own
// chain walk, its maintained balances equal the sums of its postings, and
// the ledger posts and chains after it, the chain still verifying.
func TestWrittenHistoryIsAJournalTheLedgerContinues(t *testing.T) {
	ctx := testkit.Context(t)
	pool, _ := testkit.NewPool(t)
	cal := cycles.Default()
	s, err := ledger.New(ctx, svc.Deps{Pool: pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.System{}, Calendar: cal})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ledgerhistory.NewWriter(ctx, conn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	// 45 000 transactions: three COPY rounds, the last one partial.
	start := time.Now().UTC().Add(-90 * 24 * time.Hour)
	const n = 45_000
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(i) * time.Minute)
		renter, provider := fmt.Sprintf("r-%03d", i%300), fmt.Sprintf("p-%03d", i%70)
		switch {
		case i%20 == 0:
			err = w.Deposit(ctx, fmt.Sprintf("ref-%d", i), renter, "CNY", 50_000, at)
		case i%997 == 0:
			err = w.Release(ctx, provider, cal.At(at).ID, "CNY", 100, at)
		default:
			err = w.Charge(ctx, fmt.Sprintf("ev-%d", i), fmt.Sprintf("l-%d", i/10), renter, provider, cal.ForUsageEnd(at).ID, "CNY", "RTX_4090", "1", int64(100+i%900), at)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	if w.Posted() != n {
		t.Fatalf("posted %d, want %d", w.Posted(), n)
	}
	res, err := ledger.VerifyChain(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Checked != n || res.Unchained != 0 {
		t.Fatalf("verify after the written history: %+v, want ok with %d links and none unchained", res, n)
	}
	var off int
	if err := pool.QueryRow(ctx, `select count(*) from (
		select account, currency, sum(amount) filter (where direction = 'debit') as d, sum(amount) filter (where direction = 'credit') as c
		from ledger.postings group by 1, 2) p
		full join ledger.balances b using (account, currency)
		where coalesce(p.d, 0) <> coalesce(b.debits, -1) or coalesce(p.c, 0) <> coalesce(b.credits, -1)`).Scan(&off); err != nil {
		t.Fatal(err)
	}
	if off != 0 {
		t.Fatalf("%d balances differ from the sums of their postings", off)
	}
	var missing int
	if err := pool.QueryRow(ctx, `select count(distinct account) from ledger.postings p
		where not exists (select 1 from ledger.accounts a where a.address = p.account)`).Scan(&missing); err != nil {
		t.Fatal(err)
	}
	if missing != 0 {
		t.Fatalf("%d posted accounts missing from ledger.accounts", missing)
	}

	// The ledger posts after it: a deposit to a renter of the history adds
	// to its balance, and the chain extends over it and still verifies.
	before := walletBalance(t, s, "r-001")
	if _, err := s.App().Deposit(ctx, app.DepositInput{RenterID: "r-001", Amount: "10.00", Currency: "CNY", ExternalRef: "after-history"}); err != nil {
		t.Fatal(err)
	}
	if got, want := walletBalance(t, s, "r-001"), before+1000; got != want {
		t.Fatalf("wallet r-001 after the deposit: %d cents, want %d", got, want)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		k, err := ledger.ChainOnce(ctx, pool)
		return err == nil && k == 1
	}, "the chain never extended over the deposit")
	if res, err = ledger.VerifyChain(ctx, pool); err != nil || !res.OK || res.Checked != n+1 {
		t.Fatalf("verify after a deposit: %+v, %v; want ok with %d links", res, err, n+1)
	}
}

func walletBalance(t *testing.T, s *ledger.Service, renter string) int64 {
	t.Helper()
	v, err := s.App().GetAccount(testkit.Context(t), "renter:"+renter+":wallet", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range v.Balances {
		if b.Currency == "CNY" {
			return b.Amount.Shift(2).IntPart()
		}
	}
	return 0
}
