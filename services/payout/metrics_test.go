package payout

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
	"github.com/gpubill/gpubill/services/payout/internal/ports"
)

// A payout that joined a later one counts in that one only: its net was
// counted as canceled too, money read as stranded in available beside the
// payout that paid it.
func TestPayoutAmountCountsAJoinedPayoutOnce(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net,
			status, absorbed_into, created_at, updated_at) values
		('po-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'canceled', 'po-2', now(), now()),
		('po-2', 'p-1', 'cyc-20260215', 'CNY', 300, 75, 45, 180, 'paid', '', now(), now()),
		('po-3', 'p-2', 'cyc-20260101', 'CNY', 50, 12.5, 7.5, 30, 'canceled', '', now(), now())`); err != nil {
		t.Fatal(err)
	}
	var query string
	for _, m := range Metrics() {
		if m.Name == "gpubill_payout_amount" {
			query = m.Query
		}
	}
	rows, err := pool.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for rows.Next() {
		var status, currency string
		var v float64
		if err := rows.Scan(&status, &currency, &v); err != nil {
			t.Fatal(err)
		}
		got[status+" "+currency] = v
	}
	if rows.Err() != nil || len(got) != 2 || got["paid CNY"] != 180 || got["canceled CNY"] != 30 {
		t.Fatalf("gpubill_payout_amount: %v (%v); want paid 180 and canceled 30 (po-1's 60 is in po-2)", got, rows.Err())
	}
}

// The bank-file rail's loop only logged a cutoff it could not build, a
// file it could not deliver and results it could not import: their ages
// are on /metrics for the alerts.
func TestBankRailAges(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	metric := func(name string) float64 { t.Helper(); return testkit.SQLMetric(t, pool, Metrics(), name) }
	names := []string{"gpubill_bank_transfers_queued_age_seconds", "gpubill_bank_batches_undelivered_age_seconds", "gpubill_bank_transfers_unsettled_age_seconds"}
	for _, n := range names {
		if v := metric(n); v != 0 {
			t.Fatalf("%s of an empty rail: %v, want 0", n, v)
		}
	}
	for _, q := range []string{
		`insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name, creditor_account,
			creditor_agent, state, queued_at, updated_at) values
			('po-q', 'po-q', 'p-1', 'CNY', 64, 'P One', '6222000011110001', 'ICBKCNBJ', 'queued', now() - interval '2 days', now()),
			('po-b', 'po-b', 'p-1', 'CNY', 64, 'P One', '6222000011110001', 'ICBKCNBJ', 'batched', now() - interval '7 days', now() - interval '6 days')`,
		`insert into payout.bank_batches (batch_id, cutoff_at, execution_date, transfers, control_sum, file, file_sha256, created_at)
			values ('pb-1', now() - interval '3 hours', current_date, 1, 64, 'x', 'h', now() - interval '2 hours')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for n, want := range map[string]float64{names[0]: 2 * 86400, names[1]: 2 * 3600, names[2]: 6 * 86400} {
		if v := metric(n); v < want || v > want+600 {
			t.Errorf("%s: %v, want about %v", n, v, want)
		}
	}
}

