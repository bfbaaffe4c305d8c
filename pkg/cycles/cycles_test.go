package cycles

import (
	"testing"
	"time"
)

func TestCycleAt(t *testing.T) {
	cal := Default()
	tests := []struct {
		give time.Time
		want string
	}{
		{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "cyc-20260101"},
		{time.Date(2026, 2, 14, 23, 59, 0, 0, time.UTC), "cyc-20260101"},
		{time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC), "cyc-20260215"},
		{time.Date(2026, 11, 12, 0, 0, 0, 0, time.UTC), "cyc-20261112"},
		{time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC), "cyc-20261112"},
		{time.Date(2025, 12, 31, 0, 0, 0, 0, time.UTC), "cyc-20251117"},
	}
	for _, tt := range tests {
		if got := cal.At(tt.give).ID; got != tt.want {
			t.Errorf("At(%s) = %s, want %s", tt.give, got, tt.want)
		}
	}
}

func TestForUsageEndAtBoundary(t *testing.T) {
	cal := Default()
	end := time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC)
	if got := cal.ForUsageEnd(end).ID; got != "cyc-20260101" {
		t.Fatalf("got %s", got)
	}
}

func TestParse(t *testing.T) {
	cal := Default()
	cy, err := cal.Parse("cyc-20261112")
	if err != nil || !cy.End.Equal(time.Date(2026, 12, 27, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("%v %v", cy, err)
	}
	if _, err := cal.Parse("cyc-20261113"); err == nil {
		t.Fatal("off-calendar id accepted")
	}
}

// TestHoldsUsageEndAgreesWithForUsageEnd: a cycle holds a usage end exactly
// when ForUsageEnd names that cycle, at and around every boundary and at
// instants before the anchor.
func TestHoldsUsageEndAgreesWithForUsageEnd(t *testing.T) {
	c := Default()
	first := c.At(c.Anchor.Add(-100 * 24 * time.Hour))
	var ends []time.Time
	for cy, i := first, 0; i < 8; cy, i = c.Next(cy), i+1 {
		for _, d := range []time.Duration{-time.Hour, -time.Nanosecond, 0, time.Nanosecond, time.Microsecond, time.Hour, 24 * time.Hour} {
			ends = append(ends, cy.Start.Add(d), cy.End.Add(d))
		}
	}
	for cy, i := first, 0; i < 8; cy, i = c.Next(cy), i+1 {
		for _, end := range ends {
			want := c.ForUsageEnd(end).ID == cy.ID
			if got := cy.HoldsUsageEnd(end); got != want {
				t.Errorf("%s.HoldsUsageEnd(%s) = %v; ForUsageEnd names %s", cy.ID, end.Format(time.RFC3339Nano), got, c.ForUsageEnd(end).ID)
			}
		}
	}
}
