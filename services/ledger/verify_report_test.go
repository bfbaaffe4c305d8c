package ledger_test

import (
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/ledger"
)

// A recorded segregation breach is written once, like the journal: an
// update, a delete or a truncate is refused (each took a breach out of, or
// changed it in, every report auditors were given).
func TestRecordedBreachesAreImmutable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "100.00", "CNY", "d1")
	if _, err := f.app.CreateTransaction(f.ctx, transfer("fee", "renter:r-1:wallet", "platform:revenue:commission", "5.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`update ledger.segregation_breaches set amount = 0`,
		`delete from ledger.segregation_breaches`,
		`truncate ledger.segregation_breaches`,
	} {
		if _, err := f.pool.Exec(f.ctx, q); err == nil || !containsStr(err.Error(), "immutable") {
			t.Fatalf("%s: want refused as immutable, got %v", q, err)
		}
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.segregation_breaches where amount = 5`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after refused edits: %d breaches of 5.00 (%v), want 1", n, err)
	}
}

// Verify derives every recorded breach again from its transaction's
// postings: one removed, edited, or recorded for a transaction that breaches
// nothing (or is not in the journal) is named. Each passed verification.
func TestVerifyDetectsAlteredBreach(t *testing.T) {
	t.Parallel()
	const ghost = "01890000-0000-7000-8000-000000000002"
	for _, tc := range []struct {
		name   string
		tamper func(bad, clean string) string
		want   string
	}{
		{"removed", func(bad, _ string) string {
			return `delete from ledger.segregation_breaches where tx_id = '` + bad + `'`
		}, "0 breach(es) recorded for the transaction; its postings give 1"},
		{"edited", func(bad, _ string) string {
			return `update ledger.segregation_breaches set amount = 0.05 where tx_id = '` + bad + `'`
		}, "recorded breach 0 reads platform:revenue:commission 0.05 CNY"},
		{"invented", func(_, clean string) string {
			return `insert into ledger.segregation_breaches (tx_id, seq, account, currency, from_pool, to_pool, amount, reason, effective_at, created_at)
				select tx_id, 0, 'bank:operating', 'CNY', 'client', 'house', 1, 'x', now(), now() from ledger.postings where tx_id = '` + clean + `' limit 1`
		}, "1 breach(es) recorded for the transaction; its postings give 0"},
		{"of no transaction", func(_, _ string) string {
			return `insert into ledger.segregation_breaches (tx_id, seq, account, currency, from_pool, to_pool, amount, reason, effective_at, created_at)
				values ('` + ghost + `', 0, 'bank:operating', 'CNY', 'client', 'house', 1, 'x', now(), now())`
		}, "which is not in the journal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			clean := f.deposit(t, "r-1", "100.00", "CNY", "d1")
			bad, err := f.app.CreateTransaction(f.ctx, transfer("fee", "renter:r-1:wallet", "platform:revenue:commission", "5.00", "CNY"))
			if err != nil {
				t.Fatal(err)
			}
			chainAll(t, f)
			if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK || res.Checked != 2 {
				t.Fatalf("clean journal with a breach: %+v, %v", res, err)
			}
			for _, q := range []string{
				`alter table ledger.segregation_breaches disable trigger segregation_breaches_immutable`,
				tc.tamper(bad.ID, clean.ID),
				`alter table ledger.segregation_breaches enable trigger segregation_breaches_immutable`,
			} {
				if _, err := f.pool.Exec(f.ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			res, err := ledger.VerifyChain(f.ctx, f.pool)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK || res.BadReportRecord == "" || !containsStr(res.Reason, tc.want) {
				t.Fatalf("breach %s: %+v; want a report record named (%q)", tc.name, res, tc.want)
			}
		})
	}
}

// Verify recomputes every balance checkpoint from the postings up to it: a
// checkpoint balance edited, removed or added is named, and so is the
// first of two checkpoints when the second was built on the edited one.
// Each changed every as-of report starting from it and passed verification.
func TestVerifyDetectsAlteredCheckpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, tamper, want string }{
		{"edited", `update ledger.checkpoint_balances set net_debit = net_debit + 1000 where account = 'bank:client' and at = $1`,
			"holds a net debit of 1030.00 for bank:client in CNY; the postings up to it sum to 30.00"},
		{"removed", `delete from ledger.checkpoint_balances where account = 'renter:r-1:wallet' and at = $1`,
			"holds a net debit of 0 for renter:r-1:wallet in CNY; the postings up to it sum to -30.00"},
		{"added", `insert into ledger.checkpoint_balances (at, currency, account, net_debit) values ($1, 'CNY', 'renter:r-9:wallet', -500)`,
			"holds a net debit of -500 for renter:r-9:wallet in CNY; the postings up to it sum to 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewManual(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
			f := newFixtureAt(t, nil, clk)
			rp := f.svc.Reports()
			f.deposit(t, "r-1", "10", "CNY", "a")
			f.deposit(t, "r-1", "20", "CNY", "b")
			clk.Advance(time.Hour)
			first := clk.Now().Add(-time.Minute)
			if made, err := rp.Store.MakeCheckpoint(f.ctx, first); err != nil || !made {
				t.Fatalf("checkpoint: made %v, %v", made, err)
			}
			chainAll(t, f)
			if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
				t.Fatalf("clean ledger with a checkpoint: %+v, %v", res, err)
			}
			if _, err := f.pool.Exec(f.ctx, tc.tamper, first); err != nil {
				t.Fatal(err)
			}
			// The next checkpoint is built on the altered one, so agrees with it.
			f.deposit(t, "r-2", "5", "CNY", "c")
			clk.Advance(time.Hour)
			if made, err := rp.Store.MakeCheckpoint(f.ctx, clk.Now().Add(-time.Minute)); err != nil || !made {
				t.Fatalf("checkpoint: made %v, %v", made, err)
			}
			chainAll(t, f)
			res, err := ledger.VerifyChain(f.ctx, f.pool)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK || !containsStr(res.BadReportRecord, "checkpoint "+first.Format(time.RFC3339Nano)) || !containsStr(res.Reason, tc.want) {
				t.Fatalf("checkpoint %s: %+v; want the checkpoint at %s named (%q)", tc.name, res, first, tc.want)
			}
		})
	}
}

// A journal recorded before breaches were classified by kind (a finance
// entry of the sweep's shape recorded as no breach) verifies under the rule
// it was recorded by, as a snapshot of that version restored does; the
// backfill at start-up records the breach, and verify then applies the
// rule by kind. Verify named the old journal's entry "altered", and
// restore refused the snapshot.
func TestVerifyAppliesTheRuleTheBreachesWereRecordedUnder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "100.00", "CNY", "d1")
	sweep, err := f.app.CreateTransaction(f.ctx, transfer("finance-sweep", "bank:operating", "bank:client", "5.00", "CNY"))
	if err != nil {
		t.Fatal(err)
	}
	chainAll(t, f)
	// As the version before recorded it: no breach, no by-kind backfill.
	for _, q := range []string{
		`alter table ledger.segregation_breaches disable trigger segregation_breaches_immutable`,
		`delete from ledger.segregation_breaches where tx_id = '` + sweep.ID + `'`,
		`alter table ledger.segregation_breaches enable trigger segregation_breaches_immutable`,
		`delete from ledger.report_backfills where name = 'segregation_breaches_by_kind'`,
	} {
		if _, err := f.pool.Exec(f.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
		t.Fatalf("a journal recorded by shape, before migration 0019: %+v, %v; want ok", res, err)
	}
	// Migration 0019, then the start-up backfill.
	if _, err := f.pool.Exec(f.ctx, `insert into ledger.report_backfills (name) values ('segregation_breaches_by_kind')`); err != nil {
		t.Fatal(err)
	}
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
		t.Fatalf("migrated, not backfilled yet: %+v, %v; want ok", res, err)
	}
	// Every replica starting at once runs the backfill: one at a time (a
	// second one's COPY failed on the key, and with it its start).
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- f.svc.Reports().Store.BackfillBreaches(f.ctx) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.segregation_breaches where tx_id = $1`, sweep.ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("backfilled %d breaches of finance's sweep (%v), want 1", n, err)
	}
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
		t.Fatalf("backfilled: %+v, %v; want ok", res, err)
	}
	// Under the rule by kind a removed breach of that entry is named.
	for _, q := range []string{
		`alter table ledger.segregation_breaches disable trigger segregation_breaches_immutable`,
		`delete from ledger.segregation_breaches where tx_id = '` + sweep.ID + `'`,
		`alter table ledger.segregation_breaches enable trigger segregation_breaches_immutable`,
	} {
		if _, err := f.pool.Exec(f.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || res.OK || res.BadReportRecord == "" {
		t.Fatalf("the backfilled breach removed: %+v, %v; want it named", res, err)
	}
}
