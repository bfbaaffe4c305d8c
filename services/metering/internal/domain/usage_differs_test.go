package domain

import "testing"

// An event recorded before ingest trimmed lease ids repeats, trimmed now,
// as the same body: a duplicate, not "recorded with a different body".
func TestDiffersReadsALeaseIDTrimmed(t *testing.T) {
	recorded := Event{ID: "e-1", LeaseID: "lease-9 ", ProviderID: "p-1", RenterID: "r-1", GPUModel: "H100", GPUCount: 1}
	repeat := recorded
	repeat.LeaseID = "lease-9"
	if d := recorded.Differs(repeat); len(d) != 0 {
		t.Fatalf("differs in %v", d)
	}
	repeat.LeaseID = "lease-10"
	if d := recorded.Differs(repeat); len(d) != 1 || d[0] != "lease_id" {
		t.Fatalf("another lease: differs in %v", d)
	}
}
