// Package domain holds pricing's pure rules: rate cards, time-of-use bands,
// graduated monthly volume tiers, the PUE surcharge, and exact rating with
// cumulative rounding. No pgx, NATS or protobuf here.
package domain

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
)

// Line kinds.
const (
	KindUsage = "usage"
	KindPUE   = "pue_surcharge"
)

// Limits of a rate card.
const (
	gpuPricesMax = 1000
	bandsMax     = 24
	tiersMax     = 20
)

var (
	one       = decimal.NewFromInt(1)
	hourMicro = int64(time.Hour / time.Microsecond)
)

// Bounds on a new card's prices (hourly, the PUE surcharge's per GPU-hour;
// in the card's currency) and band multipliers, far above any real one (an
// H100 hour is a few thousand won) and low enough that the largest charge
// is an amount every hop parses (money.AmountIntegerDigitsMax): 2000
// events of 64 GPUs for 24 hours at 10^9 × 100 plus 10^9 a GPU-hour is
// 3.1 × 10^17 (TestLargestChargeIsAnAmount). Only non-negative was
// checked: an hourly "1e62" priced charges the ledger refused (66
// characters with 2 decimals), the whole ChargesRated message
// dead-lettered after pricing counted them billed.
var (
	PriceMax      = decimal.New(1, 9)
	MultiplierMax = decimal.NewFromInt(100)
)

// AmountMax is the least charge the ledger refuses: it reads a charge's
// amount with money.Currency.Parse, at most money.AmountIntegerDigitsMax
// digits before the point.
var AmountMax = decimal.New(1, money.AmountIntegerDigitsMax)

// EventAmountMax bounds what one usage event may be charged: above the most
// a card within today's bounds charges an event within metering's (64 GPUs
// for 24 hours, 1536 GPU-hours, at PriceMax × MultiplierMax plus PriceMax:
// 1.55 × 10^14), and low enough that a charge of the most events one holds
// (2000) is an amount the ledger takes (8 × 10^17 < AmountMax;
// TestLargestChargeIsAnAmount). A card stored before the bounds is read as
// stored (LoadCard) and may charge an event more (an hourly "1e20": 10^20
// yuan an hour, which the ledger refused after pricing counted it billed):
// such an event is not priced by it (Card.WithinEventMax), and waits for a
// card that replaces it.
var EventAmountMax = decimal.New(4, 14)

// eventPSMax is EventAmountMax in price-seconds.
var eventPSMax = EventAmountMax.Mul(secondsPerHour)

// Violation names one bad field.
type Violation struct {
	Field  string
	Reason string
}

// CardInput is a rate card as a client sends it (decimals as strings).
type CardInput struct {
	ID            string
	Currency      string
	EffectiveFrom time.Time
	Prices        []PriceInput
	Bands         []BandInput
	Tiers         []TierInput
	PUE           *PUEInput
}

// PriceInput is one hourly GPU price.
type PriceInput struct{ Model, Hourly, Region string }

// BandInput is one time-of-use band.
type BandInput struct{ Name, Start, End, TimeZone, Multiplier string }

// TierInput is one graduated volume tier.
type TierInput struct{ UpToGPUHours, Discount string }

// PUEInput is the carbon surcharge.
type PUEInput struct{ Threshold, PerGPUHour string }

// Card is a validated rate card version.
type Card struct {
	ID            string
	Currency      money.Currency
	EffectiveFrom time.Time
	Seq           int64 // creation order: among cards with the same effective_from the newest wins
	Input         CardInput
	prices        map[priceKey]decimal.Decimal
	// folded are the region prices by the region in lower case, trimmed
	// (the first of a fold wins): usage naming "CN-EAST" for a card's
	// "cn-east" was priced at the model's default, silently.
	folded map[priceKey]decimal.Decimal
	Bands  []Band
	Tiers  []Tier
	PUE    *PUE
	// Unreadable is why a stored card was set aside (SetAside): it prices
	// nothing, and usage in its time waits for a card that replaces it.
	Unreadable string
	// multMax is the largest band multiplier, at least 1 (usage outside
	// every band is at 1); withinMicros the GPU-microseconds of usage no
	// price of the card charges more than EventAmountMax (WithinEventMax).
	multMax      decimal.Decimal
	withinMicros int64
}

