package bankfile

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A provider's KYC rejected by finance (fraud, sanctions) keeps its bank
// transfer queued for the cutoff out of the cut, as a payout hold does, and
// the rejection's answer names its payout waiting. The KYC was a plain
// upsert the cut never read: p-1's transfer queued at 09:00, rejected at
// 10:00 with a 200, went in the 16:00 bank file.
func TestKYCRejectedKeepsAQueuedTransferOutOfTheCut(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-free", "CNY", "100.00", bank("6222000011110001"))
	f.submit(t, "po-rej", "CNY", "200.00", bank("6222000011110002"))
	if _, err := f.r.Pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			status_reason, method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
		values ('po-rej', 'p-po-rej', 'cyc-20260101', 'CNY', 300, 60, 40, 200, 'submitted', 'submitted', 'bank', '', 'po-rej', true, 1, now(), now())`); err != nil {
		t.Fatal(err)
	}
	s := &postgres.Store{Pool: f.r.Pool}
	waiting, inFlight, err := s.PutKYC(ctx, "p-po-rej", domain.KYCRejected, "sanctions hit", false, f.clk.Now())
	if err != nil || !slices.Equal(waiting, []string{"po-rej"}) || len(inFlight) != 0 {
		t.Fatalf("KYC rejection answered waiting %v, in flight %v (%v); want po-rej waiting", waiting, inFlight, err)
	}
	// Its payout's workflow, woken, reads it held: no arrival date (the
	// cutoff after its queuing, which the cut will not carry it in).
	if st := f.state(t, "po-rej"); st.Held == "" || !st.ExpectedArrival.IsZero() {
		t.Fatalf("rail answers the transfer of a rejected KYC held %q, arriving %v; want held, no arrival date", st.Held, st.ExpectedArrival)
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
		t.Fatalf("batch %s carries [%s]; want [po-free]: po-rej's provider's KYC is rejected", id, got)
	}
	var state string
	if err := f.r.Pool.QueryRow(ctx, `select state from payout.bank_transfers where reference = 'po-rej'`).Scan(&state); err != nil || state != stateQueued {
		t.Fatalf("transfer of a rejected KYC is %q (%v); want queued", state, err)
	}
	// Verified again by finance: the next cut carries it.
	if _, _, err := s.PutKYC(ctx, "p-po-rej", domain.KYCVerified, "cleared", false, f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	id2, built2, err := cutOne(f.r.Cut(ctx, cut1.AddDate(0, 0, 1)))
	if err != nil || !built2 {
		t.Fatal(id2, built2, err)
	}
	if got := carried(id2); got != "po-rej" {
		t.Fatalf("batch %s after the verdict changed carries [%s]; want [po-rej]", id2, got)
	}
}
