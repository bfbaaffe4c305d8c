package postgres

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// cashDays of bank:client movements, cashPerDay a day (none at midnight),
// each a transaction of its own, chained in (xid, id) order.
const (
	cashDays   = 100
	cashPerDay = 1000
	cashBehind = 10 // transactions after the run's chain head
)

// The proof of cash reads the postings since the close and the
// transactions after the run's chain head, not bank:client's history, also
// once Postgres keeps a generic plan of CashAt's statement (a pool's
// connection does after its fifth run). Over 100 days of bank:client
// movements, a proof at the close of day 99 must read under a tenth of the
// postings' heap pages: with the transactions after the head joined to
// "postings of bank:client created by the close", the generic plan drove
// the join from postings_account_idx and read every bank:client posting up
// to the close (1 million postings: 10 313 pages, 7.4 s, against 106 pages
// and 125 ms planned for the run's values), inside the currency's run lock.
func TestCashAtReadsRecentRowsUnderAGenericPlan(t *testing.T) {
	ctx, pool, _ := migratedStore(t)
	day0 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at)
		select gen_random_uuid(), 'cash-plan-' || i, '\x00', 'deposit', at, at
		from (select i, $1::timestamptz + (i * interval '1 day' / $2) + interval '1 second' as at from generate_series(0, $3 - 1) i) x`,
		day0, cashPerDay, cashDays*cashPerDay); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
		select id, 0, $1, 'CNY', 'debit', 1.25, created_at from ledger.transactions
		union all select id, 1, 'renter:r-' || (created_at::time) || ':wallet', 'CNY', 'credit', 1.25, created_at from ledger.transactions`,
		domain.BankClient); err != nil {
		t.Fatal(err)
	}
	// The chain worker is a little behind the writers, as it always is.
	head := int64(cashDays*cashPerDay - cashBehind)
	if _, err := pool.Exec(ctx, `insert into ledger.journal_chain (position, tx_id, xid, prev_hash, hash)
		select position, id, xid, '\x00', '\x00' from (select row_number() over (order by xid, id) as position, id, xid from ledger.transactions) x
		where position <= $1`, head); err != nil {
		t.Fatal(err)
	}
	// A statement a day, closing at its end, each movement matched to a
	// line of its day's statement by one earlier run.
	if _, err := pool.Exec(ctx, `insert into ledger.bank_statements (statement_id, account, currency, format, statement_date, closing_at,
			opening_balance, closing_balance, line_count, content_sha256)
		select 'st-' || d, 'CN-CLIENT-1', 'CNY', 'csv', $1::date + d, $1::timestamptz + (d + 1) * interval '1 day', d * $2::int * 1.25, (d + 1) * $2::int * 1.25, $2::int, '\x00'
		from generate_series(0, $3 - 1) d`, day0, cashPerDay, cashDays); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.reconciliations (reconciliation_id, currency, trigger, created_at, journal_head_hash,
			journal_head_position, ledger_bank_client, verdict, matched_count, unmatched_bank_count, unmatched_ledger_count)
		values ('rec-history', 'CNY', 'schedule', $1, '00', $2::int, 0, 'reconciled', $2::int, 0, 0)`, day0.AddDate(0, 0, cashDays), cashDays*cashPerDay); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.reconciliation_items (reconciliation_id, item_no, status, statement_id, line_no, booked_on,
			reference, bank_amount, movement_kind, movement_key, ledger_amount, transaction_ids, recorded_at)
		select 'rec-history', row_number() over (order by created_at, id), 'matched', 'st-' || (created_at::date - $1::date), 1, created_at::date,
			idempotency_key, 1.25, 'deposit', idempotency_key, 1.25, array[id::text], created_at
		from ledger.transactions`, day0); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `vacuum analyze ledger.postings, ledger.transactions, ledger.journal_chain, ledger.bank_statements,
		ledger.reconciliation_items`); err != nil {
		t.Fatal(err)
	}
	generic := testkit.GenericPlanPool(t, ctx, pool)
	s := &Reconciliations{Pool: generic}
	closeAt := day0.AddDate(0, 0, cashDays-1)
	var fig domain.CashFigures
	touched := map[string]int64{}
	// Each table's pages read, one table counted per run.
	for _, table := range []string{"postings", "transactions", "reconciliation_items"} {
		touched[table] = testkit.HeapPagesRead(t, ctx, pool, generic, "ledger", table, func() {
			rd, err := s.BeginRun(ctx, "CNY")
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Rollback(ctx) //nolint:errcheck // read only
			if fig, err = rd.CashAt(ctx, closeAt, nil, head); err != nil {
				t.Fatal(err)
			}
		})
	}
	// No balance row: bank:client now is 0, less the postings after the
	// close and those of the transactions not chained.
	var want string
	if err := pool.QueryRow(ctx, `select (-sum(amount))::text from ledger.postings where account = $1
		and (created_at > $2 or tx_id not in (select tx_id from ledger.journal_chain))`, domain.BankClient, closeAt).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if !fig.Ledger.Equal(decimal.RequireFromString(want)) {
		t.Fatalf("bank:client at the close of day 99 is %s, want %s", fig.Ledger, want)
	}
	if want := "0"; fig.InBank.String() != want || fig.InLedger.String() != want {
		t.Fatalf("in transit at the close of day 99: +%s -%s, want +%s -%s (every item matched on its day)", fig.InBank, fig.InLedger, want, want)
	}
	for table, n := range touched {
		var pages int64
		if err := pool.QueryRow(ctx, `select relpages from pg_class where oid = ('ledger.' || $1)::regclass`, table).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		t.Logf("a proof of cash at the close of day 99 read %d of ledger.%s's %d heap pages", n, table, pages)
		if n > pages/10 {
			t.Errorf("a proof of cash at the close of day 99 read %d of ledger.%s's %d heap pages", n, table, pages)
		}
	}
}