type priceKey struct{ model, region string }

// Band is a time-of-use band: local wall-clock [Start, End) in Loc, wrapping
// past midnight when End <= Start.
type Band struct {
	Name       string
	StartMin   int
	EndMin     int
	Loc        *time.Location
	Multiplier decimal.Decimal
}

// Tier is one graduated tier: GPU usage of a renter in a calendar month up
// to UpToMicros (GPU-microseconds; 0 = unbounded) is discounted by Discount.
type Tier struct {
	Label      string
	UpToMicros int64
	Discount   decimal.Decimal
}

// PUE is the carbon surcharge for providers whose PUE >= Threshold.
type PUE struct {
	Threshold  decimal.Decimal
	PerGPUHour decimal.Decimal
}

// ParseCard validates a new rate card: every check of today.
func ParseCard(in CardInput) (*Card, []Violation) { return parseCard(in, false) }

// LoadCard reads a stored rate card as it meant when it was stored: the
// shapes an older version accepted and today's checks refuse (a band from
// 24:00, a band 00:00–24:00, a band in "Local", a price or multiplier
// above PriceMax or MultiplierMax) price as they did then, an event at
// most EventAmountMax (WithinEventMax).
// Refusing them on load failed every card of the book after an upgrade.
// What it still refuses, no version stored.
func LoadCard(in CardInput) (*Card, []Violation) { return parseCard(in, true) }

// SetAside is a stored card that cannot be read, holding its place in the
// book (currency, effective_from, creation order) so usage in its time is
// not priced by the card before it; why says what is wrong with it.
func SetAside(s StoredCard, why string) *Card {
	return &Card{ID: s.ID, Currency: money.Currency{Code: s.Currency}, EffectiveFrom: s.EffectiveFrom.UTC(), Seq: s.Seq,
		Input: s.Body, prices: map[priceKey]decimal.Decimal{}, folded: map[priceKey]decimal.Decimal{}, Unreadable: why}
}

// parseCard is ParseCard, or LoadCard when stored. A card's effective_from
// is in microseconds, as stored, listed and answered: one sent at
// nanoseconds priced from them, and a correction at the effective_from
// answered (a later seq wins a tie) never took over from the card it
// listed as replaced.
func parseCard(in CardInput, stored bool) (*Card, []Violation) {
	var vs violations
	in.EffectiveFrom = in.EffectiveFrom.UTC().Truncate(time.Microsecond)
	c := &Card{ID: in.ID, EffectiveFrom: in.EffectiveFrom, Input: in, prices: map[priceKey]decimal.Decimal{},
		folded: map[priceKey]decimal.Decimal{}}
	cur, err := money.Lookup(in.Currency)
	if err != nil {
		vs.add("currency", "%q is not a supported currency (%s)", in.Currency, strings.Join(money.Codes(), ", "))
	}
	c.Currency = cur
	c.Input.Currency = cur.Code
	if in.EffectiveFrom.IsZero() {
		vs.add("effective_from", "required (RFC 3339)")
	} else if apperr.CheckTime("effective_from", in.EffectiveFrom) != nil {
		// Over gRPC a Timestamp may name year 10000: stored, the card
		// broke every listing of rate cards (a 500: no JSON for it).
		vs.add("effective_from", "outside 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z")
	}
	c.parsePrices(in.Prices, stored, &vs)
	c.parseBands(in.Bands, stored, &vs)
	c.parseTiers(in.Tiers, &vs)
	if in.PUE != nil {
		c.PUE = parsePUE(*in.PUE, stored, &vs)
	}
	c.boundEvents()
	return c, vs
}

