package settlement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
)

// After a restore (README "Backups and restore": Temporal's store is not
// in the snapshot) settlement starts on a new Temporal and creates its
// schedules there. Temporal runs no schedule for a time before it was
// created: restored at 10:00 on 1 January 2027 in Shanghai from a backup of
// 00:30, invoices-monthly (01:00) and tax-remittance-monthly (02:00) next
// ran on 1 February, December's invoices were never issued and its
// withheld tax sat in tax:withheld (GpubillTaxNotRemitted only at 33
// days). Restored at 10:00 on 2 February from a backup of 31 December, the
// window from the 1st of the restore's month lost January 1st's runs too:
// December again. A schedule start-up creates runs what it would have run
// since the 1st of the month before (both monthly runs are idempotent per
// month: a month run already is run again for nothing), at its nominal
// time (the daily reconciliation is not backfilled), so the monthly runs
// work on December, then January; one start-up finds is left as it is
// (Temporal catches its own outages up).
func TestNewSchedulesRunWhatTheirPeriodMissed(t *testing.T) {
	t.Parallel()
	sh := taxperiod.Default().Location()
	restore := time.Date(2027, 2, 2, 10, 0, 0, 0, sh)
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc)
	f.clock.Set(restore)
	ctx := context.Background()
	// EnsureSchedules as start-up calls it: no worker, so the backfilled
	// runs wait in the task queue and are only counted (backfilledActions).
	if err := f.s.ensureSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	sc := tc.ScheduleClient()
	tests := []struct {
		give string
		want []time.Time // nominal times of the actions taken at creation
	}{
		{ports.ScheduleInvoicesMonthly, []time.Time{time.Date(2027, 1, 1, 1, 0, 0, 0, sh), time.Date(2027, 2, 1, 1, 0, 0, 0, sh)}},
		{ports.ScheduleRemittanceMonthly, []time.Time{time.Date(2027, 1, 1, 2, 0, 0, 0, sh), time.Date(2027, 2, 1, 2, 0, 0, 0, sh)}},
		{ports.ScheduleReconciliation, nil},  // daily: its next 06:00
		{ports.ScheduleCommissionSweep, nil}, // hourly: the next within the hour
	}
	for _, tt := range tests {
		d := backfilledActions(t, tc, tt.give, len(tt.want))
		var got []time.Time
		for _, a := range d.Info.RecentActions {
			got = append(got, a.ScheduleTime)
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: actions at %v, want at %v", tt.give, got, tt.want)
			continue
		}
		for i := range got {
			if !got[i].Equal(tt.want[i]) {
				t.Errorf("%s: actions at %v, want at %v", tt.give, got, tt.want)
			}
		}
	}
	// The run's id carries its nominal time: the month it works on is the
	// one before (TemporalScheduledStartTime; NominalStart), December's and
	// January's.
	for _, id := range []string{
		ports.ScheduleInvoicesMonthly + "-2026-12-31T17:00:00Z", ports.ScheduleInvoicesMonthly + "-2027-01-31T17:00:00Z",
		ports.ScheduleRemittanceMonthly + "-2026-12-31T18:00:00Z", ports.ScheduleRemittanceMonthly + "-2027-01-31T18:00:00Z",
	} {
		if !workflowExists(t, tc, id) {
			t.Errorf("no workflow %s", id)
		}
	}

	// Start-up again: the schedules exist; nothing is run again.
	f.clock.Set(restore.Add(time.Hour))
	if err := f.s.ensureSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := sc.GetHandle(ctx, ports.ScheduleInvoicesMonthly).Describe(ctx)
	if err != nil || len(d.Info.RecentActions) != 2 {
		t.Fatalf("invoices-monthly after a second start-up: %+v, %v; want its two backfilled actions", d, err)
	}
}

// backfilledActions describes the schedule id once it has taken n actions
// (at least one look). Backfills are taken by the schedule's workflow
// shortly after creation; with overlap BUFFER_ALL the next starts only
// once the one running has closed: with no worker the test ends each run
// (terminated) as a worker's completing it would, so the months run one
// after the other, in order.
func backfilledActions(t *testing.T, tc client.Client, id string, n int) *client.ScheduleDescription {
	t.Helper()
	ctx := context.Background()
	var d *client.ScheduleDescription
	for k := 1; ; k++ {
		testkit.Eventually(t, 30*time.Second, func() bool {
			var err error
			d, err = tc.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
			return err == nil && len(d.Info.RecentActions) >= min(k, n)
		}, fmt.Sprintf("%s took %d of its %d backfilled actions", id, min(k, n), n))
		if k >= n {
			return d
		}
		for _, w := range d.Info.RunningWorkflows {
			if err := tc.TerminateWorkflow(ctx, w.WorkflowID, w.FirstExecutionRunID, "test: the next backfilled action"); err != nil {
				t.Fatal(err)
			}
		}
	}
}
