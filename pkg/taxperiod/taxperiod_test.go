package taxperiod

import (
	"testing"
	"time"
)

func TestAt(t *testing.T) {
	cal := Default()
	tests := []struct {
		give time.Time
		want string
	}{
		{time.Date(2026, 11, 30, 15, 59, 59, 0, time.UTC), "2026-11"}, // 30 Nov 23:59:59 Shanghai
		{time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC), "2026-12"},   // 1 Dec 00:00 Shanghai
		{time.Date(2026, 11, 30, 18, 0, 0, 0, time.UTC), "2026-12"},   // 1 Dec 02:00 Shanghai
		{time.Date(2026, 12, 31, 16, 0, 0, 0, time.UTC), "2027-01"},   // 1 Jan 00:00 Shanghai
	}
	for _, tt := range tests {
		if got := cal.At(tt.give).ID; got != tt.want {
			t.Errorf("At(%s) = %s, want %s", tt.give, got, tt.want)
		}
	}
}

func TestPrevious(t *testing.T) {
	cal := Default()
	tests := []struct {
		give time.Time
		want string
	}{
		{time.Date(2026, 10, 31, 18, 0, 0, 0, time.UTC), "2026-10"},  // 1 Nov 02:00 Shanghai
		{time.Date(2026, 10, 31, 15, 59, 0, 0, time.UTC), "2026-09"}, // 31 Oct 23:59 Shanghai
		{time.Date(2025, 12, 31, 18, 0, 0, 0, time.UTC), "2025-12"},  // 1 Jan 02:00 Shanghai
	}
	for _, tt := range tests {
		if got := cal.Previous(tt.give).ID; got != tt.want {
			t.Errorf("Previous(%s) = %s, want %s", tt.give, got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		zone      string
		give      string
		wantStart time.Time
		wantEnd   time.Time
	}{
		{"Asia/Shanghai", "2026-11", time.Date(2026, 10, 31, 16, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC)},
		{"Asia/Shanghai", "2026-12", time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC), time.Date(2026, 12, 31, 16, 0, 0, 0, time.UTC)},
		{"UTC", "2026-12", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		// Daylight saving time: March in Berlin starts at UTC+1 and ends at UTC+2.
		{"Europe/Berlin", "2026-03", time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC), time.Date(2026, 3, 31, 22, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		cal, err := New(tt.zone)
		if err != nil {
			t.Fatal(err)
		}
		p, err := cal.Parse(tt.give)
		if err != nil || p.ID != tt.give || !p.Start.Equal(tt.wantStart) || !p.End.Equal(tt.wantEnd) {
			t.Errorf("%s Parse(%s) = %+v, %v; want [%s, %s)", tt.zone, tt.give, p, err, tt.wantStart, tt.wantEnd)
		}
	}
}

func TestParseRefusesNonPeriods(t *testing.T) {
	for _, give := range []string{"", "2026-1", "2026-13", "2026-11-01", "october", " 2026-11"} {
		if p, err := Default().Parse(give); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", give, p)
		}
	}
}

func TestZones(t *testing.T) {
	if got := (Calendar{}).Location().String(); got != DefaultZone {
		t.Fatalf("zero calendar's zone %s, want %s", got, DefaultZone)
	}
	if got := Default().Location().String(); got != DefaultZone {
		t.Fatalf("default zone %s", got)
	}
	for _, give := range []string{"", "Local", "Mars/Olympus", "+08:00"} {
		if _, err := New(give); err == nil {
			t.Errorf("New(%q) accepted", give)
		}
	}
}
