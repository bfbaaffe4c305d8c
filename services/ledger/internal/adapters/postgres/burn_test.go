package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// migratedStore is a store on a fresh, migrated ledger database.
func migratedStore(t *testing.T) (context.Context, *pgxpool.Pool, *Store) {
	t.Helper()
	ctx := testkit.Context(t)
	pool, _ := testkit.NewPool(t)
	if err := pg.Migrate(ctx, pool, Schema, migrations.For("ledger")); err != nil {
		t.Fatal(err)
	}
	return ctx, pool, NewStore(pool)
}

// burnByPostingsSQL is the burn rate as it was read before wallet_burn
// (migration ledger/0014): every charge posting of the wallet since $3.
const burnByPostingsSQL = `select coalesce(sum(p.amount), 0) from ledger.postings p join ledger.transactions t on t.id = p.tx_id
	where p.account = $1 and p.currency = $2 and p.direction = 'debit' and p.created_at > $3 and t.kind = 'charge'`

// The burn rate read from wallet_burn's minutes and the first minute's
// postings is, for any start of the window, the sum of the wallet's charge
// postings since then: charges posted one by one and in COPY batches, by
// Post and by PostNew, at random instants and on minute boundaries, beside
// other debits of the wallets that are not charges.
func TestBurnEqualsChargePostingsSince(t *testing.T) {
	ctx, pool, s := migratedStore(t)
	rng := rand.New(rand.NewPCG(16, 14))
	base := time.Now().UTC().Truncate(time.Minute).Add(-90 * time.Minute)
	renters, currencies := []string{"r-burn-a", "r-burn-b", "r-burn-c"}, []string{"USD", "CNY"}
	address := func(a string) domain.Account {
		acc, err := domain.ParseAddress(a)
		if err != nil {
			t.Fatal(err)
		}
		return acc
	}
	var instants []time.Time
	tx := func(i int, kind domain.TxKind) *domain.Transaction {
		at := base.Add(time.Duration(rng.Int64N(int64(2 * time.Hour))))
		switch i % 7 {
		case 0: // on a minute boundary
			at = at.Truncate(time.Minute)
		case 1: // a nanosecond past one (the column keeps microseconds)
			at = at.Truncate(time.Minute).Add(time.Nanosecond)
		}
		instants = append(instants, at)
		r, cur := renters[rng.IntN(len(renters))], currencies[rng.IntN(len(currencies))]
		amt := decimal.New(rng.Int64N(100_000)+1, -2)
		other := address(domain.ProviderPendingAddr("p-burn", "cyc-20261112"))
		if kind != domain.TxCharge { // a refund out of the wallet
			other = address("bank:client")
		}
		return &domain.Transaction{ID: ids.New(""), IdempotencyKey: fmt.Sprintf("burn-%s-%d", kind, i), Kind: kind,
			EffectiveAt: at, CreatedAt: at, Postings: []domain.Posting{
				{Account: address(domain.RenterWallet(r)), Direction: domain.Debit, Amount: amt, Currency: cur},
				{Account: other, Direction: domain.Credit, Amount: amt, Currency: cur}}}
	}
	post := func(txs []*domain.Transaction) {
		t.Helper()
		if err := s.WithTx(ctx, func(x app.Tx) error { _, _, err := x.Post(ctx, txs); return err }); err != nil {
			t.Fatal(err)
		}
	}
	var deposits []*domain.Transaction // PostNew judges a wallet left at or below zero
	for _, r := range renters {
		for _, c := range currencies {
			amt := decimal.NewFromInt(10_000_000)
			deposits = append(deposits, &domain.Transaction{ID: ids.New(""), IdempotencyKey: "burn-deposit-" + r + c, Kind: domain.TxDeposit,
				EffectiveAt: base, CreatedAt: base, Postings: []domain.Posting{
					{Account: address("bank:client"), Direction: domain.Debit, Amount: amt, Currency: c},
					{Account: address(domain.RenterWallet(r)), Direction: domain.Credit, Amount: amt, Currency: c}}})
		}
	}
	post(deposits)
	n := 0
	for _, size := range []int{1, 1, 3, batchMin, 2 * batchMin, 500, 1, 7} {
		var txs []*domain.Transaction
		for range size {
			n++
			txs = append(txs, tx(n, domain.TxCharge))
		}
		post(txs)
	}
	var refunds []*domain.Transaction
	for range 40 {
		n++
		refunds = append(refunds, tx(n, domain.TxManual))
	}
	post(refunds)
	var group []*domain.Transaction // PostNew takes charges too
	for range 30 {
		n++
		group = append(group, tx(n, domain.TxCharge))
	}
	if _, err := s.PostNew(ctx, group, nil); err != nil {
		t.Fatal(err)
	}

	sinces := []time.Time{base.Add(-time.Hour), base.Add(3 * time.Hour)}
	rng.Shuffle(len(instants), func(i, j int) { instants[i], instants[j] = instants[j], instants[i] })
	for _, at := range instants[:200] {
		sinces = append(sinces, at, at.Add(-time.Microsecond), at.Truncate(time.Minute), at.Truncate(time.Minute).Add(-time.Nanosecond))
	}
	var ws []domain.Wallet
	for _, r := range renters {
		for _, c := range currencies {
			ws = append(ws, domain.Wallet{RenterID: r, Currency: c})
		}
	}
	nonzero := 0
	for _, since := range sinces {
		if err := readBurn(ctx, pool, false, ws, since, func(int) bool { return true }); err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			var want decimal.Decimal
			if err := pool.QueryRow(ctx, burnByPostingsSQL, domain.RenterWallet(w.RenterID), w.Currency, since).Scan(&want); err != nil {
				t.Fatal(err)
			}
			if !w.BurnPerHour.Equal(want) {
				t.Fatalf("burn of %s %s since %s: %s, the charge postings since then sum to %s",
					w.RenterID, w.Currency, since.Format(time.RFC3339Nano), w.BurnPerHour, want)
			}
			if want.IsPositive() {
				nonzero++
			}
		}
	}
	if nonzero < len(sinces) {
		t.Fatalf("only %d of %d burn reads found a charge", nonzero, len(sinces)*len(ws))
	}

	// Pruning deletes only the minutes no window reads.
	now := base.Add(2*time.Hour + 30*time.Minute)
	var before, old int
	if err := pool.QueryRow(ctx, `select count(*), count(*) filter (where minute < $1) from ledger.wallet_burn`, now.Add(-burnKeep)).Scan(&before, &old); err != nil {
		t.Fatal(err)
	}
	if old == 0 {
		t.Fatal("no minute old enough to prune: the test needs charges over two hours before now")
	}
	pruned, err := PruneBurn(ctx, pool, now)
	if err != nil {
		t.Fatal(err)
	}
	var after int
	if err := pool.QueryRow(ctx, `select count(*) from ledger.wallet_burn where minute >= $1`, now.Add(-burnKeep)).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if int(pruned) != old || after != before-old {
		t.Fatalf("pruned %d rows, want the %d older than %s; %d left of %d", pruned, old, burnKeep, after, before)
	}
}