// A batch asks the bank for its execution date, which holidays push out
// (a cut on 30 September executes on 8 October): its results are awaited
// from that date, not from the day it was sent, or the ticket opened in
// the middle of the holiday for a bank that had done nothing wrong.
func TestBankResultsAwaitedFromTheExecutionDate(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	const name = "gpubill_bank_transfers_unsettled_age_seconds"
	for _, q := range []string{
		`insert into payout.bank_batches (batch_id, cutoff_at, execution_date, transfers, control_sum, file, file_sha256, created_at)
			values ('pb-h', now() - interval '6 days', current_date + 2, 1, 64, 'x', 'h', now() - interval '6 days'),
			('pb-o', now() - interval '9 days', current_date - 7, 1, 64, 'x', 'h', now() - interval '9 days')`,
		`insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name, creditor_account,
			creditor_agent, state, batch_id, queued_at, updated_at) values
			('po-h', 'po-h', 'p-1', 'CNY', 64, 'P One', '6222000011110001', 'ICBKCNBJ', 'accepted', 'pb-h', now() - interval '6 days', now() - interval '6 days')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Errorf("%s of a transfer accepted 6 days ago, executing in 2 days: %v, want 0", name, v)
	}
	if _, err := pool.Exec(ctx, `insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name,
		creditor_account, creditor_agent, state, batch_id, queued_at, updated_at) values
		('po-o', 'po-o', 'p-1', 'CNY', 64, 'P One', '6222000011110001', 'ICBKCNBJ', 'accepted', 'pb-o', now() - interval '9 days', now() - interval '8 days')`); err != nil {
		t.Fatal(err)
	}
	// Executed 7 days ago (midnight UTC), accepted 8 days ago: 7 days and
	// the part of today gone.
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 7*86400 || v > 8*86400 {
		t.Errorf("%s of a transfer executed 7 days ago: %v, want 7 to 8 days", name, v)
	}
}

// The entries not applied are served from 0 for each outcome: absent
// before the first one, the first one (a booked reversal of a paid
// payout) raised no alert (GpubillBankFileEntriesNotApplied compares with
// an hour before).
func TestBankFileEntriesNotAppliedFromZero(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	var query string
	for _, m := range Metrics() {
		if m.Name == "gpubill_bank_file_entries_not_applied" {
			query = m.Query
		}
	}
	rows, err := pool.Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for rows.Next() {
		var outcome string
		var v float64
		if err := rows.Scan(&outcome, &v); err != nil {
			t.Fatal(err)
		}
		got[outcome] = v
	}
	want := map[string]float64{"conflict": 0, "unknown_reference": 0, "amount_mismatch": 0, "review": 0, "lost_batch": 0, "unreadable": 0}
	if rows.Err() != nil || !maps.Equal(got, want) {
		t.Fatalf("gpubill_bank_file_entries_not_applied of no entries: %v (%v); want %v", got, rows.Err(), want)
	}
}

// A bank transfer held for finance's review after a restore is sent to no
// bank until resolved: how long the oldest has waited is on /metrics for
// an alert (a resolved review does not count).
func TestBankTransfersInReviewAge(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	const name = "gpubill_bank_transfers_review_age_seconds"
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Fatalf("%s of an empty rail: %v, want 0", name, v)
	}
	for _, q := range []string{
		`insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name, creditor_account,
			creditor_agent, state, queued_at, updated_at) values
			('po-r', 'po-r', 'p-1', 'CNY', 64, 'P One', '6222000011110001', 'ICBKCNBJ', 'review', now() - interval '2 days', now() - interval '5 hours'),
			('po-b', 'po-b', 'p-1', 'CNY', 64, 'P One', '6222000011110001', 'ICBKCNBJ', 'booked', now() - interval '2 days', now())`,
		`insert into payout.bank_transfer_reviews (reference, cause, note, since) values ('po-r', 'lost_batch', 'x', now() - interval '5 hours')`,
		`insert into payout.bank_transfer_reviews (reference, cause, note, since, resolution, paid_amount, resolved_by, resolved_at)
			values ('po-b', 'amount_mismatch', 'x', now() - interval '3 days', 'paid', 64, 'finance', now())`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if v, want := testkit.SQLMetric(t, pool, Metrics(), name), 5*3600.0; v < want || v > want+600 {
		t.Errorf("%s: %v, want about %v (po-r's; po-b's review is resolved)", name, v, want)
	}
}

// A payout its rail keeps refusing as malformed stays created and
// submitting, its net in in_transit; one whose rail never answers with an
// outcome stays submitted or in transit. Only the log showed either: their
// ages are on /metrics for the alerts.
func TestPayoutStuckAtItsRailAges(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	metric := func(name string) float64 { t.Helper(); return testkit.SQLMetric(t, pool, Metrics(), name) }
	for _, n := range []string{"gpubill_payout_submitting_age_seconds", "gpubill_payout_in_flight_age_seconds"} {
		if v := metric(n); v != 0 {
			t.Fatalf("%s with no payouts: %v, want 0", n, v)
		}
	}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net,
			status, submitting, submitting_since, created_at, updated_at) values
		('po-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', true, now() - interval '2 hours', now() - interval '3 days', now() - interval '3 days'),
		('po-2', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', false, null, now() - interval '9 days', now() - interval '9 days'),
		('po-3', 'p-3', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'in_transit', false, now() - interval '5 days', now() - interval '4 days', now() - interval '4 days'),
		('po-4', 'p-4', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'paid', false, null, now() - interval '30 days', now() - interval '30 days')`); err != nil {
		t.Fatal(err)
	}
	if v := metric("gpubill_payout_submitting_age_seconds"); v < 2*3600 || v > 2*3600+60 {
		t.Errorf("submitting age %v, want ~2 h (po-1 passed the gate 2 h ago; po-2 waits at it)", v)
	}
	if v := metric("gpubill_payout_in_flight_age_seconds"); v < 4*86400 || v > 4*86400+60 {
		t.Errorf("in-flight age %v, want ~4 days (po-3)", v)
	}
}

// A restore holds the bank-file rail until finance releases it: no payout
// to a bank goes out meanwhile, and only the log said so once. The hold's
// age is on /metrics for an alert; 0 when none is open.
func TestBankFilesHeldAge(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	const name = "gpubill_bank_files_held_age_seconds"
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Fatalf("%s never held: %v, want 0", name, v)
	}
	if _, err := pool.Exec(ctx, `insert into payout.bank_file_holds (held_since, released_at, released_by) values (now() - interval '3 days', now() - interval '2 days', 'finance');
		insert into payout.bank_file_holds (held_since) values (now() - interval '5 hours')`); err != nil {
		t.Fatal(err)
	}
	if v, want := testkit.SQLMetric(t, pool, Metrics(), name), float64(5*3600); v < want || v > want+600 {
		t.Errorf("%s held 5 h (an earlier hold released): %v, want about %v", name, v, want)
	}
	if _, err := pool.Exec(ctx, `update payout.bank_file_holds set released_at = now(), released_by = 'finance' where released_at is null`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Errorf("%s released: %v, want 0", name, v)
	}
}