// boundEvents sets what WithinEventMax reads: the largest band multiplier,
// and the GPU-microseconds of usage the card's highest rate keeps within
// EventAmountMax, so an event of fewer is checked by one comparison of
// integers (every event of a card within today's bounds, within
// metering's).
func (c *Card) boundEvents() {
	c.multMax = one
	for _, b := range c.Bands {
		if b.Multiplier.GreaterThan(c.multMax) {
			c.multMax = b.Multiplier
		}
	}
	priceMax := decimal.Zero
	for _, p := range c.prices {
		if p.GreaterThan(priceMax) {
			priceMax = p
		}
	}
	rate := c.rateMax(priceMax)
	if !rate.IsPositive() {
		c.withinMicros = math.MaxInt64
		return
	}
	// Rounded down and one less: never more than the bound allows.
	micros := eventPSMax.Shift(6).Div(rate).Floor().Sub(one)
	switch {
	case micros.IsNegative():
		c.withinMicros = 0
	case micros.GreaterThanOrEqual(decimal.NewFromInt(math.MaxInt64)):
		c.withinMicros = math.MaxInt64
	default:
		c.withinMicros = micros.IntPart()
	}
}

// rateMax is the most the card charges a GPU-hour of usage at price: under
// its largest band multiplier (tiers only discount), with its PUE
// surcharge.
func (c *Card) rateMax(price decimal.Decimal) decimal.Decimal {
	r := price.Mul(c.multMax)
	if c.PUE != nil {
		r = r.Add(c.PUE.PerGPUHour)
	}
	return r
}

// WithinEventMax reports whether the card charges gpuCount GPUs of model in
// region for d at most EventAmountMax, whatever band, tier and PUE the
// usage meets. An empty usage is Rate's to refuse.
func (c *Card) WithinEventMax(model, region string, gpuCount int32, d time.Duration) bool {
	micros := int64(d / time.Microsecond)
	if gpuCount <= 0 || micros <= 0 || micros <= c.withinMicros/int64(gpuCount) {
		return true
	}
	price, _ := c.Price(model, region)
	ps := decimal.New(micros, -6).Mul(decimal.NewFromInt32(gpuCount)).Mul(c.rateMax(price))
	return ps.LessThanOrEqual(eventPSMax)
}

// violations collects what is wrong with a card, field by field.
type violations []Violation

func (vs *violations) add(field, format string, args ...any) {
	*vs = append(*vs, Violation{field, fmt.Sprintf(format, args...)})
}

// parsePrices checks the GPU prices: at least one, each a non-negative
// decimal (at most PriceMax unless stored), one per (model, region).
func (c *Card) parsePrices(prices []PriceInput, stored bool, vs *violations) {
	if len(prices) == 0 {
		vs.add("gpu_prices", "at least one GPU price is required")
	}
	if len(prices) > gpuPricesMax {
		vs.add("gpu_prices", "more than %d prices", gpuPricesMax)
	}
	for i, p := range prices {
		f := fmt.Sprintf("gpu_prices[%d]", i)
		if p.Model == "" {
			vs.add(f+".gpu_model", "required")
		}
		h, err := money.ParseDecimal(p.Hourly)
		if err != nil || h.IsNegative() {
			vs.add(f+".hourly", "%q is not a non-negative decimal", p.Hourly)
			continue
		}
		if !stored && h.GreaterThan(PriceMax) {
			vs.add(f+".hourly", "%s is above %s a GPU-hour", p.Hourly, PriceMax)
			continue
		}
		k := priceKey{p.Model, p.Region}
		if _, dup := c.prices[k]; dup {
			vs.add(f, "second price for %s in region %q", p.Model, p.Region)
		}
		c.prices[k] = h
		if fk := (priceKey{p.Model, foldRegion(p.Region)}); fk.region != "" {
			if _, taken := c.folded[fk]; !taken {
				c.folded[fk] = h
			}
		}
	}
}

// foldRegion is a region as prices are matched when its spelling differs:
// trimmed, in lower case.
func foldRegion(r string) string { return strings.ToLower(strings.TrimSpace(r)) }

