package app_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/metering/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// TestListUsageByPartyThroughLeases: a party's usage is listed through
// usage_leases (migration 0010), a lease's through its index, and every
// page sequence equals the same selection made directly on usage_events:
// leases interleaved in time, a lease whose events name two renters, a
// lease that later gains an earlier event and events on later days, one
// that later gains a pair of parties, windows whose lower bound falls on
// the day a lease ended.
func TestListUsageByPartyThroughLeases(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	if _, err := a.CreateProvider(ctx, domain.ProviderInput{ID: "p-002", Tier: "pro", TaxProfile: "individual", Jurisdiction: "CN", PUE: "1.6", Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateRenter(ctx, domain.RenterInput{ID: "r-002", Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	day := now.Truncate(24 * time.Hour).Add(-20 * 24 * time.Hour) // midnight UTC, 20 days back
	at := func(d, h, m int) time.Time {
		return day.Add(time.Duration(d)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
	}
	n := 0
	event := func(lease, renter, provider string, start time.Time, minutes int) domain.EventInput {
		n++
		e := ev(fmt.Sprintf("evt-%03d", n), lease, start.Format(time.RFC3339), start.Add(time.Duration(minutes)*time.Minute).Format(time.RFC3339))
		e.RenterID, e.ProviderID = renter, provider
		return e
	}
	// Usage of a lease naming a second pair of parties is refused since
	// leases are held to one (TestIngestLeaseKeepsItsParties); usage
	// recorded before is listed all the same: written here past ingest.
	legacy := func(in ...domain.EventInput) {
		t.Helper()
		var recs []domain.Recorded
		leases := map[string]bool{}
		for _, e := range in {
			start, err := time.Parse(time.RFC3339, e.StartTime)
			if err != nil {
				t.Fatal(err)
			}
			end, err := time.Parse(time.RFC3339, e.EndTime)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, domain.Recorded{Event: domain.Event{ID: e.ID, LeaseID: e.LeaseID, ProviderID: e.ProviderID, RenterID: e.RenterID,
				GPUModel: e.GPUModel, GPUCount: e.GPUCount, Start: start, End: end, Region: e.Region, Workload: e.Workload},
				CycleID: cycles.Default().ForUsageEnd(end).ID, Status: domain.StatusAccepted, ReceivedAt: now})
			leases[e.LeaseID] = true
		}
		if err := a.Store.WithTx(ctx, func(tx app.Tx) error {
			if err := tx.LockLeases(ctx, slices.Collect(maps.Keys(leases))); err != nil {
				return err
			}
			got, err := tx.InsertUsage(ctx, recs)
			if err == nil && len(got) != len(recs) {
				err = fmt.Errorf("inserted %d of %d", len(got), len(recs))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	var first, second, later []domain.EventInput
	for d := 0; d < 6; d++ {
		first = append(first,
			event("lease-a", "r-001", "p-001", at(d, 10, 0), 60),
			event("lease-b", "r-001", "p-002", at(d, 10, 0), 30), // the same start as lease-a: ids break the tie
			event("lease-c", "r-002", "p-001", at(d, 11, 0), 60))
		if e := event("lease-d", []string{"r-001", "r-002"}[d%2], "p-001", at(d, 12, 0), 60); d%2 == 0 {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	first = append(first, event("lease-e", "r-001", "p-001", at(3, 14, 0), 60)) // ends on day 3: its last
	if res, err := a.Ingest(ctx, first, app.IngestOptions{}); err != nil || res.Accepted != len(first) {
		t.Fatal(res, err)
	}
	legacy(second...) // lease-d's usage names two renters
	later = append(later,
		event("lease-a", "r-001", "p-001", at(-2, 9, 0), 60),  // before lease-a's first start
		event("lease-a", "r-001", "p-001", at(9, 23, 30), 60), // after its last day, ending the day after
		event("lease-b", "r-001", "p-002", at(8, 10, 0), 30),
		event("lease-f", "r-002", "p-002", at(7, 8, 0), 60)) // a new lease beside them
	if res, err := a.Ingest(ctx, later, app.IngestOptions{}); err != nil || res.Accepted != len(later) {
		t.Fatal(res, err)
	}
	legacy(event("lease-c", "r-001", "p-001", at(7, 11, 0), 60)) // a lease with rows gains a pair of parties
	// Each lease and pair of parties has one row, spanning its events.
	var wrong int
	if err := poolOf(a).QueryRow(ctx, `select count(*) from (
			(select lease_id, renter_id, provider_id, min(start_time), max((end_time at time zone 'UTC')::date)
			 from metering.usage_events group by 1, 2, 3
			 except select lease_id, renter_id, provider_id, first_start, last_day from metering.usage_leases)
			union all
			(select lease_id, renter_id, provider_id, first_start, last_day from metering.usage_leases
			 except select lease_id, renter_id, provider_id, min(start_time), max((end_time at time zone 'UTC')::date)
			 from metering.usage_events group by 1, 2, 3)) d`).Scan(&wrong); err != nil || wrong != 0 {
		t.Fatalf("usage_leases differs from its events in %d rows (%v)", wrong, err)
	}

	queries := []app.UsageQuery{
		{RenterID: "r-001"}, {RenterID: "r-002"}, {ProviderID: "p-001"}, {ProviderID: "p-002"},
		{RenterID: "r-001", ProviderID: "p-001"}, {RenterID: "r-002", ProviderID: "p-001"},
		{RenterID: "r-001", From: at(3, 13, 0)},  // lease-e's last event starts after it, on the same day
		{RenterID: "r-001", From: at(3, 15, 30)}, // after lease-e's end, the same day
		{RenterID: "r-001", From: at(9, 0, 0)},   // only lease-a's event of the later ingest
		{RenterID: "r-001", To: at(0, 0, 0)},     // only lease-a's earlier event
		{ProviderID: "p-001", From: at(1, 10, 30), To: at(4, 11, 0)},
		{ProviderID: "p-002", From: at(5, 0, 0), To: at(30, 0, 0)},
		// By lease, through the lease index alone.
		{LeaseID: "lease-a"}, {LeaseID: "lease-d"}, {LeaseID: "lease-d", RenterID: "r-002"},
		{LeaseID: "lease-c", ProviderID: "p-001", From: at(2, 0, 0)}, {LeaseID: "lease-a", From: at(1, 0, 0), To: at(4, 10, 0)},
	}
	for _, q := range queries {
		for _, size := range []int{1, 3, 100} {
			q.PageSize = size
			if got, want := listAll(t, a, q), directly(t, a, q); !slices.Equal(got, want) {
				t.Errorf("%+v in pages of %d:\n got %v\nwant %v", q, size, got, want)
			}
		}
	}
}

// listAll is the ids of every page of q, in order.
func listAll(t *testing.T, a *app.App, q app.UsageQuery) []string {
	t.Helper()
	var ids []string
	for q.PageToken = ""; ; {
		rows, next, err := a.ListUsage(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if next == "" {
			return ids
		}
		q.PageToken = next
	}
}

// directly is q's selection made on usage_events alone.
func directly(t *testing.T, a *app.App, q app.UsageQuery) []string {
	t.Helper()
	var from, to any
	if !q.From.IsZero() {
		from = q.From
	}
	if !q.To.IsZero() {
		to = q.To
	}
	rows, err := poolOf(a).Query(context.Background(), `select id from metering.usage_events
		where ($1 = '' or renter_id = $1) and ($2 = '' or provider_id = $2) and ($5 = '' or lease_id = $5)
		  and ($3::timestamptz is null or start_time >= $3) and ($4::timestamptz is null or start_time < $4)
		order by start_time, id`, q.RenterID, q.ProviderID, from, to, q.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) == 0 {
		t.Fatalf("%+v selects no usage: the case tests nothing", q)
	}
	return ids
}

// Long leases, usageLeaseEvents six-minute events each (200 days), recorded
// side by side as a deployment's leases are: each lease's rows spread over
// the whole heap.
const (
	usageLongLeases  = 20
	usageLeaseEvents = 5000
)

// TestListUsagePageReadsAPage: a page of a lease's or a party's usage, deep
// in long leases, reads about a page of rows, under the generic plan
// Postgres keeps for the listing's statements (testkit.GenericPlanPool;
// the old statements went generic on their sixth run on a connection).
// With "$4 is null or start_time >= $4" each page read every event of each
// lease (the generic plan cannot bound the index scan). Each lease's rows
// taken in the index's order (FETCH FIRST … WITH TIES) is not what this
// test checks: on its data, the generic plans of rows ordered by
// (start_time, id) used the index's order too.
func TestListUsagePageReadsAPage(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	ctx := context.Background()
	pool := poolOf(a)
	day := now.Truncate(24*time.Hour).AddDate(0, 0, -250)
	if _, err := pool.Exec(ctx, `insert into metering.usage_events (id, lease_id, provider_id, renter_id, gpu_model, gpu_count,
			start_time, end_time, region, workload, cycle_id, status, received_at)
		select format('ev-%s-%s', l, e), 'lease-long-' || l, 'p-001', 'r-00' || (1 + l % 2), 'RTX_4090', 1,
			$1::timestamptz + e * interval '6 minutes', $1::timestamptz + (e + 1) * interval '6 minutes',
			'cn-east', 'training', 'cyc', 'recorded', $1::timestamptz
		from generate_series(0, $2 - 1) e, generate_series(0, $3 - 1) l order by e, l`, day, usageLeaseEvents, usageLongLeases); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into metering.usage_leases (lease_id, renter_id, provider_id, first_start, last_day)
		select lease_id, renter_id, provider_id, min(start_time), max((end_time at time zone 'UTC')::date)
		from metering.usage_events group by 1, 2, 3`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `vacuum analyze metering.usage_events, metering.usage_leases`); err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := pool.QueryRow(ctx, `select relpages from pg_class where oid = 'metering.usage_events'::regclass`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	generic := app.New(postgres.NewStore(testkit.GenericPlanPool(t, ctx, pool)), clock.NewManual(now), cycles.Default())
	mid := day.Add(usageLeaseEvents / 2 * 6 * time.Minute)
	// A party's page reads a page from each of its leases: r-001 has ten.
	// Before, the lease's two pages read 3 334 heap pages and the party's
	// 17 373 (each page every event of each lease).
	for _, c := range []struct {
		q   app.UsageQuery
		max int64
	}{
		{app.UsageQuery{LeaseID: "lease-long-3", From: mid, PageSize: 100}, pages / 8},
		{app.UsageQuery{RenterID: "r-001", From: mid, PageSize: 100}, pages},
	} {
		q := c.q
		var got []string
		read := testkit.HeapPagesRead(t, ctx, pool, generic.Store.(*postgres.Store).Pool, "metering", "usage_events", func() {
			rows, next, err := generic.ListUsage(ctx, q) // a page from the window's start
			if err != nil || next == "" {
				t.Fatal(next, err)
			}
			q.PageToken = next // and the page after it, from the cursor
			more, _, err := generic.ListUsage(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range append(rows, more...) {
				got = append(got, r.ID)
			}
		})
		if len(got) != 200 {
			t.Fatalf("%+v: %d rows in two pages of 100", q, len(got))
		}
		t.Logf("%+v: two pages of 100 read %d of the table's %d heap pages", q, read, pages)
		if read > c.max {
			t.Errorf("%+v: two pages of 100 read %d of the table's %d heap pages, more than %d", q, read, pages, c.max)
		}
	}
}