// A payout whose gate ran on a replica of a version before migration
// payout/0014 (a rolling upgrade) was marked submitting by that version's
// SQL, which sets no submitting_since: min() skipped its NULL and the gauge
// read 0 for the payout stuck longest, and SetSubmitting never runs again
// for it. Marked again by that SQL after a retry, a payout kept its earlier
// attempt's time.
func TestPayoutMarkedSubmittingByAnEarlierVersionAges(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	const name = "gpubill_payout_submitting_age_seconds"
	// The earlier version's SetSubmitting, as it ran.
	const earlierSetSubmitting = `update payout.payouts set submitting = true, method = $2, version = version + 1
		where payout_id = $1`
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net,
			status, submitting, submitting_since, created_at, updated_at) values
		('po-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', false, null, now() - interval '3 days', now() - interval '3 days'),
		('po-2', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', false, now() - interval '10 days', now() - interval '11 days', now() - interval '1 day')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, earlierSetSubmitting, "po-1", "bank"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `update payout.payouts set submitting_since = submitting_since - interval '2 hours' where payout_id = 'po-1'`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 2*3600 || v > 2*3600+60 {
		t.Errorf("%s: %v, want ~2 h (po-1 marked submitting by the earlier version 2 h ago)", name, v)
	}
	if _, err := pool.Exec(ctx, earlierSetSubmitting, "po-2", "bank"); err != nil { // its retry's gate; its first attempt's was 10 days ago
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 2*3600 || v > 2*3600+60 {
		t.Errorf("%s: %v, want ~2 h (po-2's retry marked submitting now, its first attempt 10 days ago)", name, v)
	}
	// A statement that sets the time itself (SetSubmitting) keeps it.
	if _, err := pool.Exec(ctx, `update payout.payouts set submitting = false where payout_id = 'po-2';
		update payout.payouts set submitting = true, submitting_since = now() - interval '5 hours' where payout_id = 'po-2'`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 5*3600 || v > 5*3600+60 {
		t.Errorf("%s: %v, want ~5 h (po-2 marked submitting 5 h ago by a statement that says so)", name, v)
	}
}

// The gate passing a payout that waited at it (action_required to created)
// marks it submitting through Move, which set no submitting_since: the
// gauge read 0 for it, as for one marked by an earlier version. Sent back
// to the gate by the ledger and passed again, it kept its first passing's
// time.
func TestPayoutPassingTheGateFromWaitingAges(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	const name = "gpubill_payout_submitting_age_seconds"
	s := &postgres.Store{Pool: pool}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net,
			status, method, workflow_started, version, created_at, updated_at)
		values ('po-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'action_required', '', true, 1, now() - interval '3 days', now() - interval '3 days')`); err != nil {
		t.Fatal(err)
	}
	// move is what Prepare (passing the gate) and backToGate (the ledger
	// refused) do to the payout.
	move := func(to string, submitting bool) {
		t.Helper()
		if err := s.Update(ctx, func(tx app.Tx) error {
			p, err := tx.Lock(ctx, "po-1")
			if err != nil {
				return err
			}
			p.Method, p.Submitting = "bank", submitting
			return tx.Move(ctx, &p, to, "test", time.Now())
		}); err != nil {
			t.Fatal(err)
		}
	}
	age := func(by string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `update payout.payouts set submitting_since = submitting_since - $1::interval where payout_id = 'po-1'`, by); err != nil {
			t.Fatal(err)
		}
	}
	move(domain.StatusCreated, true)
	age("2 hours")
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 2*3600 || v > 2*3600+60 {
		t.Errorf("%s: %v, want ~2 h (po-1 passed the gate from action_required 2 h ago)", name, v)
	}
	move(domain.StatusActionRequired, false)
	age("10 days")
	move(domain.StatusCreated, true)
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v > 60 {
		t.Errorf("%s: %v, want ~0 (po-1 passed the gate again just now)", name, v)
	}
}

