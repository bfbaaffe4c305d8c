package bankfile

import (
	"fmt"
	"strings"
	"time"
)

// ParseHolidays reads the bank's holidays: comma-separated YYYY-MM-DD
// dates (blank entries skipped). An entry that is not such a date is
// refused, named: dropped silently, its holiday would get files dated on it.
func ParseHolidays(s string) ([]time.Time, error) {
	var days []time.Time
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		d, err := time.Parse(time.DateOnly, entry)
		if err != nil {
			return nil, fmt.Errorf("bank holiday %q: want a date YYYY-MM-DD", entry)
		}
		days = append(days, d)
	}
	return days, nil
}

// nextBusinessDay is day, or the first day after it that is neither a
// Saturday, a Sunday nor one of holidays (compared by their dates). It
// ends: holidays are finitely many, so at most len(holidays) + 2 days
// are skipped in a row.
func nextBusinessDay(day time.Time, holidays []time.Time) time.Time {
	for !isBusinessDay(day, holidays) {
		day = day.AddDate(0, 0, 1)
	}
	return day
}

// isBusinessDay: day (its date) is a weekday and no holiday.
func isBusinessDay(day time.Time, holidays []time.Time) bool {
	if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
		return false
	}
	date := day.Format(time.DateOnly)
	for _, h := range holidays {
		if h.Format(time.DateOnly) == date {
			return false
		}
	}
	return true
}
