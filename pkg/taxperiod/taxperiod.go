// Package taxperiod maps instants to tax periods (DESIGN §5): calendar
// months, id YYYY-MM, in one configured time zone (GPUBILL_TAX_TIMEZONE,
// default Asia/Shanghai). A Chinese tax month starts at 00:00 Beijing time
// (16:00 UTC the day before), so a withholding recorded at 02:00 Shanghai on
// the 1st belongs to the new month. The tax service remits by this calendar
// and settlement's monthly remittance fires and waits by it; both must use
// the same zone.
package taxperiod

import (
	"fmt"
	"time"
	_ "time/tzdata" // the zone must load on hosts without a zoneinfo database (distroless images)
)

// DefaultZone is the tax time zone unless configured (DESIGN §10).
const DefaultZone = "Asia/Shanghai"

// Layout is the layout of a period id (YYYY-MM).
const Layout = "2006-01"

// defaultLocation is DefaultZone. With tzdata embedded the load does not
// fail; the fixed offset is exact for Shanghai anyway (no daylight saving
// time since 1991).
var defaultLocation = func() *time.Location {
	if l, err := time.LoadLocation(DefaultZone); err == nil {
		return l
	}
	return time.FixedZone(DefaultZone, 8*60*60)
}()

// LoadZone loads an IANA time zone by name. "" and "Local" are refused: the
// tax month must not depend on the host a process runs on.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("tax time zone %q: want an IANA zone name such as %s", name, DefaultZone)
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("tax time zone %q: %w", name, err)
	}
	return l, nil
}

// Calendar maps instants to tax periods in Zone. The zero Calendar uses
// DefaultZone.
type Calendar struct {
	Zone *time.Location
}

// Default returns the calendar of DefaultZone.
func Default() Calendar { return Calendar{Zone: defaultLocation} }

// New returns the calendar of the named zone (see LoadZone).
func New(zone string) (Calendar, error) {
	l, err := LoadZone(zone)
	if err != nil {
		return Calendar{}, err
	}
	return Calendar{Zone: l}, nil
}

// Location is the calendar's zone.
func (c Calendar) Location() *time.Location {
	if c.Zone == nil {
		return defaultLocation
	}
	return c.Zone
}

// Period is one tax period: the calendar month [Start, End) in the
// calendar's zone.
type Period struct {
	ID    string // YYYY-MM
	Start time.Time
	End   time.Time
}

func (c Calendar) month(year int, month time.Month) Period {
	l := c.Location()
	start := time.Date(year, month, 1, 0, 0, 0, 0, l)
	return Period{ID: start.Format(Layout), Start: start, End: time.Date(year, month+1, 1, 0, 0, 0, 0, l)}
}

// At returns the period containing t.
func (c Calendar) At(t time.Time) Period {
	l := t.In(c.Location())
	return c.month(l.Year(), l.Month())
}

// Previous returns the period before the one containing t.
func (c Calendar) Previous(t time.Time) Period {
	l := t.In(c.Location())
	return c.month(l.Year(), l.Month()-1)
}

// Parse returns the period with id YYYY-MM.
func (c Calendar) Parse(id string) (Period, error) {
	t, err := time.ParseInLocation(Layout, id, c.Location())
	if err != nil || t.Format(Layout) != id {
		return Period{}, fmt.Errorf("tax period %q: want YYYY-MM", id)
	}
	return c.month(t.Year(), t.Month()), nil
}