// Migration payout/0020 dates the payouts marked submitting without a time
// (by a version before payout/0014, or by the gate's Move) or with an
// earlier attempt's: the time the payout last changed before the gate,
// the earliest the gate can have passed it. The gauge read 0 for them.
func TestMigrationDatesPayoutsSubmittingWithoutATime(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	ctx := context.Background()
	if err := pg.Migrate(ctx, pool, "payout", migrationsBefore(t, migrations.For("payout"), "0020_")); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net,
			status, submitting, submitting_since, created_at, updated_at) values
		('po-null', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', true, null, now() - interval '4 days', now() - interval '3 days'),
		('po-stale', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', true, now() - interval '10 days', now() - interval '11 days', now() - interval '1 day'),
		('po-set', 'p-3', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', true, now() - interval '2 hours', now() - interval '2 days', now() - interval '1 day'),
		('po-waits', 'p-4', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', false, null, now() - interval '9 days', now() - interval '9 days'),
		('po-sent', 'p-5', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'in_transit', true, null, now() - interval '9 days', now() - interval '8 days')`); err != nil {
		t.Fatal(err)
	}
	var want map[string]*time.Time
	if err := pool.QueryRow(ctx, `select jsonb_object_agg(payout_id, case payout_id when 'po-null' then updated_at when 'po-stale' then updated_at
			when 'po-set' then submitting_since end) from payout.payouts`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(ctx, pool, "payout", migrations.For("payout")); err != nil {
		t.Fatal(err)
	}
	var got map[string]*time.Time
	if err := pool.QueryRow(ctx, `select jsonb_object_agg(payout_id, submitting_since) from payout.payouts`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		if g := got[id]; (g == nil) != (w == nil) || g != nil && !g.Equal(*w) {
			t.Errorf("%s: submitting_since %v, want %v", id, g, w)
		}
	}
	if v, w := testkit.SQLMetric(t, pool, Metrics(), "gpubill_payout_submitting_age_seconds"), float64(3*86400); v < w || v > w+60 {
		t.Errorf("submitting age %v, want ~3 days (po-null)", v)
	}
}

// migrationsBefore is the migrations of fsys named before name: a schema as
// an earlier version left it.
func migrationsBefore(t *testing.T, fsys fs.FS, name string) fs.FS {
	t.Helper()
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	before := fstest.MapFS{}
	for _, f := range files {
		if f >= name {
			continue
		}
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			t.Fatal(err)
		}
		before[f] = &fstest.MapFile{Data: b}
	}
	return before
}

// A payout flagged rail_amount_mismatch stays submitted until finance
// resolves it: GpubillPayoutRailAmountMismatch pages for it. Counted as
// in flight too, it fired GpubillPayoutInFlightLong five days later, telling
// finance to ask the rail about a reference whose answer is known.
func TestPayoutFlaggedRailAmountMismatchIsNotInFlight(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(context.Background(), `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, workflow_started, created_at, updated_at) values
		('po-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'submitted', 'rail_amount_mismatch', true, now() - interval '9 days', now() - interval '9 days'),
		('po-2', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'in_transit', '', true, now() - interval '2 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), "gpubill_payout_in_flight_age_seconds"); v < 2*86400 || v > 2*86400+60 {
		t.Errorf("in-flight age %v, want ~2 days (po-2; po-1 is flagged rail_amount_mismatch)", v)
	}
}

// A payout whose workflow the starter never started (Temporal unreachable,
// the starter failing) waits created or action_required, moved by nothing;
// only the starter's WARN log said so. Its age is on /metrics for
// GpubillPayoutNotStarted; started ones, whatever their age, do not count.
func TestPayoutWorkflowNotStartedAges(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	const name = "gpubill_payout_workflow_unstarted_age_seconds"
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Fatalf("%s with no payouts: %v, want 0", name, v)
	}
	if _, err := pool.Exec(context.Background(), `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, workflow_started, created_at, updated_at) values
		('po-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', false, now() - interval '2 hours', now() - interval '2 hours'),
		('po-2', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'created', true, now() - interval '9 days', now() - interval '9 days')`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 2*3600 || v > 2*3600+60 {
		t.Errorf("%s %v, want ~2 h (po-1; po-2's workflow runs)", name, v)
	}
}

// A payout canceled in the bank-file queue whose return the ledger has not
// taken (the ledger down at the cancel, the process gone before its post,
// its workflow gone) read canceled, its net in in_transit, counted by no
// gauge: GpubillPayoutInFlightLong counts submitted and in transit only.
// Its age since the cancel is on /metrics (GpubillPayoutCancelNotReturned);
// one whose return is recorded, or canceled before submission (nothing
// moved), does not count.
func TestPayoutCanceledInQueueUnpostedAges(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	const name = "gpubill_payout_cancel_unposted_age_seconds"
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Fatalf("%s with no payouts: %v, want 0", name, v)
	}
	if _, err := pool.Exec(context.Background(), `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, rail_reference, cancel_posted_at, workflow_started, created_at, updated_at) values
		('po-1', 'p-1', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'canceled', 'po-1', null, true, now() - interval '3 hours', now() - interval '2 hours'),
		('po-2', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'canceled', 'po-2', now() - interval '9 days', true, now() - interval '9 days', now() - interval '9 days'),
		('po-3', 'p-3', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'canceled', '', null, true, now() - interval '9 days', now() - interval '9 days')`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 2*3600 || v > 2*3600+60 {
		t.Errorf("%s %v, want ~2 h (po-1, since its cancel; po-2's return is posted, po-3 moved nothing)", name, v)
	}
}

// Migration payout/0026 left every payout canceled in the queue before it
// unrecorded (cancel_posted_at null) and restarted its workflow, which
// posts and records the return within seconds of the upgrade. Aged from
// its cancel (updated_at, weeks ago), the gauge read weeks from the
// upgrade's first scrape, and GpubillPayoutCancelNotReturned (> 1 h, no
// for:) paged finance before the workflows posted, the more so with the
// ledger restarting in the same upgrade. Aged from the upgrade, such a
// payout counts as one canceled then; one canceled since still ages from
// its cancel.
func TestPayoutCanceledInQueueBeforeTheMigrationAgesFromIt(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	ctx := context.Background()
	const name = "gpubill_payout_cancel_unposted_age_seconds"
	if err := pg.Migrate(ctx, pool, "payout", migrationsBefore(t, migrations.For("payout"), "0026_")); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, rail_reference, workflow_started, created_at, updated_at) values
		('po-old', 'p-1', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'canceled', 'po-old', true, now() - interval '21 days', now() - interval '20 days')`); err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(ctx, pool, "payout", migrations.For("payout")); err != nil {
		t.Fatal(err)
	}
	var restarted bool
	if err := pool.QueryRow(ctx, `select not workflow_started from payout.payouts where payout_id = 'po-old'`).Scan(&restarted); err != nil || !restarted {
		t.Fatalf("po-old's workflow marked to start again: %v, %v; want true (migration payout/0026)", restarted, err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v > 60 {
		t.Errorf("%s just after the upgrade: %v, want ~0 (po-old, canceled 20 days ago, unposted since the upgrade)", name, v)
	}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, rail_reference, workflow_started, created_at, updated_at) values
		('po-new', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'canceled', 'po-new', true, now() - interval '3 hours', now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 2*3600 || v > 2*3600+60 {
		t.Errorf("%s %v, want ~2 h (po-new, since its cancel)", name, v)
	}
}

// A flag finance has not resolved had no standing signal: flagged payouts
// are left out of the in-flight age, and GpubillPayoutRailAmountMismatch
// is a rise over an hour, cleared an hour after the flag. The oldest open
// flag's age is on /metrics (GpubillPayoutRailAmountMismatchOpen); a
// resolved flag, or one whose payout moved on (the rail failed the
// reference, a retry), does not count.
func TestPayoutRailAmountFlagOpenAges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	const name = "gpubill_payout_rail_amount_flags_open_age_seconds"
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Fatalf("%s with no flags: %v, want 0", name, v)
	}
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'submitted', 'rail_amount_mismatch', 1, true, now() - interval '3 days', now() - interval '2 days'),
		('po-2', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'failed', 'account_frozen', 1, true, now() - interval '9 days', now() - interval '8 days')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into payout.rail_amount_flags (payout_id, attempt, rail, rail_amount, rail_currency, flagged_at) values
		('po-1', 1, 'alipay', 80, 'CNY', now() - interval '2 days'),
		('po-2', 1, 'alipay', 80, 'CNY', now() - interval '8 days')`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 2*86400 || v > 2*86400+60 {
		t.Errorf("%s: %v, want ~2 days (po-1; po-2 failed since)", name, v)
	}
	if _, err := pool.Exec(ctx, `update payout.rail_amount_flags set resolved_by = 'fin-1', resolution_reason = 'bill line 7',
		resolved_at = now() where payout_id = 'po-1'`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Errorf("%s with po-1 resolved: %v, want 0", name, v)
	}
	// Resolved, po-1 is its workflow's to record paid: in flight again,
	// GpubillPayoutInFlightLong's should it stay submitted.
	if v := testkit.SQLMetric(t, pool, Metrics(), "gpubill_payout_in_flight_age_seconds"); v < 2*86400 || v > 2*86400+60 {
		t.Errorf("in-flight age with po-1 resolved and still submitted: %v, want ~2 days", v)
	}
}

// A payout hold keeps a provider's queued bank transfer out of every cut:
// it waits for finance, not for a cutoff or its rail, so neither the
// queued age (GpubillBankCutoffNotBuilt pages past a day) nor the
// in-flight age counts it while held; released, it counts from the
// release. A day-old hold paged as a cutoff not built.
func TestHeldBankTransferNotCountedStuck(t *testing.T) {
	t.Parallel()
	heldBankTransferNotCountedStuck(t, `insert into payout.holds (provider_id, reason, held_at) values ('p-h', 'fraud dispute', now() - interval '6 days')`,
		`delete from payout.holds`)
}

// So does a provider's KYC rejected by finance (the cut leaves its queued
// transfers out likewise): a rejection a day old paged as a cutoff not
// built.
func TestRejectedKYCBankTransferNotCountedStuck(t *testing.T) {
	t.Parallel()
	heldBankTransferNotCountedStuck(t, `insert into payout.kyc (provider_id, status, reference, updated_at, rejected_at) values
			('p-h', 'rejected', 'fraud', now() - interval '6 days', now() - interval '6 days')`,
		`update payout.kyc set status = 'verified', rejected_at = null`)
}

// A bank transfer a rejected KYC keeps queued holds its payout's net in
// provider:{id}:in_transit, out of every bank file, until finance changes
// the verdict or cancels the payout; the queued and in-flight ages leave
// it out (above), and nothing else counted it. Its age since the
// rejection (or its queuing, if later) and the money held, by currency,
// are on /metrics (GpubillPayoutKYCRejectedTransferQueued); a transfer a
// payout hold alone keeps, one already batched, or one of a verified
// provider is not counted.
func TestRejectedKYCQueuedTransferCounted(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	const age, amount = "gpubill_payout_kyc_rejected_queued_age_seconds", "gpubill_payout_kyc_rejected_queued_amount"
	if _, err := pool.Exec(ctx, `insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name,
			creditor_account, creditor_agent, state, queued_at, updated_at) values
			('po-r1', 'po-r1', 'p-r', 'CNY', 60, 'P R', '6222000011110001', 'ICBKCNBJ', 'queued', now() - interval '6 days', now() - interval '6 days'),
			('po-r2', 'po-r2', 'p-r', 'CNY', 15.5, 'P R', '6222000011110001', 'ICBKCNBJ', 'queued', now() - interval '5 days', now() - interval '5 days'),
			('po-r3', 'po-r3', 'p-r', 'USD', 40, 'P R', 'DE89370400440532013000', 'COBADEFF', 'queued', now() - interval '3 days', now() - interval '3 days'),
			('po-rb', 'po-rb', 'p-r', 'CNY', 900, 'P R', '6222000011110001', 'ICBKCNBJ', 'batched', now() - interval '9 days', now() - interval '8 days'),
			('po-h', 'po-h', 'p-h', 'CNY', 700, 'P H', '6222000011110002', 'ICBKCNBJ', 'queued', now() - interval '9 days', now() - interval '9 days'),
			('po-v', 'po-v', 'p-v', 'CNY', 800, 'P V', '6222000011110005', 'ICBKCNBJ', 'queued', now() - interval '9 days', now() - interval '9 days');
		insert into payout.holds (provider_id, reason, held_at) values ('p-h', 'fraud dispute', now() - interval '9 days');
		insert into payout.kyc (provider_id, status, reference, updated_at, rejected_at) values
			('p-r', 'rejected', 'sanctions', now() - interval '2 days', now() - interval '2 days'),
			('p-v', 'verified', 'kyc-1', now() - interval '20 days', null)`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), age); v < 2*86400 || v > 2*86400+600 {
		t.Errorf("%s: %v, want about 2 days (since the rejection)", age, v)
	}
	none := map[string]float64{}
	for _, c := range money.Codes() {
		none[c] = 0 // every currency's series from 0
	}
	want := maps.Clone(none)
	want["CNY"], want["USD"] = 75.5, 40
	if got := amountsByCurrency(t, pool, amount); !maps.Equal(got, want) {
		t.Errorf("%s: %v, want %v (p-r's queued transfers)", amount, got, want)
	}
	if _, err := pool.Exec(ctx, `update payout.kyc set status = 'verified', updated_at = now(), rejected_at = null where provider_id = 'p-r'`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), age); v != 0 {
		t.Errorf("%s once verified again: %v, want 0", age, v)
	}
	if got := amountsByCurrency(t, pool, amount); !maps.Equal(got, none) {
		t.Errorf("%s once verified again: %v, want %v", amount, got, none)
	}
}

