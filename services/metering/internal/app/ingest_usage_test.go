package app_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/metering/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

var now = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

func newApp(t *testing.T) *app.App {
	t.Helper()
	pool, _ := testkit.NewPool(t)
	ctx := context.Background()
	if err := pg.Migrate(ctx, pool, "metering", migrations.For("metering")); err != nil {
		t.Fatal(err)
	}
	a := app.New(postgres.NewStore(pool), clock.NewManual(now), cycles.Default())
	if _, err := a.CreateProvider(ctx, domain.ProviderInput{ID: "p-001", Tier: "pro", TaxProfile: "individual", Jurisdiction: "CN", PUE: "1.6", Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateRenter(ctx, domain.RenterInput{ID: "r-001", Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	return a
}

// poolOf is the database under a's store, for checks in SQL.
func poolOf(a *app.App) *pgxpool.Pool { return a.Store.(*postgres.Store).Pool }

// secondParties creates provider p-002 and renter r-002 beside newApp's.
func secondParties(t *testing.T, a *app.App) {
	t.Helper()
	ctx := context.Background()
	if _, err := a.CreateProvider(ctx, domain.ProviderInput{ID: "p-002", Tier: "standard", TaxProfile: "individual", Jurisdiction: "CN", Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateRenter(ctx, domain.RenterInput{ID: "r-002", Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
}

// withParties is e naming provider and renter.
func withParties(e domain.EventInput, provider, renter string) domain.EventInput {
	e.ProviderID, e.RenterID = provider, renter
	return e
}

func ev(id, lease, start, end string) domain.EventInput {
	return domain.EventInput{ID: id, LeaseID: lease, ProviderID: "p-001", RenterID: "r-001", GPUModel: "RTX_4090",
		GPUCount: 2, StartTime: start, EndTime: end, Region: "cn-east", Workload: "training"}
}

func TestIngestRejectionReasons(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	with := func(e domain.EventInput, f func(*domain.EventInput)) domain.EventInput { f(&e); return e }
	base := ev("", "lease-x", "2026-11-01T22:00:00Z", "2026-11-01T23:30:00Z")
	tests := []struct {
		name string
		give domain.EventInput
		want string
	}{
		{"model", with(base, func(e *domain.EventInput) { e.GPUModel = "GTX_9999" }), `unknown gpu_model "GTX_9999"`},
		{"provider", with(base, func(e *domain.EventInput) { e.ProviderID = "p-x" }), `unknown provider "p-x"`},
		{"renter", with(base, func(e *domain.EventInput) { e.RenterID = "r-x" }), `unknown renter "r-x"`},
		{"count zero", with(base, func(e *domain.EventInput) { e.GPUCount = 0 }), `gpu_count 0 outside 1..64`},
		{"count big", with(base, func(e *domain.EventInput) { e.GPUCount = 65 }), `gpu_count 65 outside 1..64`},
		{"end before start", with(base, func(e *domain.EventInput) { e.EndTime = "2026-11-01T21:00:00Z" }), `end_time before start_time`},
		{"too long", with(base, func(e *domain.EventInput) { e.EndTime = "2026-11-02T22:00:01Z"; e.StartTime = "2026-11-01T22:00:00Z" }), `longer than 24h (24h0m1s)`},
		{"future", with(base, func(e *domain.EventInput) { e.EndTime = "2026-11-02T12:05:01Z" }), `end_time more than 5 min in the future`},
		{"late", with(base, func(e *domain.EventInput) {
			e.StartTime, e.EndTime = "2026-09-27T11:00:00Z", "2026-09-27T13:00:00Z"
		}), `older than the 35-day late-arrival limit`},
		{"malformed start", with(base, func(e *domain.EventInput) { e.StartTime = "yesterday" }), `malformed start_time "yesterday": want RFC 3339 (2026-11-01T22:00:00Z)`},
		{"malformed end", with(base, func(e *domain.EventInput) { e.EndTime = "2026-11-01 23:30" }), `malformed end_time "2026-11-01 23:30": want RFC 3339 (2026-11-01T23:30:00Z)`},
		{"missing id", with(base, func(e *domain.EventInput) { e.ID = "" }), `missing id`},
		{"missing lease", with(base, func(e *domain.EventInput) { e.LeaseID = "" }), `missing lease_id`},
		// Text PostgreSQL refuses failed the whole batch's insert (the
		// event beside them, evt-ok, went unrecorded).
		{"NUL", with(base, func(e *domain.EventInput) { e.Workload = "train\x00ing" }), `workload holds a control character`},
		{"control", with(base, func(e *domain.EventInput) { e.LeaseID = "lease\nx" }), `lease_id holds a control character`},
		{"not UTF-8", with(base, func(e *domain.EventInput) { e.Region = "cn-\xffeast" }), `region is not valid UTF-8`},
	}
	in := make([]domain.EventInput, 0, len(tests)+1)
	in = append(in, ev("evt-ok", "lease-ok", "2026-11-01T22:00:00Z", "2026-11-01T23:30:00Z"))
	for i, tt := range tests {
		e := tt.give
		if tt.name != "missing id" {
			e.ID = fmt.Sprintf("evt-%d", i)
		}
		in = append(in, e)
	}
	res, err := a.Ingest(ctx, in, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 1 || res.Duplicates != 0 || len(res.Rejected) != len(tests) {
		t.Fatalf("got %+v", res)
	}
	for i, tt := range tests {
		got := res.Rejected[i]
		if got.Index != i+1 || got.Reason != tt.want {
			t.Errorf("%s: got index %d reason %q, want %d %q", tt.name, got.Index, got.Reason, i+1, tt.want)
		}
	}
}

func TestIngestDedupAndOverlap(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	first := []domain.EventInput{
		ev("evt-1", "lease-9", "2026-11-01T22:00:00Z", "2026-11-01T23:00:00Z"),
		ev("evt-2", "lease-9", "2026-11-01T23:00:00Z", "2026-11-02T00:00:00Z"),
		ev("evt-2", "lease-9", "2026-11-01T23:00:00Z", "2026-11-02T00:00:00Z"),  // repeat in batch
		ev("evt-3", "lease-9", "2026-11-01T22:30:00Z", "2026-11-01T22:45:00Z"),  // overlaps evt-1 in batch
		ev("evt-4", "lease-10", "2026-11-01T22:30:00Z", "2026-11-01T22:45:00Z"), // other lease: fine
	}
	res, err := a.Ingest(ctx, first, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 3 || res.Duplicates != 1 || len(res.Rejected) != 1 || res.Rejected[0].Reason != "overlaps evt-1 on lease lease-9" || res.Rejected[0].Index != 3 {
		t.Fatalf("first batch: %+v", res)
	}
	second := []domain.EventInput{
		ev("evt-1", "lease-9", "2026-11-01T22:00:00Z", "2026-11-01T23:00:00Z"), // duplicate forever
		ev("evt-5", "lease-9", "2026-11-01T23:59:00Z", "2026-11-02T00:10:00Z"), // overlaps evt-2 in the database
		ev("evt-6", "lease-9", "2026-11-02T00:10:00Z", "2026-11-02T00:30:00Z"), // adjacent: fine
	}
	res, err = a.Ingest(ctx, second, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 1 || res.Duplicates != 1 || len(res.Rejected) != 1 || res.Rejected[0].Reason != "overlaps evt-2 on lease lease-9" || res.Rejected[0].Index != 1 {
		t.Fatalf("second batch: %+v", res)
	}
	var n, outbox int
	if err := poolOf(a).QueryRow(ctx, `select count(*) from metering.usage_events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := poolOf(a).QueryRow(ctx, `select count(*) from metering.outbox where subject like 'usage.recorded.%'`).Scan(&outbox); err != nil {
		t.Fatal(err)
	}
	if n != 4 || outbox != 2 {
		t.Fatalf("stored %d events, %d usage messages; want 4, 2", n, outbox)
	}
}

// TestIngestOverlapAnywhereInTheLeaseSpan: the insert probes a lease's
// recorded time once for the span of its events in the batch, then event by
// event only where that span meets recorded time. A recorded event that
// meets only the batch's last event of the lease, or only a gap between two
// of them, must still be found or let through exactly.
func TestIngestOverlapAnywhereInTheLeaseSpan(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	res, err := a.Ingest(ctx, []domain.EventInput{
		ev("rec-1", "lease-s", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"),
		ev("rec-2", "lease-g", "2026-11-01T09:00:00Z", "2026-11-01T10:00:00Z"),
	}, app.IngestOptions{})
	if err != nil || res.Accepted != 2 {
		t.Fatalf("recording: %+v %v", res, err)
	}
	res, err = a.Ingest(ctx, []domain.EventInput{
		ev("new-1", "lease-s", "2026-11-01T08:00:00Z", "2026-11-01T09:00:00Z"), // before rec-1: fine
		ev("new-2", "lease-s", "2026-11-01T10:30:00Z", "2026-11-01T10:45:00Z"), // inside rec-1
		ev("new-3", "lease-g", "2026-11-01T08:00:00Z", "2026-11-01T09:00:00Z"), // rec-2 sits in the gap: fine
		ev("new-4", "lease-g", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"), // fine
		ev("new-5", "lease-n", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"), // nothing recorded: fine
	}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 4 || res.Duplicates != 0 || len(res.Rejected) != 1 ||
		res.Rejected[0].Index != 1 || res.Rejected[0].Reason != "overlaps rec-1 on lease lease-s" {
		t.Fatalf("got %+v; want new-2 alone rejected, overlapping rec-1", res)
	}
}

// TestIngestRepeatAfterNewIDs: the insert first runs without skipping
// recorded ids; a recorded id met after new rows (ids in order) must undo
// those and record the batch again, each new event once, the repeat
// rejected.
func TestIngestRepeatAfterNewIDs(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	if res, err := a.Ingest(ctx, []domain.EventInput{ev("z-1", "lease-r", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z")}, app.IngestOptions{}); err != nil || res.Accepted != 1 {
		t.Fatalf("recording: %+v %v", res, err)
	}
	// An exact repeat overlaps itself and is never inserted; a recorded id
	// with another lease and time reaches the primary key.
	res, err := a.Ingest(ctx, []domain.EventInput{
		ev("a-1", "lease-a", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"),
		ev("z-1", "lease-other", "2026-11-01T12:00:00Z", "2026-11-01T13:00:00Z"), // recorded id, other body
		ev("b-1", "lease-b", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"),
	}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 2 || res.Duplicates != 0 || len(res.Rejected) != 1 || res.Rejected[0].Index != 1 ||
		!strings.Contains(res.Rejected[0].Reason, "id z-1 was recorded with a different body") {
		t.Fatalf("got %+v; want a-1 and b-1 accepted, z-1 rejected as a conflicting repeat", res)
	}
	var n int
	if err := poolOf(a).QueryRow(ctx, `select count(*) from metering.usage_events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("stored %d events, want 3", n)
	}
}

func TestIngestFullBatch(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	in := make([]domain.EventInput, domain.BatchEventsMax)
	start := now.Add(-30 * 24 * time.Hour)
	for i := range in {
		s := start.Add(time.Duration(i/50) * time.Hour)
		in[i] = ev(fmt.Sprintf("evt-%d", i), fmt.Sprintf("lease-%d", i%50), s.Format(time.RFC3339), s.Add(time.Hour).Format(time.RFC3339))
	}
	res, err := a.Ingest(ctx, in, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != domain.BatchEventsMax || len(res.Rejected) != 0 {
		t.Fatalf("got accepted %d, rejected %d (%v)", res.Accepted, len(res.Rejected), res.Rejected[:min(3, len(res.Rejected))])
	}
	res, err = a.Ingest(ctx, in, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 0 || res.Duplicates != domain.BatchEventsMax {
		t.Fatalf("replay: %+v", res)
	}
	if _, err := a.Ingest(ctx, append(in, in[0]), app.IngestOptions{}); err == nil {
		t.Fatal("5001 events accepted")
	}
}

func TestListUsagePages(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	var in []domain.EventInput
	for i := 0; i < 25; i++ {
		s := now.Add(-time.Duration(48-i) * time.Hour)
		in = append(in, ev(fmt.Sprintf("evt-%02d", i), "lease-1", s.Format(time.RFC3339), s.Add(30*time.Minute).Format(time.RFC3339)))
	}
	if _, err := a.Ingest(ctx, in, app.IngestOptions{}); err != nil {
		t.Fatal(err)
	}
	got := listAll(t, a, app.UsageQuery{LeaseID: "lease-1", PageSize: 10})
	if len(got) != 25 || got[0] != "evt-00" || got[24] != "evt-24" {
		t.Fatalf("paged %v", got)
	}
	rows, _, err := a.ListUsage(ctx, app.UsageQuery{RenterID: "r-001", From: now.Add(-30 * time.Hour), To: now.Add(-25 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 {
		t.Fatalf("time range: %d rows", len(rows))
	}
}

// Two ingests racing on the same leases with overlapping GPU time: per lease,
// exactly one event is recorded, and the loser's rejection names the winner.
// (Without the lease locks both batches pass the overlap check: each sees
// only committed rows.) Odd rounds race on leases with recorded usage (their
// lock rows exist), even ones on new leases.
func TestIngestConcurrentOverlapOneWins(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	const leases, rounds = 200, 5
	start := now.Add(-10 * 24 * time.Hour)
	for r := 0; r < rounds; r++ {
		batch := func(side string, shift time.Duration) []domain.EventInput {
			var in []domain.EventInput
			for l := 0; l < leases; l++ {
				s := start.Add(shift)
				in = append(in, ev(fmt.Sprintf("evt-%d-%s-%d", r, side, l), fmt.Sprintf("lease-%d-%d", r, l),
					s.Format(time.RFC3339), s.Add(time.Hour).Format(time.RFC3339)))
			}
			return in
		}
		if r%2 == 1 {
			if res, err := a.Ingest(ctx, batch("pre", -2*time.Hour), app.IngestOptions{}); err != nil || res.Accepted != leases {
				t.Fatal(res, err)
			}
		}
		sides := [2][]domain.EventInput{batch("a", 0), batch("b", 30*time.Minute)}
		var res [2]app.IngestResult
		var errs [2]error
		var wg sync.WaitGroup
		for i := range sides {
			wg.Add(1)
			go func(i int) { defer wg.Done(); res[i], errs[i] = a.Ingest(ctx, sides[i], app.IngestOptions{}) }(i)
		}
		wg.Wait()
		for i := range errs {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
		}
		if res[0].Accepted+res[1].Accepted != leases || len(res[0].Rejected)+len(res[1].Rejected) != leases {
			t.Fatalf("round %d: %+v / %+v", r, res[0].Accepted, res[1].Accepted)
		}
		for i := range res {
			for _, rej := range res[i].Rejected {
				other := sides[1-i][rej.Index]
				if want := fmt.Sprintf("overlaps %s on lease %s", other.ID, other.LeaseID); rej.Reason != want {
					t.Fatalf("round %d: %q, want %q", r, rej.Reason, want)
				}
			}
		}
	}
	var overlaps int
	if err := poolOf(a).QueryRow(ctx, `select count(*) from metering.usage_events x join metering.usage_events y
		on x.lease_id = y.lease_id and x.id < y.id and x.start_time < y.end_time and y.start_time < x.end_time`).Scan(&overlaps); err != nil {
		t.Fatal(err)
	}
	if overlaps != 0 {
		t.Fatalf("%d overlapping pairs recorded", overlaps)
	}
}

// Two ingests sharing event ids under different leases (a confused agent)
// neither deadlock nor record an id twice, and refuse the twin.
func TestIngestConcurrentSharedIDs(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	const n = 500
	start := now.Add(-10 * 24 * time.Hour).Format(time.RFC3339)
	end := now.Add(-10*24*time.Hour + time.Hour).Format(time.RFC3339)
	var sides [2][]domain.EventInput
	for i := 0; i < n; i++ {
		sides[0] = append(sides[0], ev(fmt.Sprintf("evt-%d", i), fmt.Sprintf("lease-a-%d", i), start, end))
		sides[1] = append(sides[1], ev(fmt.Sprintf("evt-%d", n-1-i), fmt.Sprintf("lease-b-%d", i), start, end))
	}
	var res [2]app.IngestResult
	var errs [2]error
	var wg sync.WaitGroup
	for i := range sides {
		wg.Add(1)
		go func(i int) { defer wg.Done(); res[i], errs[i] = a.Ingest(ctx, sides[i], app.IngestOptions{}) }(i)
	}
	wg.Wait()
	for i := range errs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	// Each id is recorded once; its twin under the other lease is the same
	// key with another body: rejected, not counted as a duplicate.
	rejected := len(res[0].Rejected) + len(res[1].Rejected)
	if res[0].Accepted+res[1].Accepted != n || res[0].Duplicates+res[1].Duplicates != 0 || rejected != n {
		t.Fatalf("accepted %d+%d, duplicates %d+%d, rejected %d; want %d accepted and %d rejected",
			res[0].Accepted, res[1].Accepted, res[0].Duplicates, res[1].Duplicates, rejected, n, n)
	}
	for _, r := range append(res[0].Rejected, res[1].Rejected...) {
		if !strings.Contains(r.Reason, "recorded with a different body (lease_id differ)") {
			t.Fatalf("rejection %+v, want the lease_id conflict", r)
		}
	}
}

// A call's lease locks take no entry each of Postgres's shared lock table:
// it holds max_locks_per_transaction (64) per connection of the whole
// cluster, and three concurrent calls of 5 000 leases, an advisory lock
// each, left every service's next lock and new connection "out of shared
// memory". Counted from another connection while a transaction holds the
// locks of a full batch's leases.
func TestLeaseLocksTakeNoLockTableEntries(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	leases := make([]string, domain.BatchEventsMax)
	for i := range leases {
		leases[i] = fmt.Sprintf("lease-%d", i)
	}
	count := func() int {
		var n int
		if err := poolOf(a).QueryRow(ctx, `select count(*) from pg_locks l join pg_stat_activity s using (pid)
			where s.datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for round := range 2 { // the first writes the leases' rows, the second locks them
		if err := a.Store.WithTx(ctx, func(tx app.Tx) error {
			if err := tx.LockLeases(ctx, leases); err != nil {
				return err
			}
			if n := count(); n > 64 {
				return fmt.Errorf("round %d: %d entries of the lock table held for %d leases", round, n, len(leases))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// A batch whose events alternate between parties records every one: each
// provider and renter of the batch is looked up, not only those of runs.
func TestIngestMixedPartiesInOneBatch(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	secondParties(t, a)
	var in []domain.EventInput
	for i, p := range [][2]string{{"p-001", "r-001"}, {"p-002", "r-002"}, {"p-001", "r-002"}, {"p-002", "r-001"}, {"p-001", "r-001"}} {
		e := ev(fmt.Sprintf("mix-%d", i), fmt.Sprintf("lease-mix-%d", i), "2026-11-01T22:00:00Z", "2026-11-01T23:00:00Z")
		e.ProviderID, e.RenterID = p[0], p[1]
		in = append(in, e)
	}
	res, err := a.Ingest(ctx, in, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != len(in) || len(res.Rejected) != 0 {
		t.Fatalf("accepted %d of %d, rejected %+v", res.Accepted, len(in), res.Rejected)
	}
}

// Every event of a lease names the lease's provider and renter: pricing
// rates a lease's usage as one, so usage of a lease naming a second renter
// was charged whole to the first, and the second provider never credited.
// An event naming other parties than its lease's recorded (or earlier in
// its batch) usage is rejected with the lease's parties; a repeat of a
// recorded event is still a duplicate.
func TestIngestLeaseKeepsItsParties(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	secondParties(t, a)
	first := ev("lp-1", "lease-lp", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z")
	res, err := a.Ingest(ctx, []domain.EventInput{
		first,
		withParties(ev("lp-2", "lease-lp", "2026-11-01T11:00:00Z", "2026-11-01T12:00:00Z"), "p-001", "r-002"),
	}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "lease lease-lp is recorded for provider p-001 and renter r-001 in this batch"
	if res.Accepted != 1 || len(res.Rejected) != 1 || res.Rejected[0].ID != "lp-2" || res.Rejected[0].Reason != want {
		t.Fatalf("one batch, two renters on a lease: %+v; want lp-2 rejected: %q", res, want)
	}
	res, err = a.Ingest(ctx, []domain.EventInput{
		withParties(ev("lp-3", "lease-lp", "2026-11-01T12:00:00Z", "2026-11-01T13:00:00Z"), "p-002", "r-001"),
		first, // a repeat
		ev("lp-4", "lease-lp", "2026-11-01T13:00:00Z", "2026-11-01T14:00:00Z"),
		withParties(first, "p-002", "r-002"), // lp-1's id with other parties
	}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 1 || res.Duplicates != 1 || len(res.Rejected) != 2 ||
		res.Rejected[0].ID != "lp-3" || res.Rejected[0].Reason != "lease lease-lp is recorded for provider p-001 and renter r-001" ||
		res.Rejected[1].ID != "lp-1" || !strings.HasPrefix(res.Rejected[1].Reason, "id lp-1 was recorded with a different body") {
		t.Fatalf("against recorded usage: %+v", res)
	}
	var n int
	if err := poolOf(a).QueryRow(ctx, `select count(*) from metering.usage_events where lease_id = 'lease-lp' and (provider_id, renter_id) <> ('p-001', 'r-001')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events of lease-lp name other parties (%v)", n, err)
	}
}

// An ingest call answers as its events sent one by one, in order, would
// be: each judged against recorded usage and the call's earlier events
// that were recorded. An event the batch judged against another that
// recorded usage then refused was refused beside it (the later event was
// accepted sent again alone), and an exact repeat after a conflicting copy
// of its id was a conflict.
func TestIngestJudgedAsIfSentOneByOne(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	secondParties(t, a)
	recorded := ev("x-1", "lease-o", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z")
	res, err := a.Ingest(ctx, []domain.EventInput{
		recorded,
		ev("m-1", "lease-m", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"),
	}, app.IngestOptions{})
	if err != nil || res.Accepted != 2 {
		t.Fatalf("recording: %+v %v", res, err)
	}
	conflicting := recorded
	conflicting.GPUCount = 4
	res, err = a.Ingest(ctx, []domain.EventInput{
		ev("o-1", "lease-o", "2026-11-01T10:30:00Z", "2026-11-01T11:30:00Z"), // overlaps x-1
		ev("o-2", "lease-o", "2026-11-01T11:15:00Z", "2026-11-01T12:00:00Z"), // overlaps o-1 alone
		conflicting, // x-1's id, another body
		recorded,    // x-1 exactly: a duplicate
		conflicting, // the conflicting copy again: a conflict still
		withParties(ev("m-2", "lease-m", "2026-11-01T11:00:00Z", "2026-11-01T12:00:00Z"), "p-002", "r-002"), // not lease-m's parties
		ev("m-3", "lease-m", "2026-11-01T12:00:00Z", "2026-11-01T13:00:00Z"),                                // lease-m's parties
	}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range res.Rejected {
		got[fmt.Sprintf("%d %s", r.Index, r.ID)] = r.Reason
	}
	want := map[string]string{
		"0 o-1": "overlaps x-1 on lease lease-o",
		"2 x-1": domain.ConflictReason("x-1", []string{"gpu_count"}),
		"4 x-1": domain.ConflictReason("x-1", []string{"gpu_count"}),
		"5 m-2": "lease lease-m is recorded for provider p-001 and renter r-001",
	}
	if res.Accepted != 2 || res.Duplicates != 1 || len(got) != len(want) {
		t.Fatalf("got %+v; want o-2 and m-3 accepted, x-1 a duplicate once, rejected %v", res, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: reason %q, want %q", k, got[k], w)
		}
	}
	var n int
	if err := poolOf(a).QueryRow(ctx, `select count(*) from metering.usage_events where id in ('o-2', 'm-3')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d of o-2, m-3 recorded (%v)", n, err)
	}
}

// countingStore counts the write transactions an ingest begins.
type countingStore struct {
	app.Store
	txs int
}

func (s *countingStore) WithTx(ctx context.Context, fn func(app.Tx) error) error {
	s.txs++
	return s.Store.WithTx(ctx, fn)
}

// A call is judged at most twice however its events chain: the second
// round answers each event against recorded usage alone first. Without
// that, e-5 (overlapping e-2 only, and e-1 only) was judged against e-1,
// then against e-2, each refused by recorded usage in its own round: three
// transactions for three events.
func TestIngestJudgedAtMostTwice(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	if res, err := a.Ingest(ctx, []domain.EventInput{
		ev("x-1", "lease-c", "2026-11-01T10:00:00Z", "2026-11-01T10:10:00Z"),
		ev("x-2", "lease-c", "2026-11-01T10:30:00Z", "2026-11-01T10:40:00Z"),
	}, app.IngestOptions{}); err != nil || res.Accepted != 2 {
		t.Fatalf("recording: %+v %v", res, err)
	}
	st := &countingStore{Store: a.Store}
	a.Store = st
	res, err := a.Ingest(ctx, []domain.EventInput{
		ev("e-1", "lease-c", "2026-11-01T10:05:00Z", "2026-11-01T10:15:00Z"), // overlaps x-1
		ev("e-2", "lease-c", "2026-11-01T10:12:00Z", "2026-11-01T10:32:00Z"), // overlaps e-1 and x-2
		ev("e-5", "lease-c", "2026-11-01T10:13:00Z", "2026-11-01T10:14:00Z"), // overlaps e-1 and e-2 only
	}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 1 || len(res.Rejected) != 2 || res.Rejected[0].ID != "e-1" || res.Rejected[1].ID != "e-2" {
		t.Fatalf("got %+v; want e-1 and e-2 rejected against recorded time, e-5 accepted", res)
	}
	if st.txs > 2 {
		t.Fatalf("%d write transactions for one call; want at most 2", st.txs)
	}
}

// In a re-judged round recorded usage alone refuses events first
// (againstRecorded's probe), and GPU time is [start, end): an event
// starting exactly when a recorded one ends abuts it and is accepted. e-1
// overlaps recorded x-1 and a-1 in the batch; pass 3 refuses e-1, and the
// round judged again must not refuse a-1 against x-1, whose end is a-1's
// start.
func TestIngestRejudgedAbuttingEventAccepted(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	if res, err := a.Ingest(ctx, []domain.EventInput{
		ev("x-1", "lease-c", "2026-11-01T10:00:00Z", "2026-11-01T10:10:00Z"),
	}, app.IngestOptions{}); err != nil || res.Accepted != 1 {
		t.Fatalf("recording: %+v %v", res, err)
	}
	pool := poolOf(a)
	st := &countingStore{Store: a.Store}
	a.Store = st
	res, err := a.Ingest(ctx, []domain.EventInput{
		ev("e-1", "lease-c", "2026-11-01T10:05:00Z", "2026-11-01T10:15:00Z"), // overlaps x-1
		ev("a-1", "lease-c", "2026-11-01T10:10:00Z", "2026-11-01T10:12:00Z"), // overlaps e-1; abuts x-1
	}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.txs != 2 {
		t.Fatalf("%d write transactions, want 2: the batch was not judged again, so the probe was not tried", st.txs)
	}
	if res.Accepted != 1 || len(res.Rejected) != 1 || res.Rejected[0].ID != "e-1" || res.Rejected[0].Reason != "overlaps x-1 on lease lease-c" {
		t.Fatalf("got %+v; want e-1 rejected (overlaps x-1 on lease lease-c), a-1 accepted", res)
	}
	var n int
	if err := pool.QueryRow(ctx, `select count(*) from metering.usage_events where id = 'a-1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("a-1 recorded %d times (%v), want once", n, err)
	}
}

// A repeat of a recorded event is a duplicate forever, also once its start
// has passed the late-arrival limit (an agent resending its spool after an
// outage was told billed usage had been refused as too late); another body
// under its id past the limit stays refused.
func TestIngestLateRepeatIsADuplicate(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	old := ev("old-1", "lease-old", "2026-09-29T12:00:00Z", "2026-09-29T13:00:00Z") // 34 days before now
	if res, err := a.Ingest(ctx, []domain.EventInput{old}, app.IngestOptions{}); err != nil || res.Accepted != 1 {
		t.Fatalf("recording: %+v %v", res, err)
	}
	a.Clock.(*clock.Manual).Advance(2 * 24 * time.Hour)
	other := old
	other.GPUCount = 4
	unseen := ev("old-2", "lease-old-2", "2026-09-29T12:00:00Z", "2026-09-29T13:00:00Z")
	res, err := a.Ingest(ctx, []domain.EventInput{old, other, unseen}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 0 || res.Duplicates != 1 || len(res.Rejected) != 2 || res.Rejected[0].Index != 1 || res.Rejected[1].Index != 2 ||
		app.RejectionClass(res.Rejected[0].Reason) != "too_late" || app.RejectionClass(res.Rejected[1].Reason) != "too_late" {
		t.Fatalf("got %+v; want old-1 a duplicate, its other body and old-2 refused as too late", res)
	}
}

// A lease id is one lease however it is spelled around: white space around
// it is trimmed (as an event id's is), and an invisible character in it or
// in an event id is a rejection. "lease-9 " and "lease-9\u200b" were leases
// of their own: the same GPU time, sent again under a new event id, was
// recorded and charged twice.
func TestIngestLeaseIDSpelledAnotherWay(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	if res, err := a.Ingest(ctx, []domain.EventInput{ev("s-1", "lease-9", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z")}, app.IngestOptions{}); err != nil || res.Accepted != 1 {
		t.Fatalf("recording: %+v %v", res, err)
	}
	res, err := a.Ingest(ctx, []domain.EventInput{
		ev("s-2", "lease-9 ", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"),
		ev("s-3", "lease-9\u200b", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"),
		ev("s-4\ufeff", "lease-10", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"),
		ev("s-5", " ", "2026-11-01T10:00:00Z", "2026-11-01T11:00:00Z"),
	}, app.IngestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"overlap", "bad_text", "bad_text", "missing_field"}
	if res.Accepted != 0 || len(res.Rejected) != len(want) {
		t.Fatalf("got %+v; want every event rejected", res)
	}
	for i, r := range res.Rejected {
		if r.Index != i || app.RejectionClass(r.Reason) != want[i] {
			t.Errorf("rejection %d: %+v (%s), want %s", i, r, app.RejectionClass(r.Reason), want[i])
		}
	}
}

// TestReplicaMapsAnAliasAsTheCatalogueNowSays: two replicas share the
// database; a catalogue write on one (which clears only its own copy) moves
// an alias from one model to another. The other replica, whose copy already
// knew the alias, records the next event naming it under the model the
// catalogue now gives it, not the one its copy remembered (it reloaded only
// for a name it did not know: stored A_X, priced at A_X's rate, and the same
// event resent to the first replica was a conflict).
func TestReplicaMapsAnAliasAsTheCatalogueNowSays(t *testing.T) {
	t.Parallel()
	r1 := newApp(t)
	ctx := context.Background()
	r2 := app.New(postgres.NewStore(poolOf(r1)), clock.NewManual(now), cycles.Default())
	cat := &app.Catalogue{Store: &postgres.Catalogue{Pool: poolOf(r1)}, Clock: clock.NewManual(now)}
	put := func(m gpucatalog.Model) {
		t.Helper()
		if _, err := cat.Put(ctx, m); err != nil {
			t.Fatalf("put %s: %v", m.ID, err)
		}
	}
	modelOf := func(id string) string {
		t.Helper()
		var m string
		if err := poolOf(r1).QueryRow(ctx, `select gpu_model from metering.usage_events where id = $1`, id).Scan(&m); err != nil {
			t.Fatalf("event %s: %v", id, err)
		}
		return m
	}
	ingest := func(a *app.App, e domain.EventInput) app.IngestResult {
		t.Helper()
		res, err := a.Ingest(ctx, []domain.EventInput{e}, app.IngestOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	named := func(e domain.EventInput, model string) domain.EventInput { e.GPUModel = model; return e }

	put(gpucatalog.Model{ID: "A_X", Vendor: "nvidia", MemoryGB: 24, DisplayName: "A X", Aliases: []string{"XG"}})
	if res := ingest(r2, named(ev("e-1", "lease-1", "2026-11-01T20:00:00Z", "2026-11-01T21:00:00Z"), "XG")); res.Accepted != 1 {
		t.Fatalf("first XG event: %+v", res)
	}
	if got := modelOf("e-1"); got != "A_X" {
		t.Fatalf("first XG event recorded as %s, want A_X", got)
	}
	put(gpucatalog.Model{ID: "A_X", Vendor: "nvidia", MemoryGB: 24, DisplayName: "A X"})
	put(gpucatalog.Model{ID: "B_X", Vendor: "nvidia", MemoryGB: 48, DisplayName: "B X", Aliases: []string{"XG"}})

	e2 := named(ev("e-2", "lease-2", "2026-11-01T20:00:00Z", "2026-11-01T21:00:00Z"), "XG")
	if res := ingest(r2, e2); res.Accepted != 1 {
		t.Fatalf("XG event after the move, on the other replica: %+v", res)
	}
	if got := modelOf("e-2"); got != "B_X" {
		t.Errorf("XG event after the move recorded by the other replica as %s, want B_X", got)
	}
	if res := ingest(r1, e2); res.Duplicates != 1 || len(res.Rejected) != 0 {
		t.Errorf("the same event resent to the replica that wrote the catalogue: %+v, want a duplicate", res)
	}
}

// An event is late when its cycle has closed on arrival: at the cycle's
// End plus the grace (Closes), not at its End. Usage of cycle
// cyc-20260928 ([Sep 28, Nov 12), closing Nov 13) arriving during the
// grace day is accepted; arriving after Nov 13 it is late.
func TestIngestLateJudgedAtTheCycleClose(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	status := func(id string) string {
		t.Helper()
		var s string
		if err := poolOf(a).QueryRow(ctx, `select status from metering.usage_events where id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a.Clock.(*clock.Manual).Advance(10 * 24 * time.Hour) // 2026-11-12T12:00Z: past End, before Closes
	if res, err := a.Ingest(ctx, []domain.EventInput{ev("g-1", "lease-g", "2026-11-11T22:00:00Z", "2026-11-11T23:00:00Z")}, app.IngestOptions{}); err != nil || res.Accepted != 1 {
		t.Fatalf("in grace: %+v %v", res, err)
	}
	if got := status("g-1"); got != domain.StatusAccepted {
		t.Fatalf("usage of cyc-20260928 arriving in its grace day: status %q, want %q", got, domain.StatusAccepted)
	}
	// The cycle closes after Closes, not at it: usage arriving at the
	// instant itself still accrues to it.
	a.Clock.(*clock.Manual).Set(time.Date(2026, 11, 13, 0, 0, 0, 0, time.UTC)) // Closes exactly
	if res, err := a.Ingest(ctx, []domain.EventInput{ev("g-3", "lease-h", "2026-11-11T22:00:00Z", "2026-11-11T23:00:00Z")}, app.IngestOptions{}); err != nil || res.Accepted != 1 {
		t.Fatalf("at the close: %+v %v", res, err)
	}
	if got := status("g-3"); got != domain.StatusAccepted {
		t.Fatalf("usage of cyc-20260928 arriving at its close instant: status %q, want %q", got, domain.StatusAccepted)
	}
	a.Clock.(*clock.Manual).Set(time.Date(2026, 11, 13, 12, 0, 0, 0, time.UTC)) // past Closes
	if res, err := a.Ingest(ctx, []domain.EventInput{ev("g-2", "lease-g", "2026-11-11T23:00:00Z", "2026-11-12T00:00:00Z")}, app.IngestOptions{}); err != nil || res.Accepted != 1 {
		t.Fatalf("after close: %+v %v", res, err)
	}
	if got := status("g-2"); got != domain.StatusLate {
		t.Fatalf("usage of cyc-20260928 arriving after it closed: status %q, want %q", got, domain.StatusLate)
	}
}
