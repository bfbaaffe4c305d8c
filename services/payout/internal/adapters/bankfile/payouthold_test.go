package bankfile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// A provider's payout hold (finance, payout.holds) keeps the provider's
// queued transfer out of the cut: it stays queued, and once the hold is
// released the next cut carries it. The cut read no hold: a transfer
// queued at 09:00 for the 16:00 cutoff was paid during its provider's
// fraud dispute, held at 10:00.
func TestPayoutHoldKeepsAQueuedTransferOutOfTheCut(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-free", "CNY", "100.00", bank("6222000011110001"))
	f.submit(t, "po-held", "CNY", "200.00", bank("6222000011110002"))
	if _, err := f.r.Pool.Exec(ctx, `insert into payout.holds (provider_id, reason, held_at) values ('p-po-held', 'fraud dispute', now())`); err != nil {
		t.Fatal(err)
	}
	carried := func(id string) string {
		t.Helper()
		file, err := f.r.BatchFile(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		p, err := iso20022.ParsePain001(file)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(e2es(p), " ")
	}
	cut1 := f.r.LastCutoff(day1.Add(5 * time.Hour))
	id, built, err := cutOne(f.r.Cut(ctx, cut1))
	if err != nil || !built {
		t.Fatal(id, built, err)
	}
	if got := carried(id); got != "po-free" {
		t.Fatalf("batch %s carries [%s]; want [po-free]: po-held's provider is held", id, got)
	}
	var state string
	if err := f.r.Pool.QueryRow(ctx, `select state from payout.bank_transfers where reference = 'po-held'`).Scan(&state); err != nil || state != stateQueued {
		t.Fatalf("held transfer is %q (%v); want queued", state, err)
	}
	// Released: the next cut carries it.
	if _, err := f.r.Pool.Exec(ctx, `delete from payout.holds where provider_id = 'p-po-held'`); err != nil {
		t.Fatal(err)
	}
	id2, built2, err := cutOne(f.r.Cut(ctx, cut1.AddDate(0, 0, 1)))
	if err != nil || !built2 {
		t.Fatal(id2, built2, err)
	}
	if got := carried(id2); got != "po-held" {
		t.Fatalf("batch %s after the release carries [%s]; want [po-held]", id2, got)
	}
}

// A queued transfer its provider's hold keeps out of the cut has no
// expected arrival while held (the rail says why: the hold's reason), and
// released, the first cutoff after the release: not the one after it was
// queued. A provider polling its payouts read the 2026-12-01 of a transfer
// queued that morning and held for days, a date long passed.
func TestHeldQueuedTransferArrivesAfterTheRelease(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	if st := f.submit(t, "po-held", "CNY", "200.00", bank("6222000011110002")); st.ExpectedArrival.Format(time.DateOnly) != "2026-12-01" || st.Held != "" {
		t.Fatalf("queued at 10:00 for the 14:00 cutoff: arrival %s, held %q; want 2026-12-01, not held", st.ExpectedArrival.Format(time.DateOnly), st.Held)
	}
	if _, err := f.r.Pool.Exec(ctx, `insert into payout.holds (provider_id, reason, held_at) values ('p-po-held', 'fraud dispute', now())`); err != nil {
		t.Fatal(err)
	}
	if st := f.state(t, "po-held"); st.State != app.RailAccepted || !st.ExpectedArrival.IsZero() || st.Held != "fraud dispute" {
		t.Fatalf("held: %s, arrival %s, held %q; want accepted, no date (unknown while held), held %q",
			st.State, st.ExpectedArrival.Format(time.DateOnly), st.Held, "fraud dispute")
	}
	// Released on Thursday after its cutoff, as postgres.Store.PutHold
	// releases: Friday's cutoff carries it.
	released := time.Date(2026, 12, 3, 15, 0, 0, 0, shanghai)
	if _, err := f.r.Pool.Exec(ctx, `delete from payout.holds where provider_id = 'p-po-held';
		update payout.bank_transfers set hold_released_at = '2026-12-03T15:00:00+08:00' where reference = 'po-held'`); err != nil {
		t.Fatal(err)
	}
	if st := f.state(t, "po-held"); st.ExpectedArrival.Format(time.DateOnly) != "2026-12-04" || st.Held != "" {
		t.Fatalf("released %s: arrival %s, held %q; want 2026-12-04 (the first cutoff after the release), not held",
			released.Format(time.DateTime), st.ExpectedArrival.Format(time.DateOnly), st.Held)
	}
}

// A bank report naming a transfer canceled in the queue (never in a file,
// its payout's money back in available) is a conflict for finance: read
// as a queued one, a booking or a return was applied to it.
func TestReportOfACanceledTransferIsAConflict(t *testing.T) {
	for _, to := range []string{stateBatched, stateAccepted, stateBooked, stateRejected, stateReturned} {
		if got := decide(stateCanceled, to, false); got != app.EntryConflict {
			t.Errorf("canceled, the file says %s: %s; want %s", to, got, app.EntryConflict)
		}
	}
}
