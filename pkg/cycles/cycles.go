// Package cycles computes settlement cycle boundaries and ids (DESIGN §5):
// fixed-length cycles from an anchor date, id cyc-YYYYMMDD of the first day.
package cycles

import (
	"fmt"
	"time"
)

// Defaults from DESIGN §10.
const (
	DefaultLengthDays = 45
	DefaultGrace      = 24 * time.Hour
)

// DefaultAnchor is the first day of the first cycle.
var DefaultAnchor = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Calendar maps instants to cycles.
type Calendar struct {
	Anchor     time.Time
	LengthDays int
	Grace      time.Duration
}

// Default returns the default calendar.
func Default() Calendar {
	return Calendar{Anchor: DefaultAnchor, LengthDays: DefaultLengthDays, Grace: DefaultGrace}
}

// Cycle is one settlement cycle: [Start, End), closing at End+Grace.
type Cycle struct {
	ID     string
	Start  time.Time
	End    time.Time
	Closes time.Time
}

func (c Calendar) length() time.Duration { return time.Duration(c.LengthDays) * 24 * time.Hour }

// At returns the cycle containing t. Cycles before the anchor exist too, so
// any instant has a cycle.
func (c Calendar) At(t time.Time) Cycle {
	l := c.length()
	d := t.UTC().Sub(c.Anchor)
	n := d / l
	if d < 0 && d%l != 0 {
		n--
	}
	return c.nth(int64(n))
}

// ForUsageEnd returns the cycle a usage charge accrues to by its end time:
// the cycle containing the instant just before end (the interval is
// half-open, so usage ending exactly at a boundary belongs to the earlier cycle).
func (c Calendar) ForUsageEnd(end time.Time) Cycle {
	return c.At(end.Add(-time.Nanosecond))
}

// HoldsUsageEnd reports whether usage ending at end accrues to cy (as
// ForUsageEnd(end) would answer cy): a caller walking many events keeps the
// last cycle instead of computing one, with its id, per event.
func (cy Cycle) HoldsUsageEnd(end time.Time) bool {
	at := end.Add(-time.Nanosecond)
	return !at.Before(cy.Start) && at.Before(cy.End)
}

// Next returns the cycle after cy.
func (c Calendar) Next(cy Cycle) Cycle { return c.At(cy.End) }

func (c Calendar) nth(n int64) Cycle {
	start := c.Anchor.Add(time.Duration(n) * c.length())
	end := start.Add(c.length())
	return Cycle{ID: ID(start), Start: start, End: end, Closes: end.Add(c.Grace)}
}

// ID is the cycle id of a cycle starting at start.
func ID(start time.Time) string { return "cyc-" + start.UTC().Format("20060102") }

// Parse returns the cycle with the given id, checking it lies on the calendar.
func (c Calendar) Parse(id string) (Cycle, error) {
	var start time.Time
	if len(id) != len("cyc-20060102") || id[:4] != "cyc-" {
		return Cycle{}, fmt.Errorf("cycle id %q: want cyc-YYYYMMDD", id)
	}
	start, err := time.Parse("20060102", id[4:])
	if err != nil {
		return Cycle{}, fmt.Errorf("cycle id %q: %w", id, err)
	}
	cy := c.At(start)
	if !cy.Start.Equal(start) {
		return Cycle{}, fmt.Errorf("cycle id %q is not a cycle start (cycles start on %s every %d days)", id, c.Anchor.Format("2006-01-02"), c.LengthDays)
	}
	return cy, nil
}
