package domain

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// ExactScale is how many decimal places "exact" amounts are shown with.
// Billing itself never uses these: it keeps totals as price-seconds (amount
// x 3600), which are exact decimals, and rounds the exact quotient once.
const ExactScale = 20

var secondsPerHour = decimal.NewFromInt(3600)

// ErrNoPrice means the card has no price for the usage's GPU model.
var ErrNoPrice = errors.New("no price")

// Usage is one usage interval to price.
type Usage struct {
	Model, Region string
	GPUCount      int32
	Start, End    time.Time
	PUE           *decimal.Decimal // the provider's PUE, nil when unknown
}

// Piece is a slice of a usage priced alike: one band, one tier, one month.
// Quantities are integers (GPU-microseconds), so pieces add up exactly and
// decimal work happens once per aggregated line, not per event.
type Piece struct {
	Kind       string
	Band       int // index into Card.Bands; -1 = outside every band
	Tier       int // index into Card.Tiers; -1 = no tiers
	Start, End time.Time
	GPUMicros  int64
}

// MonthUsage is one renter's GPU-microseconds per calendar month ("2026-11").
// Months are UTC calendar months: a renter in any time zone gets the same
// month boundaries, and the invoice month matches the ledger's UTC dates.
type MonthUsage map[string]int64

// MonthKey is the tier month of an instant, as t.UTC().Format("2006-01"),
// written by hand for four-digit years: rating names a month for every
// event and piece, and Format showed in the pipeline profile.
func MonthKey(t time.Time) string {
	y, m, _ := t.UTC().Date()
	if y < 0 || y > 9999 {
		return t.UTC().Format("2006-01")
	}
	b := [7]byte{byte('0' + y/1000), byte('0' + y/100%10), byte('0' + y/10%10), byte('0' + y%10), '-', byte('0' + int(m)/10), byte('0' + int(m)%10)}
	return string(b[:])
}

// Months lists the tier months an interval touches.
func Months(start, end time.Time) []string {
	var out []string
	for m := monthStart(start); m.Before(end); m = m.AddDate(0, 1, 0) {
		out = append(out, MonthKey(m))
	}
	return out
}

// MonthStart is the first instant of t's UTC month.
func MonthStart(t time.Time) time.Time { return monthStart(t) }

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// Rate splits a usage into priced pieces: at time-band edges (in each band's
// own time zone) and UTC month edges, then each piece's GPU time across the
// renter's graduated tiers for that month (advancing used, on a card
// without tiers too: the month's volume is every GPU-hour), plus a PUE
// surcharge piece when the provider's PUE reaches the card's threshold.
// Pieces are appended to out.
func (c *Card) Rate(u Usage, used MonthUsage, out []Piece) ([]Piece, error) {
	if _, ok := c.Price(u.Model, u.Region); !ok {
		return out, fmt.Errorf("%w for GPU model %s on rate card %s", ErrNoPrice, u.Model, c.ID)
	}
	if !u.End.After(u.Start) || u.GPUCount <= 0 {
		return out, fmt.Errorf("empty usage interval")
	}
	cuts := c.cuts(u.Start, u.End)
	count := int64(u.GPUCount)
	var total int64
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]
		gpu := int64(b.Sub(a)/time.Microsecond) * count
		if gpu == 0 {
			continue
		}
		total += gpu
		band := c.bandAt(a)
		month := MonthKey(a)
		if len(c.Tiers) == 0 {
			// Untiered, it still counts toward the month's volume, which
			// a later tiered card reads (it was left out: 120 GPU-hours
			// here, and the tiered card priced the next at its first tier).
			out = append(out, Piece{Kind: KindUsage, Band: band, Tier: -1, Start: a, End: b, GPUMicros: gpu})
			used[month] += gpu
			continue
		}
		for gpu > 0 {
			tier, room := c.tierAt(used[month])
			take := gpu
			if room > 0 && room < take {
				take = room
			}
			// The piece's wall time is its GPU time over the GPU count
			// (descriptive only: amounts come from GPUMicros).
			to := b
			if take < gpu {
				to = a.Add(time.Duration(take/count) * time.Microsecond)
			}
			out = append(out, Piece{Kind: KindUsage, Band: band, Tier: tier, Start: a, End: to, GPUMicros: take})
			a = to
			used[month] += take
			gpu -= take
		}
	}
	if c.PUE != nil && u.PUE != nil && u.PUE.GreaterThanOrEqual(c.PUE.Threshold) && total > 0 {
		out = append(out, Piece{Kind: KindPUE, Band: -1, Tier: -1, Start: u.Start, End: u.End, GPUMicros: total})
	}
	return out, nil
}