// parseBands checks the time-of-use bands: named, HH:MM bounds that differ,
// an IANA zone, a non-negative multiplier (at most MultiplierMax), and no
// instant in two bands (refuseOverlaps). A stored card's bands are held to
// the checks of the first version only (see LoadCard).
func (c *Card) parseBands(bands []BandInput, stored bool, vs *violations) {
	before := len(*vs)
	if len(bands) > bandsMax {
		vs.add("time_bands", "more than %d bands", bandsMax)
	}
	for i, b := range bands {
		f := fmt.Sprintf("time_bands[%d]", i)
		band := Band{Name: b.Name}
		var ok bool
		if b.Name == "" {
			vs.add(f+".name", "required (e.g. night)")
		}
		if band.StartMin, ok = parseClock(b.Start); !ok {
			vs.add(f+".start", "%q is not HH:MM", b.Start)
		}
		if band.EndMin, ok = parseClock(b.End); !ok {
			vs.add(f+".end", "%q is not HH:MM", b.End)
		}
		switch {
		case stored:
			// Stored before 24:00 starts and all-day bands were refused:
			// holds prices them as it did then (from 24:00 to an end E: in
			// force 00:00 to E; 00:00–24:00: all day).
			if band.StartMin == band.EndMin {
				vs.add(f, "start equals end")
			}
		case band.StartMin == 24*60:
			// Never in force (a band holds from its start, before 24:00).
			vs.add(f+".start", "24:00 is the end of a day; a band starts at 00:00 to 23:59")
		case band.StartMin == band.EndMin || band.EndMin-band.StartMin == 24*60:
			vs.add(f, "start equals end (an all-day band is a price, not a band)")
		}
		if b.TimeZone == "" {
			vs.add(f+".timezone", "required (IANA zone, e.g. Asia/Shanghai)")
		} else if !stored && strings.EqualFold(b.TimeZone, "Local") {
			// time.LoadLocation takes "Local" as the host's zone: each
			// replica (and each TZ) would price the band differently. A
			// stored card's "Local" is still read so: that zone priced it.
			vs.add(f+".timezone", "%q is the host's zone, not a zone of its own; name it (e.g. Asia/Shanghai)", b.TimeZone)
		} else if loc, err := time.LoadLocation(b.TimeZone); err != nil {
			vs.add(f+".timezone", "%q is not an IANA time zone", b.TimeZone)
		} else {
			band.Loc = loc
		}
		m, err := money.ParseDecimal(b.Multiplier)
		if err != nil || m.IsNegative() {
			vs.add(f+".multiplier", "%q is not a non-negative decimal", b.Multiplier)
		} else if !stored && m.GreaterThan(MultiplierMax) {
			vs.add(f+".multiplier", "%s is above %s", b.Multiplier, MultiplierMax)
		}
		band.Multiplier = m
		c.Bands = append(c.Bands, band)
	}
	if !stored && len(*vs) == before {
		c.refuseOverlaps(vs)
	}
}

// overlapSpan is how long from its effective_from a new card's bands in
// different zones are checked for an instant in two of them: a year and a
// week hold every offset between the zones that their daylight-saving rules
// of that year give.
const overlapSpan = 373 * 24 * time.Hour

// refuseOverlaps refuses each band that holds an instant an earlier-listed
// band holds, naming the first such band. Usage at that instant was priced
// by whichever was listed first (bandAt): a card with night 23:00–07:00 at
// ×0.80 then peak 06:00–09:00 at ×1.50 priced 06:00–07:00 at night, and
// the same bands listed the other way round at peak. Bands of one zone are
// compared as wall-clock minutes (what holds reads), exactly; bands in
// different zones instant by instant over overlapSpan, at the cuts rating
// makes (between two of them no band starts or stops holding). A stored
// card is not checked (LoadCard): it prices as it did.
func (c *Card) refuseOverlaps(vs *violations) {
	if len(c.Bands) < 2 {
		return
	}
	first := make([]int, len(c.Bands)) // the first earlier band each overlaps, -1: none
	where := make([]string, len(c.Bands))
	for j := range first {
		first[j] = -1
	}
	oneZone := true
	for _, b := range c.Bands[1:] {
		oneZone = oneZone && b.Loc.String() == c.Bands[0].Loc.String()
	}
	if oneZone {
		for j := range c.Bands {
			for i := 0; i < j && first[j] < 0; i++ {
				if from, to, ok := wallOverlap(c.Bands[i], c.Bands[j]); ok {
					first[j], where[j] = i, fmt.Sprintf("%s–%s %s", clock(from), clock(to), c.Bands[j].Loc)
				}
			}
		}
	} else {
		cuts := (&Card{Bands: c.Bands}).cuts(c.EffectiveFrom, c.EffectiveFrom.Add(overlapSpan))
		for k := 0; k+1 < len(cuts); k++ {
			held := -1
			for j, b := range c.Bands {
				if !b.holds(cuts[k]) {
					continue
				}
				if held >= 0 && (first[j] < 0 || held < first[j]) {
					first[j], where[j] = held, "from "+cuts[k].UTC().Format(time.RFC3339)
				}
				if held < 0 {
					held = j
				}
			}
		}
	}
	for j, i := range first {
		if i >= 0 {
			vs.add(fmt.Sprintf("time_bands[%d]", j), "overlaps time_bands[%d] (%q) %s: an instant is in one band at most",
				i, c.Bands[i].Name, where[j])
		}
	}
}

