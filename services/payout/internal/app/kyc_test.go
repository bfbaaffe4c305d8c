package app

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// kycStore is gateStore whose provider's KYC reads kyc.
type kycStore struct {
	gateStore
	kyc string
}

func (s *kycStore) KYCStatus(context.Context, string) (string, error) { return s.kyc, nil }

// keyLedger covers every payout and keeps the keys posted to it.
type keyLedger struct{ keys []string }

func (l *keyLedger) Available(context.Context, string, string) (decimal.Decimal, error) {
	return decimal.NewFromInt(1_000_000), nil
}
func (l *keyLedger) Transfer(_ context.Context, t domain.LedgerTransfer) error {
	l.keys = append(l.keys, t.Key)
	return nil
}

// A payout past the gate whose rail was down when its provider's KYC was
// rejected is not handed to the rail once it recovers: the rail never had
// its reference, so it fails kyc_rejected, its amount posted back to
// available. It was paid hours after finance rejected the provider for
// fraud. Each stop is counted (gpubill_payout_kyc_rejected_total): it read
// as any other failed payout, and only a WARN line said why. Not parallel:
// the counter is the process's.
func TestSubmitStopsAPayoutOfARejectedKYC(t *testing.T) {
	ctx := context.Background()
	before := counterValue(t, "gpubill_payout_kyc_rejected_total")
	st := &kycStore{gateStore: gateStore{readStore: readStore{p: submittingPayout(domain.StatusCreated)}}, kyc: domain.KYCVerified}
	l := &keyLedger{}
	rail := &bookRail{name: "alipay", refs: map[string]bool{}, down: true}
	a := &Payouts{Store: st, Ledger: l, Rail: rail, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := a.Submit(ctx, "po_1"); err == nil {
		t.Fatal("Submit with the rail down answered no error")
	}
	st.kyc, rail.down = domain.KYCRejected, false
	got, err := a.Submit(ctx, "po_1")
	if err != nil || got != domain.StatusFailed {
		t.Fatalf("Submit after the KYC was rejected answered %q, %v; want failed", got, err)
	}
	if len(rail.refs) != 0 {
		t.Fatalf("the rail has %v; want nothing: the provider's KYC is rejected", rail.refs)
	}
	if st.p.FailureCode != domain.FailKYCRejected || st.p.Submitting {
		t.Fatalf("payout failed %q (submitting %v); want %s, no longer submitting", st.p.FailureCode, st.p.Submitting, domain.FailKYCRejected)
	}
	want := []string{"payout-po_1-1-submitted", "payout-po_1-1-submitted", "payout-po_1-1-failed"}
	if !slices.Equal(l.keys, want) {
		t.Fatalf("ledger posted %q; want %q (its submission returned to available)", l.keys, want)
	}
	if n := counterValue(t, "gpubill_payout_kyc_rejected_total") - before; n != 1 {
		t.Fatalf("gpubill_payout_kyc_rejected_total rose by %v; want 1 (the payout stopped)", n)
	}
	if domain.PayeeFailure(domain.FailKYCRejected) {
		t.Fatal("kyc_rejected waits for a method change to be retried; want a retry once finance verified the KYC again")
	}
}

// counterValue reads the counter named name (no labels) from the
// process's registry, as /metrics serves it.
func counterValue(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s on /metrics", name)
	return 0
}
