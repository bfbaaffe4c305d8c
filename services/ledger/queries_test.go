package ledger_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

func TestListTransactionsPagination(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var want []string
	for i := 0; i < 7; i++ {
		tx := f.deposit(t, "r-1", "1", "USD", fmt.Sprintf("ref-%d", i))
		want = append(want, tx.ID)
		f.deposit(t, "r-2", "1", "USD", fmt.Sprintf("other-%d", i))
	}
	for _, account := range []string{"renter:r-1:wallet", ""} {
		var got []string
		tok := ""
		for pages := 0; ; pages++ {
			txs, next, err := f.app.ListTransactions(f.ctx, account, nil, 3, tok)
			if err != nil {
				t.Fatal(err)
			}
			for _, tx := range txs {
				if account == "" && tx.Postings[1].Account.Address != "renter:r-1:wallet" {
					continue
				}
				got = append(got, tx.ID)
			}
			if next == "" {
				break
			}
			tok = next
			if pages > 10 {
				t.Fatal("pagination does not end")
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("account %q: pages gave %v, want %v", account, got, want)
		}
	}
}

func TestListAccountsByPrefix(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, r := range []string{"r-1", "r-2", "r-3"} {
		f.deposit(t, r, "2", "USD", "dep-"+r)
	}
	if _, err := f.app.CreateTransaction(f.ctx, transfer("x", "renter:r-1:wallet", "provider:p-1:pending:cyc-20261112", "1", "USD")); err != nil {
		t.Fatal(err)
	}
	vs, next, err := f.app.ListAccounts(f.ctx, "renter:", nil, 2, "")
	if err != nil || len(vs) != 2 || next == "" || vs[0].Account.Address != "renter:r-1:wallet" || !vs[0].Balances[0].Amount.Equal(dec("1")) {
		t.Fatalf("page 1: %+v %q %v", vs, next, err)
	}
	// The token is bound to its prefix: under provider: it answered no
	// accounts and no next page, as if there were none.
	var inv *apperr.InvalidError
	if _, _, err := f.app.ListAccounts(f.ctx, "provider:", nil, 2, next); !errors.As(err, &inv) || inv.Violations[0].Field != "page_token" {
		t.Fatalf("renter:'s token under provider:: %v; want invalid page_token", err)
	}
	vs, next, err = f.app.ListAccounts(f.ctx, "renter:", nil, 2, next)
	if err != nil || len(vs) != 1 || next != "" || vs[0].Account.Address != "renter:r-3:wallet" {
		t.Fatalf("page 2: %+v %q %v", vs, next, err)
	}
	vs, _, err = f.app.ListAccounts(f.ctx, "provider:p-1:", nil, 0, "")
	if err != nil || len(vs) != 1 || vs[0].Account.Kind != domain.KindLiability || vs[0].Account.Pool != domain.PoolClient {
		t.Fatalf("provider accounts: %+v", vs)
	}
	// A prefix ending in U+007F or in a character whose last byte is 0xBF:
	// its upper bound moved the byte on, not UTF-8, and Postgres refused
	// it (a 500). Its accounts: none. Not text: a 400 on prefix.
	for _, p := range []string{"\x7f", "¿", "renter:r-1:¿", "renter:\U0010FFFF", "renter:\uD7FF"} {
		if vs, _, err := f.app.ListAccounts(f.ctx, p, nil, 0, ""); err != nil || len(vs) != 0 {
			t.Errorf("prefix %q: %d accounts, %v; want none", p, len(vs), err)
		}
	}
	for _, p := range []string{"renter:\xc0", "renter:\x00"} {
		var inv *apperr.InvalidError
		if _, _, err := f.app.ListAccounts(f.ctx, p, nil, 0, ""); !errors.As(err, &inv) || inv.Violations[0].Field != "prefix" {
			t.Errorf("prefix %q: %v; want invalid", p, err)
		}
	}
}

func TestSegregatedFundsReport(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	postAs := func(kind, key string, ps ...domain.RawPosting) *domain.Transaction {
		t.Helper()
		in := app.CreateTransactionInput{IdempotencyKey: key, Postings: ps}
		if kind != "" { // settlement's own movements, as the service posts them
			in.Metadata, in.Internal = map[string]string{"kind": kind, "cycle_id": "cyc-20261112", "provider_id": "p-1"}, true
		}
		tx, err := f.app.CreateTransaction(f.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	post := func(key string, ps ...domain.RawPosting) *domain.Transaction {
		t.Helper()
		return postAs("", key, ps...)
	}
	p := func(acc, dir, amt string) domain.RawPosting {
		return domain.RawPosting{Account: acc, Direction: dir, Amount: amt, Currency: "CNY"}
	}
	f.deposit(t, "r-1", "1000", "CNY", "d1")
	const pending = "provider:p-1:pending:cyc-20261112"
	post("charge-1", p("renter:r-1:wallet", "debit", "400"), p(pending, "credit", "400"))
	post("charge-2", p("renter:r-2:wallet", "debit", "50"), p(pending, "credit", "50")) // r-2 in debit
	// Settlement of 450: commission 90, tax 72, net 288; then the sweep.
	postAs("settlement", "settle", p(pending, "debit", "450"), p("platform:revenue:commission", "credit", "90"),
		p("tax:withheld:CN", "credit", "72"), p("provider:p-1:available", "credit", "288"))
	postAs("commission_sweep", "sweep", p("bank:operating", "debit", "90"), p("bank:client", "credit", "90"))
	cleanAt := clk.Now()
	clk.Advance(time.Second)

	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	// requirement = 600 (r-1; r-2's -50 does not offset) + 0 pending + 288 available; tax 72; resource 910.
	// 910 - (888 + 72) = -50: the renter's debt is a shortfall the house must fund.
	if !rep.Requirement.Equal(dec("888")) || !rep.TaxWithheld.Equal(dec("72")) || !rep.Resource.Equal(dec("910")) ||
		!rep.Difference.Equal(dec("-50")) || rep.Verdict != app.VerdictShortfall || len(rep.Breaches) != 0 {
		t.Fatalf("report: %+v", rep)
	}
	// The house funds the debt: bank:operating → bank:client would be a breach;
	// the proper way is a top-up by the renter.
	f.deposit(t, "r-2", "50", "CNY", "d2")
	// The bank's statement of 2026-11-20 (closing at the day's end) agrees.
	clk.Advance(24 * time.Hour)
	if _, err := f.svc.Statements().Import(f.ctx, app.ImportStatementInput{StatementID: "st-1120", Currency: "CNY", Account: "CN-CLIENT-1",
		Content: "date,reference,amount,balance\n2026-11-20,d2,50.00,960.00\n"}); err != nil {
		t.Fatal(err)
	}
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || rep.Verdict != app.VerdictBalanced || !rep.Difference.IsZero() || rep.BankStatementBalance == nil || !rep.BankStatementBalance.Equal(dec("960")) {
		t.Fatalf("after top-up: %+v", rep)
	}
	// A breach: commission taken straight out of a renter wallet.
	bad := post("fee", p("renter:r-1:wallet", "debit", "5"), p("platform:revenue:commission", "credit", "5"))
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil || len(rep.Breaches) != 1 || rep.Breaches[0].TransactionID != bad.ID || rep.Breaches[0].FromPool != domain.PoolClient {
		t.Fatalf("breaches: %+v", rep.Breaches)
	}
	// As of before the breach: none, and the earlier figures.
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, &cleanAt, "CNY")
	if err != nil || len(rep.Breaches) != 0 || !rep.Difference.Equal(dec("-50")) {
		t.Fatalf("as of %s: %+v", cleanAt, rep)
	}
	chainAll(t, f)
	rep, err = f.svc.Reports().SegregatedFunds(f.ctx, nil, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	chain, err := ledger.VerifyChain(f.ctx, f.pool)
	if err != nil || !chain.OK || rep.JournalHeadHash != chain.HeadHash || rep.JournalHeadHash == strings.Repeat("0", 64) {
		t.Fatalf("journal head hash %q, want the verified chain's head %+v (%v)", rep.JournalHeadHash, chain, err)
	}
	if _, err := f.svc.Reports().SegregatedFunds(f.ctx, nil, ""); !isInvalid(err) {
		t.Fatalf("no currency: %v", err)
	}
}

// TestListTransactionsLateCommit: a transaction takes its id and created_at
// before it commits, so it can commit after a page past it was read; the
// next page starts with it, and a listing paged to its end holds every
// transaction once (it fell behind the page token and was never listed).
func TestListTransactionsLateCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	early := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	for i := 0; i < 7; i++ {
		f.deposit(t, "r-1", "1", "USD", fmt.Sprintf("ref-%d", i))
	}
	for i, account := range []string{"renter:r-1:wallet", ""} {
		// The late transaction: the smallest id and an hour-old created_at,
		// written before the first page is read, committed after it.
		lateID := fmt.Sprintf("00000000-0000-7000-8000-00000000000%d", i)
		held, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Rollback(f.ctx) }() // after a failure: the pool's close waits for it
		if _, err := held.Exec(f.ctx, `insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at)
			values ($1::uuid, $1::text, '\x00', 'manual', $2, $2)`, lateID, early); err != nil {
			t.Fatal(err)
		}
		if _, err := held.Exec(f.ctx, `insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
			values ($1::uuid, 0, 'bank:client', 'USD', 'debit', 1, $2), ($1::uuid, 1, 'renter:r-1:wallet', 'USD', 'credit', 1, $2)`, lateID, early); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		tok := ""
		for pages := 0; ; pages++ {
			txs, next, err := f.app.ListTransactions(f.ctx, account, nil, 3, tok)
			if err != nil {
				t.Fatal(err)
			}
			if pages == 0 {
				if err := held.Commit(f.ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, tx := range txs {
				seen[tx.ID]++
			}
			if next == "" {
				break
			}
			tok = next
			if pages > 10 {
				t.Fatal("pagination does not end")
			}
		}
		var all []string
		if err := pgxscan(f, &all, `select distinct tx_id::text from ledger.postings where account = 'renter:r-1:wallet'`); err != nil {
			t.Fatal(err)
		}
		for _, id := range all {
			if seen[id] != 1 {
				t.Errorf("account %q: transaction %s listed %d times, want once", account, id, seen[id])
			}
		}
	}
}

// TestListTransactionsForgedSnapshot: pkg/cursor's check is no secret, so a
// caller can write any page token. One whose snapshot has seen nothing
// ("1:0:") at the end of the listing made every transaction of the journal
// late: the late part read the whole journal and answered every one of the
// account's transactions in one page, whatever page_size said. A page
// holds at most page_size, refused or not, and reads a small part of the
// journal.
func TestListTransactionsForgedSnapshot(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const txs = 20000
	bulkDeposits(t, f, "renter:r-1:wallet", txs)
	on := testkit.GenericPlanPool(t, f.ctx, f.pool) // one connection, the plan a busy pool keeps
	one := app.New(postgres.NewStore(on), clock.System{}, cycles.Default(), slog.Default())
	var heapPages int64
	if err := f.pool.QueryRow(f.ctx, `select pg_relation_size('ledger.transactions') / current_setting('block_size')::int`).Scan(&heapPages); err != nil {
		t.Fatal(err)
	}
	end := cursor.FormatTime(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
	for _, tc := range []struct{ account, token string }{
		{"renter:r-1:wallet", cursor.Encode(cursor.Scoped("ledger.account_transactions", "renter:r-1:wallet"), end, maxUUID, "1:0:")},
		{"", cursor.Encode("ledger.transactions", maxUUID, "1:0:")},
	} {
		var got []*domain.Transaction
		var err error
		read := testkit.HeapPagesRead(t, f.ctx, f.pool, on, "ledger", "transactions", func() {
			got, _, err = one.ListTransactions(f.ctx, tc.account, nil, 10, tc.token)
		})
		if err != nil && !isInvalid(err) {
			t.Fatalf("account %q: %v, want a page or a 400", tc.account, err)
		}
		if len(got) > 10 {
			t.Errorf("account %q: a forged token's page holds %d transactions, want at most page_size 10", tc.account, len(got))
		}
		if read > heapPages/10 {
			t.Errorf("account %q: a page read %d of the journal's %d heap pages", tc.account, read, heapPages)
		}
	}
	// A snapshot the journal has not had yet (xmax ahead of the present):
	// refused, not read as one that has seen everything.
	future := cursor.Encode("ledger.transactions", maxUUID, "4000000000:0:")
	var inv *apperr.InvalidError
	if _, _, err := f.app.ListTransactions(f.ctx, "", nil, 10, future); !errors.As(err, &inv) || inv.Violations[0].Field != "page_token" {
		t.Errorf("a token of a snapshot ahead of the present: %v, want a 400 on page_token", err)
	}
}

// TestListTransactionsLateRun: more transactions committed late than a
// page holds are listed over several pages (the token carries the rest),
// each once, a transaction still running while they are listed included
// once it commits.
func TestListTransactionsLateRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const account = "renter:r-1:wallet"
	f.deposit(t, "r-1", "1", "USD", "seen")
	for i, listing := range []string{cursor.Scoped("ledger.account_transactions", account), "ledger.transactions"} {
		var seen string
		if err := f.pool.QueryRow(f.ctx, `select pg_current_snapshot()::text`).Scan(&seen); err != nil {
			t.Fatal(err)
		}
		// Written after seen, committed after the first page.
		held, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Rollback(f.ctx) }()
		heldID := fmt.Sprintf("00000000-0000-7000-8000-00000000000%d", i)
		if _, err := held.Exec(f.ctx, `insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at)
			values ($1::uuid, $1::text, '\x00', 'manual', now() - interval '1 hour', now() - interval '1 hour')`, heldID); err != nil {
			t.Fatal(err)
		}
		if _, err := held.Exec(f.ctx, `insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
			values ($1::uuid, 0, 'bank:client', 'USD', 'debit', 1, now() - interval '1 hour'), ($1::uuid, 1, $2, 'USD', 'credit', 1, now() - interval '1 hour')`, heldID, account); err != nil {
			t.Fatal(err)
		}
		want := bulkDeposits(t, f, account, 45)
		want = append(want, heldID)
		end := cursor.FormatTime(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
		tok := cursor.Encode(listing, end, maxUUID, packedSnapshot(t, seen))
		filter := account
		if i == 1 {
			tok = cursor.Encode(listing, maxUUID, packedSnapshot(t, seen))
			filter = ""
		}
		listed := map[string]int{}
		for pages := 0; tok != ""; pages++ {
			txs, next, err := f.app.ListTransactions(f.ctx, filter, nil, 10, tok)
			if err != nil {
				t.Fatal(err)
			}
			if len(txs) > 10 {
				t.Fatalf("listing %d: page %d holds %d transactions, want at most 10", i, pages, len(txs))
			}
			if pages == 0 {
				if err := held.Commit(f.ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, tx := range txs {
				listed[tx.ID]++
			}
			if tok = next; pages > 20 {
				t.Fatal("pagination does not end")
			}
		}
		for _, id := range want {
			if listed[id] != 1 {
				t.Errorf("listing %d: transaction %s listed %d times, want once", i, id, listed[id])
			}
		}
		if len(listed) != len(want) {
			t.Errorf("listing %d: %d transactions listed, want the %d committed after the token's snapshot", i, len(listed), len(want))
		}
	}
}

const maxUUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"

// bulkDeposits writes n transactions crediting account an hour ago in one
// Postgres transaction (straight into the tables: a journal of thousands
// in a second) and returns their ids.
func bulkDeposits(t testing.TB, f *fixture, account string, n int) []string {
	t.Helper()
	var ids []string
	if err := pgxscan(f, &ids, fmt.Sprintf(`with tx as (
		insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at)
		select gen_random_uuid(), 'bulk-' || gen_random_uuid(), '\x00', 'manual', now() - interval '1 hour', now() - interval '1 hour'
		from generate_series(1, %d) returning id, created_at),
	p as (insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
		select id, i, case i when 0 then 'bank:client' else '%s' end, 'USD', case i when 0 then 'debit' else 'credit' end, 1, created_at
		from tx, generate_series(0, 1) i)
	select id::text from tx`, n, account)); err != nil {
		t.Fatal(err)
	}
	return ids
}

// packedSnapshot is pg_snapshot text in a page token's form: xmax and the
// running ids as offsets from xmin.
func packedSnapshot(t testing.TB, s string) string {
	t.Helper()
	parts := strings.Split(s, ":")
	xmin, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	xmax, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var xip []string
	for _, x := range strings.Split(parts[2], ",") {
		if x == "" {
			continue
		}
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		xip = append(xip, strconv.FormatUint(n-xmin, 10))
	}
	return fmt.Sprintf("%d:%d:%s", xmin, xmax-xmin, strings.Join(xip, ","))
}

func pgxscan(f *fixture, out *[]string, q string) error {
	rows, err := f.pool.Query(f.ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		*out = append(*out, s)
	}
	return rows.Err()
}

// A statement's lines come from a provider's pending account only (a
// wallet is a 400); GPU hours that are not a plain decimal count as none.
func TestStatementLinesOfAPendingAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var inv *apperr.InvalidError
	if _, err := f.app.StatementLines(f.ctx, "renter:r-1:wallet", "CNY", nil); !errors.As(err, &inv) || inv.Violations[0].Field != "account" {
		t.Fatalf("a wallet: %v, want invalid account", err)
	}
	if _, err := f.app.StatementLines(f.ctx, "provider:p-1:pending:cyc-20261112", "CNY", []string{"x"}); !errors.As(err, &inv) {
		t.Fatalf("an excluded id that is no transaction id: %v, want invalid", err)
	}
	f.deposit(t, "r-1", "100", "CNY", "d1")
	const pending = "provider:p-1:pending:cyc-20261112"
	for i, hours := range []string{"1.5", "two", "0.5"} {
		in := transfer(fmt.Sprintf("c-%d", i), "renter:r-1:wallet", pending, "1.00", "CNY")
		in.Metadata = map[string]string{"lease_id": "l-1", "renter_id": "r-1", "gpu_model": "H100", "gpu_hours": hours}
		if _, err := f.app.CreateTransaction(f.ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := f.app.StatementLines(f.ctx, pending, "CNY", nil)
	if err != nil || len(ls) != 1 || ls[0].GPUHours == nil || !ls[0].GPUHours.Equal(dec("2")) || !ls[0].Amount.Equal(dec("3")) || ls[0].Postings != 3 {
		t.Fatalf("lines %+v, %v; want one of 3.00 over 3 postings, 2 GPU hours", ls, err)
	}
}
