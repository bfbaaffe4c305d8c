package settlement

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
)

// After a restore (README "Backups and restore": Temporal's store is not
// in the snapshot) settlement starts on a new Temporal and creates its
// schedules there. Backed up at 00:30 on 1 January 2027 in Shanghai and
// restored at 10:00: Temporal runs no schedule for a time before it was
// created, so invoices-monthly (01:00) and tax-remittance-monthly (02:00)
// next ran on 1 February, December's invoices were never issued and its
// withheld tax sat in tax:withheld (GpubillTaxNotRemitted only at 33
// days). A schedule start-up creates runs what it would have run since the
// start of its period (the month, for the daily reconciliation the day),
// at its nominal time, so the monthly runs work on December; one start-up
// finds is left as it is (Temporal catches its own outages up).
func TestNewSchedulesRunWhatTheirPeriodMissed(t *testing.T) {
	t.Parallel()
	sh := taxperiod.Default().Location()
	restore := time.Date(2027, 1, 1, 10, 0, 0, 0, sh)
	tc := dialTemporal(t, testkit.NewTemporal(t))
	f := newFixture(t, tc)
	f.clock.Set(restore)
	ctx := context.Background()
	// EnsureSchedules as start-up calls it: no worker, so the backfilled
	// runs wait in the task queue and are only counted.
	if err := f.s.ensureSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	sc := tc.ScheduleClient()
	tests := []struct {
		give string
		want []time.Time // nominal times of the actions taken at creation
	}{
		{ports.ScheduleInvoicesMonthly, []time.Time{time.Date(2027, 1, 1, 1, 0, 0, 0, sh)}},
		{ports.ScheduleRemittanceMonthly, []time.Time{time.Date(2027, 1, 1, 2, 0, 0, 0, sh)}},
		{ports.ScheduleReconciliation, []time.Time{time.Date(2027, 1, 1, 6, 0, 0, 0, sh)}},
		{ports.ScheduleCommissionSweep, nil}, // hourly: the next within the hour
	}
	for _, tt := range tests {
		var d *client.ScheduleDescription
		// Backfills are taken by the schedule's workflow shortly after
		// creation.
		testkit.Eventually(t, 30*time.Second, func() bool {
			var err error
			d, err = sc.GetHandle(ctx, tt.give).Describe(ctx)
			return err == nil && len(d.Info.RecentActions) >= len(tt.want)
		}, tt.give+" took its backfilled actions")
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
	// one before (TemporalScheduledStartTime; NominalStart).
	if id := ports.ScheduleInvoicesMonthly + "-2026-12-31T17:00:00Z"; !workflowExists(t, tc, id) {
		t.Errorf("no workflow %s", id)
	}

	// Start-up again: the schedules exist; nothing is run again.
	f.clock.Set(restore.Add(time.Hour))
	if err := f.s.ensureSchedules(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := sc.GetHandle(ctx, ports.ScheduleInvoicesMonthly).Describe(ctx)
	if err != nil || len(d.Info.RecentActions) != 1 {
		t.Fatalf("invoices-monthly after a second start-up: %+v, %v; want its one backfilled action", d, err)
	}
}
