package domain

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
)

// Limits of ingest (DESIGN §2).
const (
	BatchEventsMax        = 5000
	GPUCountMin           = 1
	GPUCountMax           = 64
	EventDurationMax      = 24 * time.Hour
	FutureSkewMax         = 5 * time.Minute
	LateArrivalDefaultDay = 35
	eventIDLenMax         = 128
	fieldLenMax           = 128
)

// Usage statuses.
const (
	StatusAccepted = "accepted"
	StatusLate     = "late" // its cycle had closed on arrival; the ledger accrues it to the earliest open one
)

// EventInput is one usage event as a node agent sends it: times are strings
// so a malformed one rejects only its event.
type EventInput struct {
	ID, LeaseID, ProviderID, RenterID, GPUModel string
	GPUCount                                    int32
	StartTime, EndTime                          string
	Region, Workload                            string
	// Malformed is why the event's JSON did not decode (ports' decoding
	// sets it): the event is rejected with it.
	Malformed string
}

// Event is a validated usage event. Times are truncated to microseconds,
// PostgreSQL's resolution, so what is stored is what was checked and priced.
type Event struct {
	ID, LeaseID, ProviderID, RenterID, GPUModel string
	GPUCount                                    int32
	Start, End                                  time.Time
	Region, Workload                            string
}

// LeaseParties are the provider and the renter of a lease: every event of
// a lease names the same two (pricing charges a lease to one renter and
// credits one provider).
type LeaseParties struct{ ProviderID, RenterID string }

// LeaseReason is why an event naming parties other than its lease's is
// rejected.
func LeaseReason(lease string, p LeaseParties) string {
	return fmt.Sprintf("lease %s is recorded for provider %s and renter %s", lease, p.ProviderID, p.RenterID)
}

// RecordedLeaseReason is why an event naming parties other than those its
// lease is recorded for (recorded, at least one) is rejected, told to a
// meter of onlyProvider ("" for one that ingests for every provider: the
// platform's, finance, admin). A meter bound to a provider is told a lease
// of other providers only is "recorded for another provider": naming the
// parties told p-001's meter, sending a lease id of p-002's, p-002's
// renter. Of a lease recorded for its own provider too it is told that
// pair, its own provider's.
func RecordedLeaseReason(lease string, recorded []LeaseParties, onlyProvider string) string {
	if onlyProvider == "" {
		return LeaseReason(lease, recorded[0])
	}
	for _, p := range recorded {
		if p.ProviderID == onlyProvider {
			return LeaseReason(lease, p)
		}
	}
	return fmt.Sprintf("lease %s is recorded for another provider", lease)
}

// Rules are the checks that depend on configuration and the clock.
type Rules struct {
	Now         time.Time
	LateArrival time.Duration // start older than Arrived-LateArrival is refused
	// Arrived is when the usage reached gpubill: zero is Now (a REST call);
	// a NATS message's is when its stream stored it, so a message that
	// waited in the stream or in dead letters (a replay after a fix) is
	// judged as when it came, not refused as late for the wait.
	Arrived    time.Time
	KnownModel func(string) bool
}

// arrived is Arrived, or Now when it is zero or ahead of Now.
func (r Rules) arrived() time.Time {
	if r.Arrived.IsZero() || r.Arrived.After(r.Now) {
		return r.Now
	}
	return r.Arrived
}

