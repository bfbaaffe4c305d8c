package domain

import "testing"

// A retry's rail reference names its payout; the first attempt's is the
// payout id itself.
func TestRailReferencePayout(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"0193a7c0-1234-7abc-8def-abcdefabcdef", "po-a"} {
		for _, attempt := range []int{1, 2, 12} {
			if got := RailReferencePayout(RailReference(id, attempt)); got != id {
				t.Errorf("RailReferencePayout(RailReference(%q, %d)) = %q", id, attempt, got)
			}
		}
	}
	for _, ref := range []string{"po-", "-", "po"} {
		if got := RailReferencePayout(ref); got != ref {
			t.Errorf("RailReferencePayout(%q) = %q, want it as it is", ref, got)
		}
	}
}