// Finance re-saving a rejected KYC (the same verdict, PUT .../kyc rejected
// again) is no new rejection: the queued transfer's age counts from the
// first one. It counted from the KYC's last save, so a rejection re-saved
// every day never reached GpubillPayoutKYCRejectedTransferQueued's day. A
// rejection after the verdict changed is a new one and counts from itself.
func TestRejectedKYCReSavedKeepsItsAge(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	s := &postgres.Store{Pool: pool}
	const age = "gpubill_payout_kyc_rejected_queued_age_seconds"
	if _, err := pool.Exec(ctx, `insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name,
			creditor_account, creditor_agent, state, queued_at, updated_at) values
			('po-r1', 'po-r1', 'p-r', 'CNY', 60, 'P R', '6222000011110001', 'ICBKCNBJ', 'queued', now() - interval '6 days', now() - interval '6 days')`); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, put := range []struct {
		status, reference string
		at                time.Time
	}{
		{domain.KYCRejected, "sanctions", now.Add(-3 * 24 * time.Hour)},
		{domain.KYCRejected, "sanctions", now.Add(-2 * 24 * time.Hour)},
		{domain.KYCRejected, "sanctions, confirmed", now},
	} {
		if _, _, err := s.PutKYC(ctx, "p-r", put.status, put.reference, false, put.at); err != nil {
			t.Fatal(err)
		}
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), age); v < 3*86400 || v > 3*86400+600 {
		t.Errorf("%s after the rejection re-saved twice: %v, want about 3 days (since the first rejection)", age, v)
	}
	for _, status := range []string{domain.KYCVerified, domain.KYCRejected} {
		if _, _, err := s.PutKYC(ctx, "p-r", status, "appeal", false, now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), age); v < 3600 || v > 3600+600 {
		t.Errorf("%s rejected again after verified: %v, want about an hour (since the new rejection)", age, v)
	}
}

