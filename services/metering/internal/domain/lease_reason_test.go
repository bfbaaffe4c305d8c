package domain

import "testing"

// A meter bound to a provider is told the parties of a lease only when
// they are its own provider's; one ingesting for every provider ("") is
// told the lease's first recorded pair.
func TestRecordedLeaseReason(t *testing.T) {
	p2 := LeaseParties{ProviderID: "p-002", RenterID: "r-secret"}
	p1 := LeaseParties{ProviderID: "p-001", RenterID: "r-001"}
	tests := []struct {
		name     string
		recorded []LeaseParties
		only     string
		want     string
	}{
		{"another provider's lease, bound meter", []LeaseParties{p2}, "p-001", "lease l-1 is recorded for another provider"},
		{"another provider's lease, platform meter", []LeaseParties{p2}, "", "lease l-1 is recorded for provider p-002 and renter r-secret"},
		{"its own lease, bound meter", []LeaseParties{p1}, "p-001", "lease l-1 is recorded for provider p-001 and renter r-001"},
		{"a lease of both, bound meter", []LeaseParties{p2, p1}, "p-001", "lease l-1 is recorded for provider p-001 and renter r-001"},
		{"a lease of both, platform meter", []LeaseParties{p2, p1}, "", "lease l-1 is recorded for provider p-002 and renter r-secret"},
	}
	for _, tt := range tests {
		if got := RecordedLeaseReason("l-1", tt.recorded, tt.only); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
