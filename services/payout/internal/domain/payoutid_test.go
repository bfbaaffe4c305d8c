package domain

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// A payout's id is derived from its provider, cycle and currency: the
// same settlement read again (after a restore, its message delivered
// again) makes the same id, so the rail finds the reference it paid;
// any other settlement makes another id. Ids sort by cycle.
func TestPayoutIDIsTheSettlements(t *testing.T) {
	id := func(p, c, cur string) string {
		t.Helper()
		s, err := PayoutID(p, c, cur)
		if err != nil {
			t.Fatalf("PayoutID(%s, %s, %s): %v", p, c, cur, err)
		}
		return s
	}
	a := id("p-001", "cyc-20261112", "CNY")
	if b := id("p-001", "cyc-20261112", "CNY"); a != b {
		t.Errorf("one settlement made ids %s and %s", a, b)
	}
	seen := map[string]string{a: "p-001 cyc-20261112 CNY"}
	for _, o := range [][3]string{{"p-002", "cyc-20261112", "CNY"}, {"p-001", "cyc-20261227", "CNY"}, {"p-001", "cyc-20261112", "USD"}} {
		s := id(o[0], o[1], o[2])
		if prev, dup := seen[s]; dup {
			t.Errorf("%v and %s share id %s", o, prev, s)
		}
		seen[s] = strings.Join(o[:], " ")
	}
	rest, ok := strings.CutPrefix(a, "po_")
	u, err := uuid.Parse(rest)
	if !ok || err != nil || len(rest) != 36 || u.Version() != 8 || u.Variant() != uuid.RFC4122 {
		t.Errorf("id %s: want po_ and an RFC 9562 version 8 UUID (%v)", a, err)
	}
	// Sorted by cycle: a later cycle's id is greater whatever the provider.
	if later := id("a", "cyc-20261227", "CNY"); later <= id("zzz", "cyc-20261112", "USD") {
		t.Errorf("a later cycle's id %s sorts before an earlier one's", later)
	}
	if _, err := PayoutID("p-001", "cyc-2026111", "CNY"); err == nil {
		t.Error("a malformed cycle id made a payout id")
	}
}