// amountsByCurrency reads the gauge name, labelled by currency alone.
func amountsByCurrency(t *testing.T, pool *pgxpool.Pool, name string) map[string]float64 {
	t.Helper()
	for _, m := range Metrics() {
		if m.Name != name {
			continue
		}
		if !slices.Equal(m.Labels, []string{"currency"}) {
			t.Fatalf("%s labels %v, want [currency]", name, m.Labels)
		}
		rows, err := pool.Query(context.Background(), m.Query)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for rows.Next() {
			var currency string
			var v float64
			if err := rows.Scan(&currency, &v); err != nil {
				t.Fatal(err)
			}
			got[currency] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// heldBankTransferNotCountedStuck checks the ages of a queued transfer
// held by hold and released by release.
func heldBankTransferNotCountedStuck(t *testing.T, hold, release string) {
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	metric := func(name string) float64 { t.Helper(); return testkit.SQLMetric(t, pool, Metrics(), name) }
	for _, q := range []string{
		`insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net,
			status, rail_reference, created_at, updated_at) values
			('po-h', 'p-h', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'submitted', 'po-h', now() - interval '8 days', now() - interval '6 days')`,
		`insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name, creditor_account,
			creditor_agent, state, queued_at, updated_at) values
			('po-h', 'po-h', 'p-h', 'CNY', 60, 'P H', '6222000011110001', 'ICBKCNBJ', 'queued', now() - interval '6 days', now() - interval '6 days')`,
		hold,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"gpubill_bank_transfers_queued_age_seconds", "gpubill_payout_in_flight_age_seconds"} {
		if v := metric(n); v != 0 {
			t.Errorf("%s with the only transfer held: %v, want 0", n, v)
		}
	}
	// Released an hour ago (PutHold sets the transfer's hold_released_at
	// and notes the release on the payout).
	for _, q := range []string{
		release,
		`update payout.bank_transfers set hold_released_at = now() - interval '1 hour'`,
		`update payout.payouts set updated_at = now() - interval '1 hour'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"gpubill_bank_transfers_queued_age_seconds", "gpubill_payout_in_flight_age_seconds"} {
		if v := metric(n); v < 3600 || v > 3600+60 {
			t.Errorf("%s released an hour ago: %v, want about an hour", n, v)
		}
	}
}

// How far behind the webhook sender is had no signal: hanging receivers
// held every other provider's notice for hours, seen by nobody. The age of
// the oldest delivery it could send now is on /metrics
// (GpubillPayoutWebhooksBehind); one in backoff (due later), one claimed
// (leased: due at the lease's end) and a payout's next change waiting
// behind its earlier one (not claimable) do not count.
func TestPayoutWebhookSenderLagAges(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	const name = "gpubill_payout_webhook_delivery_lag_seconds"
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Fatalf("%s with no deliveries: %v, want 0", name, v)
	}
	if _, err := pool.Exec(context.Background(), `insert into payout.webhooks (webhook_id, provider_id, url, secret, created_at) values
			('wh-1', 'p-1', 'https://example.test/1', '0123456789abcdef', now()), ('wh-2', 'p-2', 'https://example.test/2', '0123456789abcdef', now());
		insert into payout.webhooks (webhook_id, provider_id, url, secret, created_at, deleted_at) values
			('wh-3', 'p-3', 'https://example.test/3', '0123456789abcdef', now(), now() - interval '2 days');
		insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at) values
			('wh-1', 'ev-1', 'po-1', '{}', now() + interval '1 hour', now() - interval '9 hours'),
			('wh-1', 'ev-2', 'po-1', '{}', now() - interval '8 hours', now() - interval '8 hours'),
			('wh-2', 'ev-3', 'po-2', '{}', now() - interval '20 minutes', now() - interval '20 minutes');
		insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, status, next_attempt_at, created_at) values
			('wh-2', 'ev-4', 'po-3', '{}', 'failed', now() - interval '5 days', now() - interval '5 days'),
			('wh-3', 'ev-5', 'po-4', '{}', 'pending', now() - interval '2 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v < 20*60 || v > 20*60+60 {
		t.Errorf("%s %v, want ~20 min (ev-3; ev-2 waits behind ev-1, in backoff; ev-4 was given up; ev-5's webhook was removed)", name, v)
	}
}

// A receiver down (connections refused) with a deep queue kept its
// deliveries due while it rested, and the sender's lag read them: one dead
// receiver with 150 payouts queued fired GpubillPayoutWebhooksBehind while
// every other provider's notices flowed. The lag is the sender's own
// backlog: a webhook whose last attempt got no answer is left out (read
// from its row: every replica's scrape agrees) and counted apart, until it
// answers, or until the sender has not tried it for 10 minutes (then it is
// the sender that stopped). A stopped sender still raises the lag.
func TestPayoutWebhookLagLeavesOutUnansweredReceivers(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	box, err := postgres.NewSecretBox(bytes.Repeat([]byte{7}, postgres.WebhookKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	store := &postgres.Store{Pool: pool, Box: box}
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(healthy.Close)
	dead := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	deadURL := dead.URL
	dead.Close() // connections refused: no answer
	for _, w := range []domain.Webhook{{ID: "wh-ok", ProviderID: "p-ok", URL: healthy.URL}, {ID: "wh-dead", ProviderID: "p-dead", URL: deadURL}} {
		w.Secret, w.CreatedAt = "0123456789abcdef", time.Now()
		if _, err := store.CreateWebhook(ctx, w, 10); err != nil {
			t.Fatal(err)
		}
	}
	const deadQueued, okQueued = 150, 20
	if _, err := pool.Exec(ctx, `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at)
		select 'wh-dead', 'ev-dead-' || i, 'po-dead-' || i, '{}'::bytea, now() - interval '1 hour', now() - interval '1 hour' from generate_series(1, $1) i
		union all
		select 'wh-ok', 'ev-ok-' || i, 'po-ok-' || i, '{}'::bytea, now() - interval '30 minutes', now() - interval '30 minutes' from generate_series(1, $2) i`,
		deadQueued, okQueued); err != nil {
		t.Fatal(err)
	}
	const lag, unanswered = "gpubill_payout_webhook_delivery_lag_seconds", "gpubill_payout_webhooks_unanswered"
	count := func(q string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// run sends until the healthy webhook's queue is delivered and the
	// dead one was tried, then stops.
	run := func(until func() bool) {
		t.Helper()
		runCtx, stop := context.WithCancel(ctx)
		d := &ports.Deliverer{Store: store, Clock: clock.System{}, HTTP: &http.Client{}, Log: slog.New(slog.DiscardHandler)}
		ran := make(chan error, 1)
		go func() { ran <- d.Run(runCtx) }()
		testkit.Eventually(t, 10*time.Second, until)
		stop()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
	}
	run(func() bool {
		return count(`select count(*) from payout.webhook_deliveries where webhook_id = 'wh-ok' and status = 'delivered'`) == okQueued &&
			count(`select count(*) from payout.webhook_deliveries where webhook_id = 'wh-dead' and attempts > 0`) > 0
	})
	if n := count(`select count(*) from payout.webhook_deliveries where webhook_id = 'wh-dead' and status = 'pending' and next_attempt_at <= now()`); n < deadQueued-10 {
		t.Fatalf("guard: %d of wh-dead's deliveries due, want about %d (it rests, its queue waiting)", n, deadQueued)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), lag); v > 60 {
		t.Errorf("%s with wh-dead refusing and wh-ok delivered: %v, want ~0 (wh-dead's %d due are its receiver's, not the sender's)", lag, v, deadQueued)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), unanswered); v != 1 {
		t.Errorf("%s: %v, want 1 (wh-dead)", unanswered, v)
	}

	// The sender stopped: the healthy webhook's changes wait and count.
	if _, err := pool.Exec(ctx, `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at)
		values ('wh-ok', 'ev-ok-late', 'po-ok-late', '{}', now() - interval '20 minutes', now() - interval '20 minutes')`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), lag); v < 20*60 || v > 20*60+60 {
		t.Errorf("%s with the sender stopped: %v, want ~20 min (ev-ok-late)", lag, v)
	}
	// Not tried for 10 minutes: wh-dead's queue is the sender's again.
	if _, err := pool.Exec(ctx, `update payout.webhooks set unanswered_at = unanswered_at - interval '11 minutes' where webhook_id = 'wh-dead'`); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), lag); v < 60*60 || v > 60*60+60 {
		t.Errorf("%s with wh-dead not tried for 11 minutes: %v, want ~1 h (its oldest due)", lag, v)
	}

	// Its receiver back: the first answer ends it, its queue drains.
	if _, err := pool.Exec(ctx, `update payout.webhooks set url = $1 where webhook_id = 'wh-dead'`, healthy.URL); err != nil {
		t.Fatal(err)
	}
	run(func() bool {
		return count(`select count(*) from payout.webhook_deliveries where status = 'delivered'`) == okQueued+1+deadQueued
	})
	if v := testkit.SQLMetric(t, pool, Metrics(), unanswered); v != 0 {
		t.Errorf("%s once wh-dead answered: %v, want 0", unanswered, v)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), lag); v != 0 {
		t.Errorf("%s all delivered: %v, want 0", lag, v)
	}
}

