package app_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// TestListUsageByPartyThroughLeases: a party's usage is listed through
// usage_leases (migration 0010), and every page sequence equals the same
// selection made directly on usage_events: leases interleaved in time, a
// lease whose events name two renters, a lease that later gains an earlier
// event and events on later days, one that later gains a pair of parties,
// windows whose lower bound falls on the
// day a lease ended.
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
	var first, later []domain.EventInput
	for d := 0; d < 6; d++ {
		first = append(first,
			event("lease-a", "r-001", "p-001", at(d, 10, 0), 60),
			event("lease-b", "r-001", "p-002", at(d, 10, 0), 30), // the same start as lease-a: ids break the tie
			event("lease-c", "r-002", "p-001", at(d, 11, 0), 60),
			event("lease-d", []string{"r-001", "r-002"}[d%2], "p-001", at(d, 12, 0), 60))
	}
	first = append(first, event("lease-e", "r-001", "p-001", at(3, 14, 0), 60)) // ends on day 3: its last
	if res, err := a.Ingest(ctx, first, app.IngestOptions{}); err != nil || res.Accepted != len(first) {
		t.Fatal(res, err)
	}
	later = append(later,
		event("lease-a", "r-001", "p-001", at(-2, 9, 0), 60),  // before lease-a's first start
		event("lease-a", "r-001", "p-001", at(9, 23, 30), 60), // after its last day, ending the day after
		event("lease-b", "r-001", "p-002", at(8, 10, 0), 30),
		event("lease-c", "r-001", "p-001", at(7, 11, 0), 60), // a lease with rows gains a pair of parties
		event("lease-f", "r-002", "p-002", at(7, 8, 0), 60))  // a new lease beside them
	if res, err := a.Ingest(ctx, later, app.IngestOptions{}); err != nil || res.Accepted != len(later) {
		t.Fatal(res, err)
	}
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
		where ($1 = '' or renter_id = $1) and ($2 = '' or provider_id = $2)
		  and ($3::timestamptz is null or start_time >= $3) and ($4::timestamptz is null or start_time < $4)
		order by start_time, id`, q.RenterID, q.ProviderID, from, to)
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
