package subjects_test

import (
	"testing"

	"github.com/gpubill/gpubill/pkg/subjects"
)

// The wire names are a contract with deployed consumers and node agents:
// each is spelled out here, not derived from the constants.
func TestFamiliesOnTheWire(t *testing.T) {
	tests := []struct {
		give subjects.Family
		key  string
		want string
	}{
		{subjects.UsageIngest, "p-1", "usage.ingest.p-1"},
		{subjects.UsageRecorded, "p-1", "usage.recorded.p-1"},
		{subjects.ChargesRated, "p-1", "charges.rated.p-1"},
		{subjects.LedgerPosted, "provider", "ledger.posted.provider"},
		{subjects.WalletDepleted, "r-1", "billing.wallet.depleted.r-1"},
		{subjects.PartyUpdated, "p-1", "party.updated.p-1"},
		{subjects.GPUModelUpdated, "H100", "gpu_model.updated.H100"},
		{subjects.CycleClosed, "cyc-20261130", "settlement.cycle.closed.cyc-20261130"},
		{subjects.ProviderSettled, "p-1", "settlement.settled.p-1"},
		{subjects.PayoutStatusChanged, "p-1", "payout.status_changed.p-1"},
		{subjects.AuditRecorded, "ledger", "audit.recorded.ledger"},
		{subjects.LeaseRunwayLow, "r-1", "lease.runway.low.r-1"},
		{subjects.LeaseStopRequested, "r-1", "lease.stop.requested.r-1"},
		{subjects.LeaseResumeAllowed, "r-1", "lease.resume.allowed.r-1"},
	}
	for _, tt := range tests {
		if got := tt.give.Of(tt.key); got != tt.want {
			t.Errorf("%s.Of(%q) = %q, want %q", tt.give, tt.key, got, tt.want)
		}
		if got, ok := tt.give.Key(tt.want); !ok || got != tt.key {
			t.Errorf("%s.Key(%q) = %q, %v, want %q", tt.give, tt.want, got, ok, tt.key)
		}
	}
}

func TestKeyRefusesAnotherFamily(t *testing.T) {
	tests := []struct {
		give string
	}{
		{"settlement.cycle.closed.cyc-20261130"}, // shares the "settlement." domain
		{"settlement.settled."},                  // no key
		{"settlement.settled"},
		{"usage.recorded.p-1"},
	}
	for _, tt := range tests {
		if k, ok := subjects.ProviderSettled.Key(tt.give); ok {
			t.Errorf("ProviderSettled.Key(%q) = %q, true; want false", tt.give, k)
		}
	}
	if got := subjects.UsageRecorded.All(); got != "usage.recorded.>" {
		t.Errorf("All = %q", got)
	}
}