// gpubill's own outbound network or DNS broken makes every receiver look
// dead: each webhook the sender tries is left out of its lag and counted
// unanswered, and with no alert on the count providers stopped getting
// their paid and returned notices untold. The webhooks in use (not
// removed, a delivery queued or sent again in the last 7 days) are what
// the unanswered count is a share of: GpubillPayoutWebhooksMostUnanswered
// reads the two. A receiver down for good whose provider has had no
// delivery since, a webhook removed and one never sent to are in neither.
func TestPayoutWebhooksInUseAllUnansweredWhenEgressFails(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := context.Background()
	box, err := postgres.NewSecretBox(bytes.Repeat([]byte{7}, postgres.WebhookKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	store := &postgres.Store{Pool: pool, Box: box}
	var received atomic.Int64
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(healthy.Close)
	var inUse []string
	for i := range 10 {
		inUse = append(inUse, fmt.Sprintf("wh-%d", i))
	}
	for _, id := range append([]string{"wh-removed", "wh-gone", "wh-idle"}, inUse...) {
		w := domain.Webhook{ID: id, ProviderID: "p-" + id, URL: healthy.URL, Secret: "0123456789abcdef", CreatedAt: time.Now().Add(-30 * 24 * time.Hour)}
		if _, err := store.CreateWebhook(ctx, w, 10); err != nil {
			t.Fatal(err)
		}
	}
	// wh-removed was sent to an hour ago, then removed; wh-gone's receiver
	// did not answer a delivery queued 8 days ago, given up since, and its
	// provider has had none since.
	for _, q := range []string{
		`insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at, status, delivered_at)
			values ('wh-removed', 'ev-removed', 'po-removed', '{}', now() - interval '1 hour', now() - interval '1 hour', 'delivered', now() - interval '1 hour')`,
		`insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at, status, attempts)
			values ('wh-gone', 'ev-gone', 'po-gone', '{}', now() - interval '5 days', now() - interval '8 days', 'failed', 20)`,
		`update payout.webhooks set unanswered_since = now() - interval '8 days', unanswered_at = now() - interval '5 days' where webhook_id = 'wh-gone'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.DeleteWebhook(ctx, "p-wh-removed", "wh-removed", time.Now()); err != nil {
		t.Fatal(err)
	}
	queue := func(event string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at)
			select w, $2 || '-' || w, 'po-' || w, '{}'::bytea, now(), now() from unnest($1::text[]) w`, inUse, event); err != nil {
			t.Fatal(err)
		}
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	run := func(client *http.Client, until func() bool) {
		t.Helper()
		runCtx, stop := context.WithCancel(ctx)
		d := &ports.Deliverer{Store: store, Clock: clock.System{}, HTTP: client, Log: slog.New(slog.DiscardHandler)}
		ran := make(chan error, 1)
		go func() { ran <- d.Run(runCtx) }()
		testkit.Eventually(t, 10*time.Second, until)
		stop()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
	}
	const inUseName, unanswered = "gpubill_payout_webhooks_in_use", "gpubill_payout_webhooks_unanswered"

	queue("ev-submitted")
	run(&http.Client{}, func() bool {
		return count(`select count(*) from payout.webhook_deliveries where event_id like 'ev-submitted-%' and status = 'delivered'`) == len(inUse)
	})
	if v := testkit.SQLMetric(t, pool, Metrics(), inUseName); v != float64(len(inUse)) {
		t.Errorf("%s: %v, want %d (wh-0..9; not wh-removed, wh-gone or wh-idle)", inUseName, v, len(inUse))
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), unanswered); v != 0 {
		t.Errorf("%s with every receiver in use answering: %v, want 0 (wh-gone is not in use)", unanswered, v)
	}

	// The cycle's paid notices, with gpubill's DNS failing: the receivers
	// are up, none is reached.
	received.Store(0)
	noDNS := &http.Client{Transport: &http.Transport{DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
		return nil, &net.DNSError{Err: "no such host", Name: addr, IsNotFound: true}
	}}}
	queue("ev-paid")
	run(noDNS, func() bool {
		return count(`select count(*) from payout.webhook_deliveries where event_id like 'ev-paid-%' and attempts > 0`) == len(inUse)
	})
	if n := received.Load(); n != 0 {
		t.Fatalf("guard: the receiver got %d requests with DNS failing, want 0", n)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), unanswered); v != float64(len(inUse)) {
		t.Errorf("%s with DNS failing: %v, want %d (every webhook in use)", unanswered, v, len(inUse))
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), inUseName); v != float64(len(inUse)) {
		t.Errorf("%s with DNS failing: %v, want %d", inUseName, v, len(inUse))
	}
}