// textFault is why e's text fields cannot be taken ("" when they can).
func textFault(e Event) string {
	// Text PostgreSQL refuses (NUL, invalid UTF-8) failed the insert of
	// the whole batch; control characters are no part of an id or a label.
	for _, f := range []struct{ name, v string }{
		{"id", e.ID}, {"lease_id", e.LeaseID}, {"gpu_model", e.GPUModel}, {"region", e.Region}, {"workload", e.Workload},
	} {
		if !utf8.ValidString(f.v) {
			return f.name + " is not valid UTF-8"
		}
		if strings.ContainsFunc(f.v, unicode.IsControl) {
			return f.name + " holds a control character"
		}
	}
	// An invisible character (Unicode format: a zero-width space, a byte
	// order mark) made another id of the same one: "lease-9\u200b" was a
	// lease of its own, so the same GPU time was recorded twice under it.
	// (White space around an id or a lease id is trimmed.)
	for _, f := range []struct{ name, v string }{{"id", e.ID}, {"lease_id", e.LeaseID}} {
		if i := strings.IndexFunc(f.v, func(c rune) bool { return unicode.Is(unicode.Cf, c) }); i >= 0 {
			c, _ := utf8.DecodeRuneInString(f.v[i:])
			return fmt.Sprintf("%s holds an invisible character (U+%04X)", f.name, c)
		}
	}
	return ""
}

// Validate checks one event in isolation (parties, duplicates and overlaps
// need state and are checked by the use case). It returns the event or the
// reason it is rejected.
func Validate(in EventInput, r Rules) (Event, string) {
	e := Event{
		ID: strings.TrimSpace(in.ID), LeaseID: strings.TrimSpace(in.LeaseID), ProviderID: in.ProviderID, RenterID: in.RenterID,
		GPUModel: in.GPUModel, GPUCount: in.GPUCount, Region: in.Region, Workload: in.Workload,
	}
	if in.Malformed != "" {
		return e, "event does not decode: " + in.Malformed
	}
	for _, f := range []struct{ name, v string }{
		{"id", e.ID}, {"lease_id", e.LeaseID}, {"provider_id", e.ProviderID}, {"renter_id", e.RenterID}, {"gpu_model", e.GPUModel},
	} {
		if f.v == "" {
			return e, "missing " + f.name
		}
	}
	if len(e.ID) > eventIDLenMax {
		return e, fmt.Sprintf("id longer than %d characters", eventIDLenMax)
	}
	for _, f := range []struct{ name, v string }{
		{"lease_id", e.LeaseID}, {"provider_id", e.ProviderID}, {"renter_id", e.RenterID},
		{"gpu_model", e.GPUModel}, {"region", e.Region}, {"workload", e.Workload},
	} {
		if len(f.v) > fieldLenMax {
			return e, fmt.Sprintf("%s longer than %d characters", f.name, fieldLenMax)
		}
	}
	if reason := textFault(e); reason != "" {
		return e, reason
	}
	for _, f := range []struct{ name, v string }{{"provider_id", e.ProviderID}, {"renter_id", e.RenterID}} {
		if err := ids.CheckPartyID(f.v); err != nil {
			return e, fmt.Sprintf("%s %s", f.name, err)
		}
	}
	if !r.KnownModel(e.GPUModel) {
		return e, fmt.Sprintf("unknown gpu_model %q", e.GPUModel)
	}
	if e.GPUCount < GPUCountMin || e.GPUCount > GPUCountMax {
		return e, fmt.Sprintf("gpu_count %d outside %d..%d", e.GPUCount, GPUCountMin, GPUCountMax)
	}
	start, err := parseTime(in.StartTime)
	if err != nil {
		return e, fmt.Sprintf("malformed start_time %q: want RFC 3339 (2026-11-01T22:00:00Z)", clip(in.StartTime))
	}
	end, err := parseTime(in.EndTime)
	if err != nil {
		return e, fmt.Sprintf("malformed end_time %q: want RFC 3339 (2026-11-01T23:30:00Z)", clip(in.EndTime))
	}
	e.Start, e.End = start, end
	switch {
	case end.Before(start):
		return e, "end_time before start_time"
	case end.Equal(start):
		return e, "end_time equals start_time (no GPU time)"
	case end.Sub(start) > EventDurationMax:
		return e, fmt.Sprintf("longer than 24h (%s)", end.Sub(start))
	case end.After(r.Now.Add(FutureSkewMax)):
		return e, "end_time more than 5 min in the future"
	case start.Before(r.arrived().Add(-r.LateArrival)):
		return e, fmt.Sprintf("older than the %d-day late-arrival limit", int(r.LateArrival/(24*time.Hour)))
	}
	return e, ""
}

func parseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, ok := parseUTC(s); ok {
		return t.Truncate(time.Microsecond), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC().Truncate(time.Microsecond), nil
}

// parseUTC reads the form nearly every client sends,
// "2006-01-02T15:04:05Z" with an optional fraction of 1-9 digits, in a
// single pass; anything else (an offset, a lower-case t or z, a field out
// of range) is left to time.Parse, which gives the same time or the error.
// time.Parse cost ~2 % of this process's CPU in the pipeline bench (two
// times per event).
func parseUTC(s string) (time.Time, bool) {
	if len(s) < 20 || s[len(s)-1] != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	num := func(i, n int) (int, bool) {
		v := 0
		for _, c := range []byte(s[i : i+n]) {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 2)
	day, ok3 := num(8, 2)
	hour, ok4 := num(11, 2)
	minute, ok5 := num(14, 2)
	sec, ok6 := num(17, 2)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	if frac := s[19 : len(s)-1]; frac != "" {
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return time.Time{}, false
		}
		v, ok := num(20, len(frac)-1)
		if !ok {
			return time.Time{}, false
		}
		for n := len(frac) - 1; n < 9; n++ {
			v *= 10
		}
		nsec = v
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if t.Day() != day { // the 31st of a 30-day month, the 29th of February in a common year
		return time.Time{}, false
	}
	return t, true
}

func clip(s string) string { return apperr.Clip(s, 43) }

// Overlaps reports whether [a.Start,a.End) and [b.Start,b.End) share time.
func Overlaps(a, b Event) bool { return a.Start.Before(b.End) && b.Start.Before(a.End) }

// Differs names the fields in which two events with the same id differ (nil
// when they are the same event): an id is the idempotency key of its event,
// so a repeat with another body is refused, not counted as a duplicate.
func (e Event) Differs(o Event) []string {
	var out []string
	for _, f := range []struct {
		name string
		same bool
	}{
		// A lease id recorded before ingest trimmed it still matches its
		// trimmed repeat (a resent spool was told the body differed).
		{"lease_id", strings.TrimSpace(e.LeaseID) == strings.TrimSpace(o.LeaseID)},
		{"provider_id", e.ProviderID == o.ProviderID}, {"renter_id", e.RenterID == o.RenterID},
		{"gpu_model", e.GPUModel == o.GPUModel}, {"gpu_count", e.GPUCount == o.GPUCount},
		{"start_time", e.Start.Equal(o.Start)}, {"end_time", e.End.Equal(o.End)},
		{"region", e.Region == o.Region}, {"workload", e.Workload == o.Workload},
	} {
		if !f.same {
			out = append(out, f.name)
		}
	}
	return out
}

// ConflictReason is the rejection of an event whose id was recorded with
// another body.
func ConflictReason(id string, fields []string) string {
	return fmt.Sprintf("id %s was recorded with a different body (%s differ): an event id is its idempotency key", clip(id), strings.Join(fields, ", "))
}

// RecordedConflictReason is the rejection of ev, whose id was recorded
// with another body (stored). A meter bound to onlyProvider ("": not
// bound) whose id names another provider's event is not told which fields
// differ: resending that id with a guessed renter told it, by renter_id
// leaving the list, which renter the other provider's lease was for.
func RecordedConflictReason(stored, ev Event, onlyProvider string) string {
	if onlyProvider != "" && stored.ProviderID != onlyProvider {
		return fmt.Sprintf("id %s is recorded for another provider: an event id is its idempotency key", clip(ev.ID))
	}
	return ConflictReason(ev.ID, stored.Differs(ev))
}

// Recorded is a usage event as recorded: its cycle, status and arrival.
type Recorded struct {
	Event
	CycleID    string
	Status     string
	ReceivedAt time.Time
}
