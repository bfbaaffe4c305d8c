package bankfile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/iso20022"
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
	id, built, err := f.r.Cut(ctx, cut1)
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
	id2, built2, err := f.r.Cut(ctx, cut1.AddDate(0, 0, 1))
	if err != nil || !built2 {
		t.Fatal(id2, built2, err)
	}
	if got := carried(id2); got != "po-held" {
		t.Fatalf("batch %s after the release carries [%s]; want [po-held]", id2, got)
	}
}