// Claims migration payout/0037 marked case_duplicate_of (an entry another
// claim held in another letter case) are counted, each a payout read paid
// that may not be (GpubillPayoutSettledOutsideCaseDuplicate); one
// released (its entry reversed) is not.
func TestSettledOutsideCaseDuplicatesCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	const name = "gpubill_payout_settled_outside_case_duplicates"
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Fatalf("%s with no claims: %v, want 0", name, v)
	}
	const entry = "0193e0a4-7c1d-7000-8000-00000000000a"
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, attempt, workflow_started, created_at, updated_at) values
		('po-a', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 15, 60, 'settled_outside', 1, true, now(), now()),
		('po-b', 'p-1', 'cyc-20260215', 'CNY', 100, 25, 15, 60, 'settled_outside', 1, true, now(), now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into payout.settled_outside (payout_id, transaction_id, reason, settled_by, settled_at, case_duplicate_of) values
		('po-a', $1, 'by hand', 'fin-1', now(), null),
		('po-b', upper($1), 'by hand', 'fin-1', now(), 'po-a')`, entry); err != nil {
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 1 {
		t.Errorf("%s with po-b's claim marked: %v, want 1", name, v)
	}
	if _, err := pool.Exec(ctx, `delete from payout.settled_outside where payout_id = 'po-b'`); err != nil { // released
		t.Fatal(err)
	}
	if v := testkit.SQLMetric(t, pool, Metrics(), name); v != 0 {
		t.Errorf("%s with po-b's claim released: %v, want 0", name, v)
	}
}