// A burn read of a wallet charged 20 000 times in the hour reads the
// postings of one minute and the window's minute rows: a small part of
// what summing every charge posting of the hour touched.
func TestBurnReadTakesAMinuteOfPostings(t *testing.T) {
	ctx, pool, s := migratedStore(t)
	now := time.Now().UTC()
	pending, err := domain.ParseAddress(domain.ProviderPendingAddr("p-burn", "cyc-20261112"))
	if err != nil {
		t.Fatal(err)
	}
	charge := func(renter string, i, n int) *domain.Transaction {
		wallet, err := domain.ParseAddress(domain.RenterWallet(renter))
		if err != nil {
			t.Fatal(err)
		}
		at := now.Add(-time.Duration(i+1) * time.Hour / time.Duration(n+1)) // spread over the last hour
		return &domain.Transaction{ID: ids.New(""), IdempotencyKey: fmt.Sprintf("burn-%s-%d", renter, i), Kind: domain.TxCharge,
			EffectiveAt: at, CreatedAt: at, Postings: []domain.Posting{
				{Account: wallet, Direction: domain.Debit, Amount: decimal.RequireFromString("0.01"), Currency: "USD"},
				{Account: pending, Direction: domain.Credit, Amount: decimal.RequireFromString("0.01"), Currency: "USD"}}}
	}
	for _, w := range []struct {
		renter string
		n      int
	}{{"r-light", 200}, {"r-heavy", 20_000}} {
		for i := 0; i < w.n; i += 2000 {
			var txs []*domain.Transaction
			for j := i; j < min(i+2000, w.n); j++ {
				txs = append(txs, charge(w.renter, j, w.n))
			}
			if err := s.WithTx(ctx, func(x app.Tx) error { _, _, err := x.Post(ctx, txs); return err }); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pool.Exec(ctx, `analyze ledger.postings; analyze ledger.transactions; analyze ledger.wallet_burn`); err != nil {
		t.Fatal(err)
	}
	since := now.Add(-time.Hour)
	// The tables are small enough here for the planner to scan them
	// whole; on a ledger's they are not, and it walks the indexes.
	postingsRead := func(sql string, args ...any) (int, string) {
		var plan []map[string]any
		err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `set local enable_seqscan = off; set local enable_bitmapscan = off`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `explain (analyze, format json) `+sql, args...).Scan(&plan)
		})
		if err != nil {
			t.Fatal(err)
		}
		return planRows(plan[0]["Plan"].(map[string]any), "postings"), fmt.Sprint(plan[0]["Execution Time"])
	}
	read := func(renter string) (int, string) {
		return postingsRead(burnSQL, []string{domain.RenterWallet(renter)}, []string{"USD"}, since, burnMinute(since).Add(time.Minute))
	}
	light, lightMs := read("r-light")
	heavy, heavyMs := read("r-heavy")
	all, allMs := postingsRead(burnByPostingsSQL, domain.RenterWallet("r-heavy"), "USD", since)
	t.Logf("postings read per burn read: %d (%s ms) for 200 charges in the hour, %d (%s ms) for 20 000; summing the 20 000 postings: %d (%s ms)",
		light, lightMs, heavy, heavyMs, all, allMs)
	if all < 20_000 || light > 10 || heavy > 2*20_000/60 {
		t.Fatalf("a burn read read %d postings of a wallet charged 200 times in the hour and %d of one charged 20 000 times (summing them: %d)", light, heavy, all)
	}
	ws := []domain.Wallet{{RenterID: "r-light", Currency: "USD"}, {RenterID: "r-heavy", Currency: "USD"}}
	if err := readBurn(ctx, pool, false, ws, since, func(int) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if ws[0].BurnPerHour.String() != "2" || ws[1].BurnPerHour.String() != "200" {
		t.Fatalf("burn %s and %s, want 2 and 200", ws[0].BurnPerHour, ws[1].BurnPerHour)
	}
}

// planRows is how many rows the plan's scans of relation read (returned or
// filtered out), over every loop.
func planRows(node map[string]any, relation string) int {
	n := 0
	if node["Relation Name"] == relation {
		loops, _ := node["Actual Loops"].(float64)
		rows, _ := node["Actual Rows"].(float64)
		removed, _ := node["Rows Removed by Filter"].(float64)
		n += int(loops*rows + removed)
	}
	plans, _ := node["Plans"].([]any)
	for _, p := range plans {
		n += planRows(p.(map[string]any), relation)
	}
	return n
}
