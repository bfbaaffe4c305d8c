package domain

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestParseTimeIsTimeParse holds parseTime's single-pass form to what
// time.Parse gives for the same text: the same instant or the same error,
// over random times of every shape the fast path reads and mutations of
// them it must leave to time.Parse.
func TestParseTimeIsTimeParse(t *testing.T) {
	ref := func(s string) (time.Time, error) {
		tm, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
		if err != nil {
			return time.Time{}, err
		}
		return tm.UTC().Truncate(time.Microsecond), nil
	}
	check := func(s string) {
		t.Helper()
		got, gerr := parseTime(s)
		want, werr := ref(s)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() || !got.Equal(want) || got.Location() != want.Location() {
			t.Fatalf("parseTime(%q) = %v, %v; time.Parse gives %v, %v", s, got, gerr, want, werr)
		}
	}
	for _, s := range []string{
		"2026-12-02T17:58:00Z", " 2026-12-02T17:58:00Z ", "2026-12-02T17:58:00.1Z", "2026-12-02T17:58:00.123456789Z",
		"2026-12-02T17:58:00.1234567Z", "2026-12-02T17:58:00.1234567891Z", "2026-12-02T17:58:00.Z", "2026-12-02T17:58:00,5Z",
		"2024-02-29T00:00:00Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-04-30T23:59:59Z", "2026-13-01T00:00:00Z",
		"2026-00-01T00:00:00Z", "2026-01-00T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T00:60:00Z", "2026-01-01T00:00:60Z",
		"2026-01-01t00:00:00Z", "2026-01-01T00:00:00z", "2026-01-01T00:00:00+08:00", "2026-01-01T00:00:00-00:30", "0000-01-01T00:00:00Z",
		"9999-12-31T23:59:59.999999999Z", "2026-1-01T00:00:00Z", "2026-01-01T00:00:0aZ", "2026-01-01 00:00:00Z", "", "Z", "2026-01-01T00:00:00",
		"+2026-01-01T00:00:00Z", "2026-01-01T00:00:00.12a4Z", "1900-02-29T00:00:00Z", "2000-02-29T00:00:00Z",
	} {
		check(s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const digits = "0123456789"
	for i := 0; i < 200_000; i++ {
		tm := time.Unix(r.Int64N(400*365*86400)-200*365*86400+1_700_000_000, r.Int64N(1e9)).UTC()
		s := tm.Format("2006-01-02T15:04:05")
		if n := r.IntN(11); n > 0 {
			s += "." + tm.Format(".000000000")[1:][:min(n, 9)]
			if n == 10 {
				s += string(digits[r.IntN(10)])
			}
		}
		s += "Z"
		if r.IntN(3) == 0 { // one byte changed: a digit, a separator, anything
			b := []byte(s)
			b[r.IntN(len(b))] = "0123456789:-T.Zz+ 9"[r.IntN(19)]
			s = string(b)
		}
		check(s)
	}
}