// wallOverlap returns the first wall-clock minutes [from, to) two bands of
// one zone both hold, if any (each band is [start, end), or [start, 24:00)
// and [00:00, end) when it wraps past midnight).
func wallOverlap(a, b Band) (from, to int, ok bool) {
	for _, x := range wallSpans(a) {
		for _, y := range wallSpans(b) {
			if from, to = max(x[0], y[0]), min(x[1], y[1]); from < to {
				return from, to, true
			}
		}
	}
	return 0, 0, false
}

func wallSpans(b Band) [][2]int {
	if b.EndMin > b.StartMin {
		return [][2]int{{b.StartMin, b.EndMin}}
	}
	return [][2]int{{b.StartMin, 24 * 60}, {0, b.EndMin}}
}

// clock renders minutes past midnight as HH:MM.
func clock(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }

// parseTiers checks the graduated volume tiers: increasing bounds (only the
// last may be open), each discount a fraction in [0, 1).
func (c *Card) parseTiers(tiers []TierInput, vs *violations) {
	if len(tiers) > tiersMax {
		vs.add("volume_tiers", "more than %d tiers", tiersMax)
	}
	prevUpTo := decimal.Zero
	for i, t := range tiers {
		f := fmt.Sprintf("volume_tiers[%d]", i)
		tier := Tier{}
		d, err := money.ParseDecimal(t.Discount)
		if err != nil || d.IsNegative() || d.GreaterThanOrEqual(one) {
			vs.add(f+".discount", "%q is not a fraction in [0, 1)", t.Discount)
		}
		tier.Discount = d
		if strings.TrimSpace(t.UpToGPUHours) == "" {
			if i != len(tiers)-1 {
				vs.add(f+".up_to_gpu_hours", "only the last tier may be unbounded")
			}
			tier.Label = prevUpTo.String() + "+ GPU-h"
		} else {
			u, err := money.ParseDecimal(t.UpToGPUHours)
			switch {
			case err != nil || !u.IsPositive():
				vs.add(f+".up_to_gpu_hours", "%q is not a positive decimal", t.UpToGPUHours)
			case !u.GreaterThan(prevUpTo):
				vs.add(f+".up_to_gpu_hours", "%s does not exceed the previous tier's %s", u, prevUpTo)
			case u.GreaterThan(decimal.NewFromInt(1e9)):
				vs.add(f+".up_to_gpu_hours", "%s is beyond 1e9 GPU-hours", u)
			default:
				tier.UpToMicros = u.Mul(decimal.NewFromInt(hourMicro)).Ceil().IntPart()
				tier.Label = prevUpTo.String() + "-" + u.String() + " GPU-h"
				prevUpTo = u
			}
		}
		c.Tiers = append(c.Tiers, tier)
	}
}

// parsePUE checks the carbon surcharge: a threshold >= 1 and a non-negative
// price per GPU-hour (at most PriceMax unless stored).
func parsePUE(in PUEInput, stored bool, vs *violations) *PUE {
	th, err := money.ParseDecimal(in.Threshold)
	if err != nil || th.LessThan(one) {
		vs.add("pue_surcharge.threshold", "%q is not a decimal >= 1", in.Threshold)
	}
	per, err2 := money.ParseDecimal(in.PerGPUHour)
	if err2 != nil || per.IsNegative() {
		vs.add("pue_surcharge.per_gpu_hour", "%q is not a non-negative decimal", in.PerGPUHour)
	} else if !stored && per.GreaterThan(PriceMax) {
		vs.add("pue_surcharge.per_gpu_hour", "%s is above %s a GPU-hour", in.PerGPUHour, PriceMax)
	}
	return &PUE{Threshold: th, PerGPUHour: per}
}