// cuts returns start, end and, between them, every UTC month start and every
// instant a band's zone's wall clock enters or leaves the band: where it
// reads the band's start or end (twice on a day that repeats that time),
// and where it jumps into or out of the band (a day that skips the edge, or
// repeats the hours of the band).
func (c *Card) cuts(start, end time.Time) []time.Time {
	cuts := []time.Time{start, end}
	for m := monthStart(start).AddDate(0, 1, 0); m.Before(end); m = m.AddDate(0, 1, 0) {
		cuts = append(cuts, m)
	}
	for _, b := range c.Bands {
		// The band's dates, as civil dates (noon UTC stands for each).
		ls, le := start.In(b.Loc), end.In(b.Loc)
		d := time.Date(ls.Year(), ls.Month(), ls.Day()-1, 12, 0, 0, 0, time.UTC)
		last := time.Date(le.Year(), le.Month(), le.Day()+1, 12, 0, 0, 0, time.UTC)
		// Most usage lies where the zone's offset does not change (always, in
		// a zone without daylight saving): each edge is one time.Date.
		zs, ze := ls.ZoneBounds()
		steady := !zs.After(start.Add(-48*time.Hour)) && (ze.IsZero() || ze.After(end.Add(48*time.Hour)))
		for ; !d.After(last); d = d.AddDate(0, 0, 1) {
			for _, min := range []int{b.StartMin, b.EndMin} {
				if steady {
					if t := time.Date(d.Year(), d.Month(), d.Day(), min/60, min%60, 0, 0, b.Loc); t.After(start) && t.Before(end) {
						cuts = append(cuts, t)
					}
					continue
				}
				for _, t := range edgeInstants(d.Year(), d.Month(), d.Day(), min, b.Loc) {
					if t.After(start) && t.Before(end) {
						cuts = append(cuts, t)
					}
				}
			}
		}
		if steady {
			continue
		}
		for _, t := range zoneChanges(start, end, b.Loc) {
			if b.holds(t.Add(-time.Nanosecond)) != b.holds(t) {
				cuts = append(cuts, t)
			}
		}
	}
	if len(cuts) == 2 {
		return cuts
	}
	sort.Slice(cuts, func(i, j int) bool { return cuts[i].Before(cuts[j]) })
	uniq := cuts[:1]
	for _, t := range cuts[1:] {
		if !t.Equal(uniq[len(uniq)-1]) {
			uniq = append(uniq, t)
		}
	}
	return uniq
}

// edgeInstants returns the instants at which loc's wall clock reads min
// minutes past midnight on the date given: one on most days, two on a day
// the clock repeats that time, none on a day it skips it (time.Date answers
// a skipped wall time with an instant the clock reads another time at).
func edgeInstants(year int, month time.Month, day, min int, loc *time.Location) []time.Time {
	want := time.Date(year, month, day, min/60, min%60, 0, 0, time.UTC) // the wall time, read as UTC
	t := time.Date(year, month, day, min/60, min%60, 0, 0, loc)
	var out []time.Time
	seen := map[int]bool{}
	for _, near := range []time.Time{t.Add(-3 * time.Hour), t, t.Add(3 * time.Hour)} {
		_, off := near.Zone()
		if seen[off] {
			continue
		}
		seen[off] = true
		at := want.Add(-time.Duration(off) * time.Second)
		l := at.In(loc)
		if time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC).Equal(want) {
			out = append(out, at)
		}
	}
	return out
}

// zoneChanges returns the instants in (start, end) at which loc's offset
// changes: its wall clock jumps there, perhaps into or out of a band without
// reading the band's edges.
func zoneChanges(start, end time.Time, loc *time.Location) []time.Time {
	var out []time.Time
	for at := start; ; {
		_, next := at.In(loc).ZoneBounds()
		if next.IsZero() || !next.Before(end) || !next.After(at) {
			return out
		}
		out = append(out, next)
		at = next
	}
}

// bandAt returns the first band whose local wall-clock window contains t.
// A new card's bands never share an instant (refuseOverlaps); a stored
// card's may, and price as they did: by the first listed.
func (c *Card) bandAt(t time.Time) int {
	for i, b := range c.Bands {
		if b.holds(t) {
			return i
		}
	}
	return -1
}

// holds reports whether the band's zone's wall clock at t is in the band.
func (b Band) holds(t time.Time) bool {
	l := t.In(b.Loc)
	sec := l.Hour()*3600 + l.Minute()*60 + l.Second()
	s, e := b.StartMin*60, b.EndMin*60
	if e <= s {
		return sec >= s || sec < e
	}
	return sec >= s && sec < e
}

// tierAt returns the tier for a renter-month already at used, and how much
// room is left in it (0 = unbounded).
func (c *Card) tierAt(used int64) (int, int64) {
	for i, t := range c.Tiers {
		if t.UpToMicros == 0 {
			return i, 0
		}
		if used < t.UpToMicros {
			return i, t.UpToMicros - used
		}
	}
	// Above the last bounded tier: billed at the last tier.
	return len(c.Tiers) - 1, 0
}

// BandName is a piece's band name ("" outside every band).
func (c *Card) BandName(p Piece) string {
	if p.Band < 0 {
		return ""
	}
	return c.Bands[p.Band].Name
}

// TierLabel is a piece's tier label ("" without tiers).
func (c *Card) TierLabel(p Piece) string {
	if p.Tier < 0 {
		return ""
	}
	return c.Tiers[p.Tier].Label
}

// Factors returns a piece's unit price (per GPU-hour) and multiplier (band
// multiplier x tier factor): amount = GPU-hours x unit x multiplier.
func (c *Card) Factors(p Piece, model, region string) (unit, mult decimal.Decimal) {
	if p.Kind == KindPUE {
		return c.PUE.PerGPUHour, one
	}
	unit, _ = c.Price(model, region)
	mult = one
	if p.Band >= 0 {
		mult = mult.Mul(c.Bands[p.Band].Multiplier)
	}
	if p.Tier >= 0 {
		mult = mult.Mul(one.Sub(c.Tiers[p.Tier].Discount))
	}
	return unit, mult
}

// PriceSeconds is the exact amount x 3600 of gpuMicros GPU-microseconds at
// unit x mult per GPU-hour: GPU-seconds x unit x mult, an exact decimal.
func PriceSeconds(gpuMicros int64, unit, mult decimal.Decimal) decimal.Decimal {
	return decimal.New(gpuMicros, -6).Mul(unit).Mul(mult)
}

// GPUHours renders GPU-microseconds as hours (display, ExactScale places).
func GPUHours(gpuMicros int64) decimal.Decimal {
	return decimal.New(gpuMicros, -6).DivRound(secondsPerHour, ExactScale)
}

// Amount renders price-seconds as an amount (display, ExactScale places).
func Amount(ps decimal.Decimal) decimal.Decimal { return ps.DivRound(secondsPerHour, ExactScale) }

// RoundPS rounds the exact amount ps/3600 to the currency's minor unit, half
// away from zero: money.Currency.Round's rule applied to the exact quotient
// (DivRound decides on the true remainder, so no double rounding).
func RoundPS(cur money.Currency, ps decimal.Decimal) decimal.Decimal {
	return ps.DivRound(secondsPerHour, cur.MinorUnits)
}

// LeaseTotal is a lease's cumulative rounding state.
type LeaseTotal struct {
	ExactPS decimal.Decimal // exact total so far, in price-seconds
	Billed  decimal.Decimal // billed so far: always RoundPS(ExactPS)
}

// Add adds an exact amount (price-seconds) and returns the charge that keeps
// the billed total equal to the exact total rounded once:
// round(exact after) - billed before.
func (t *LeaseTotal) Add(cur money.Currency, ps decimal.Decimal) decimal.Decimal {
	t.ExactPS = t.ExactPS.Add(ps)
	after := RoundPS(cur, t.ExactPS)
	charge := after.Sub(t.Billed)
	t.Billed = after
	return charge
}

// Str renders a decimal without trailing zeros (money.DecimalString:
// decimal's String without math/big for the usual amounts, whose conversion
// was ~2 % of this process's CPU rating in the pipeline bench).
func Str(d decimal.Decimal) string {
	s := money.DecimalString(d)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