func parseClock(s string) (int, bool) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) != 2 || len(m) != 2 {
		return 0, false
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || hh > 24 || mm < 0 || mm > 59 || (hh == 24 && mm != 0) {
		return 0, false
	}
	return hh*60 + mm, true
}

// Price returns the hourly price of one GPU of a model in a region (a
// region-specific price first, as spelled, then spelled in another case or
// with white space around it, then the card's default for the model).
func (c *Card) Price(model, region string) (decimal.Decimal, bool) {
	if region != "" {
		if p, ok := c.prices[priceKey{model, region}]; ok {
			return p, true
		}
		if p, ok := c.folded[priceKey{model, foldRegion(region)}]; ok {
			return p, true
		}
	}
	p, ok := c.prices[priceKey{model, ""}]
	return p, ok
}

// Book is the set of rate cards, per currency, newest effective first.
type Book struct{ byCur map[string][]*Card }

// NewBook indexes cards.
func NewBook(cards []*Card) *Book {
	b := &Book{byCur: map[string][]*Card{}}
	for _, c := range cards {
		b.byCur[c.Currency.Code] = append(b.byCur[c.Currency.Code], c)
	}
	for _, cs := range b.byCur {
		sort.Slice(cs, func(i, j int) bool {
			if !cs[i].EffectiveFrom.Equal(cs[j].EffectiveFrom) {
				return cs[i].EffectiveFrom.After(cs[j].EffectiveFrom)
			}
			return cs[i].Seq > cs[j].Seq
		})
	}
	return b
}

// For returns the card that prices a usage: the newest in the currency whose
// effective_from <= the usage's start.
func (b *Book) For(currency string, start time.Time) (*Card, bool) {
	for _, c := range b.byCur[currency] {
		if !c.EffectiveFrom.After(start) {
			return c, true
		}
	}
	return nil, false
}

// Span is a part of an interval one card prices: [Start, End).
type Span struct {
	Card       *Card
	Start, End time.Time
}

// Spans cuts [start, end) at each later card's effective_from and names the
// card For answers at each part's start: what prices usage in that part
// recorded as events that do not cross an effective_from (rating prices
// each event whole by the card at its start). ok is false when no card of
// the currency is in force at start.
func (b *Book) Spans(currency string, start, end time.Time) ([]Span, bool) {
	card, ok := b.For(currency, start)
	if !ok {
		return nil, false
	}
	var cuts []time.Time // newest first, as the cards are
	for _, c := range b.byCur[currency] {
		if c.EffectiveFrom.After(start) && c.EffectiveFrom.Before(end) && (len(cuts) == 0 || !c.EffectiveFrom.Equal(cuts[len(cuts)-1])) {
			cuts = append(cuts, c.EffectiveFrom)
		}
	}
	spans := []Span{{Card: card, Start: start, End: end}}
	for i := len(cuts) - 1; i >= 0; i-- {
		next, _ := b.For(currency, cuts[i])
		spans[len(spans)-1].End = cuts[i]
		spans = append(spans, Span{Card: next, Start: cuts[i], End: end})
	}
	return spans, true
}

// SameBody reports whether two card inputs are the same card (ids aside):
// a create repeating a stored card's body is a replay. effective_from is
// compared in microseconds (parseCard): a body stored before at
// nanoseconds is the card posted again.
func (in CardInput) SameBody(o CardInput) bool {
	return in.Currency == o.Currency && in.EffectiveFrom.Truncate(time.Microsecond).Equal(o.EffectiveFrom.Truncate(time.Microsecond)) &&
		slices.Equal(in.Prices, o.Prices) && slices.Equal(in.Bands, o.Bands) && slices.Equal(in.Tiers, o.Tiers) &&
		(in.PUE == nil) == (o.PUE == nil) && (in.PUE == nil || *in.PUE == *o.PUE)
}
