package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// ConsumerName records usage.recorded message ids in pricing's inbox.
const ConsumerName = "pricing-rating"

// pendingRetryMax bounds one retry pass over usage waiting for a card.
const pendingRetryMax = 5000

// UsageMessage is one usage.recorded message as the port decoded it.
type UsageMessage struct {
	ID     string
	Events []domain.UsageEvent
}

// RateMessages rates a fetched batch of usage.recorded messages in ONE
// transaction: claim the message ids (a redelivered message changes
// nothing), price every fresh event at full precision, aggregate per lease,
// apply cumulative rounding, write the charges with their lines, and put one
// charges.rated.{provider} message per provider into the outbox.
func (a *App) RateMessages(ctx context.Context, msgs []UsageMessage) error {
	book, err := a.Book(ctx)
	if err != nil {
		return err
	}
	idList := make([]string, len(msgs))
	for i, m := range msgs {
		idList[i] = m.ID
	}
	now := a.Clock.Now()
	err = a.Store.WithTx(ctx, func(tx Tx) error {
		if err := tx.LockRating(ctx); err != nil {
			return err
		}
		fresh, err := tx.Claim(ctx, ConsumerName, idList)
		if err != nil {
			return err
		}
		var items []item
		for i := range msgs {
			m := &msgs[i]
			if !fresh[m.ID] {
				continue
			}
			delete(fresh, m.ID) // the same id twice in one fetch (a redelivery beside the first) counts once
			for j := range m.Events {
				items = append(items, item{source: m.ID, ev: &m.Events[j]})
			}
		}
		if err := a.failPoint("before-apply"); err != nil {
			return err
		}
		if err := a.apply(ctx, tx, book, items, now); err != nil {
			return err
		}
		return a.failPoint("before-commit")
	})
	if err != nil {
		return fmt.Errorf("rate %d messages: %w", len(msgs), err)
	}
	return a.failPoint("after-commit")
}

// RetryPending rates usage that waited for a rate card, if a card now
// prices it: the first page of up to pendingRetryMax waiting events that
// holds any a card prices, read in the order they began to wait. It
// returns how many events it rated (0: none waiting is priceable). It read
// only the first page, so usage a card prices waited behind a page of
// usage none did, for as long as that did.
func (a *App) RetryPending(ctx context.Context) (int, error) {
	book, err := a.Book(ctx)
	if err != nil {
		return 0, err
	}
	var ready []item
	var readyIDs []string
	var since time.Time
	var after string
	for len(ready) == 0 {
		rows, lastSince, lastID, err := a.Store.Pending(ctx, since, after, pendingRetryMax)
		if err != nil || lastID == "" {
			return 0, err
		}
		since, after = lastSince, lastID
		pues := pueReads{}
		for i := range rows {
			ev := &rows[i].Event
			if _, _, why := rateable(book, ev, pues); why != "" {
				continue
			}
			ready = append(ready, item{source: "pending:" + ev.ID, ev: ev})
			readyIDs = append(readyIDs, ev.ID)
		}
	}
	n := 0
	err = a.Store.WithTx(ctx, func(tx Tx) error {
		if err := tx.LockRating(ctx); err != nil {
			return err
		}
		taken, err := tx.TakePending(ctx, readyIDs)
		if err != nil {
			return err
		}
		items := ready[:0:0]
		for _, it := range ready {
			if taken[it.ev.ID] {
				items = append(items, it)
			}
		}
		n = len(items)
		return a.apply(ctx, tx, book, items, a.Clock.Now())
	})
	return n, err
}

type item struct {
	source string // the message (or pending row) the event came from
	ev     *domain.UsageEvent
}

// priceable returns the card that prices an event, or why none does.
func priceable(book *domain.Book, ev *domain.UsageEvent) (*domain.Card, string) {
	cur, err := money.Lookup(ev.Currency)
	if err != nil {
		return nil, fmt.Sprintf("unknown currency %q", ev.Currency)
	}
	card, ok := book.For(cur.Code, ev.Start)
	if !ok {
		return nil, fmt.Sprintf("no rate card in %s effective at %s", cur.Code, ev.Start.Format(time.RFC3339))
	}
	if card.Unreadable != "" {
		return nil, fmt.Sprintf("rate card %s cannot be read (see the log); waits for a card that replaces it", card.ID)
	}
	if _, ok := card.Price(ev.GPUModel, ev.Region); !ok {
		return nil, fmt.Sprintf("rate card %s has no price for GPU model %s", card.ID, ev.GPUModel)
	}
	if !card.WithinEventMax(ev.GPUModel, ev.Region, ev.GPUCount, ev.End.Sub(ev.Start)) {
		// Only a card stored before today's price bounds (or usage beyond
		// metering's): its charge would be more than the ledger takes.
		return nil, fmt.Sprintf("rate card %s may charge this usage (%d × %s for %s) more than %s %s, the most one event is charged; "+
			"waits for a card that replaces it", card.ID, ev.GPUCount, ev.GPUModel, ev.End.Sub(ev.Start), domain.EventAmountMax, cur.Code)
	}
	return card, ""
}

// pueRead is a provider PUE string as read: the PUE (nil: unknown, "") or
// why it cannot be read.
type pueRead struct {
	pue *decimal.Decimal
	why string
}

// pueReads caches the reads of the PUE strings of one pass (a fetch's
// events carry a few providers' PUEs).
type pueReads map[string]pueRead

// read returns an event's provider PUE (nil: unknown), or why it cannot be
// read. An unreadable PUE is never taken as unknown: that rated the usage
// without its PUE surcharge (metering took "1e64" and published its 65
// digits, which ParseDecimal refuses).
func (c pueReads) read(s string) (*decimal.Decimal, string) {
	if s == "" {
		return nil, ""
	}
	r, ok := c[s]
	if !ok {
		if d, err := money.ParseDecimal(s); err != nil {
			r.why = fmt.Sprintf("provider PUE %.70q cannot be read (%v): rated without it, the usage would miss its PUE surcharge; "+
				"it waits, uncharged (no rate card makes it readable)", s, err)
		} else {
			r.pue = &d
		}
		c[s] = r
	}
	return r.pue, r.why
}

// rateable returns the card that prices an event and the event's provider
// PUE, or why it cannot be rated.
func rateable(book *domain.Book, ev *domain.UsageEvent, pues pueReads) (*domain.Card, *decimal.Decimal, string) {
	card, why := priceable(book, ev)
	if why != "" {
		return nil, nil, why
	}
	pue, why := pues.read(ev.ProviderPUE)
	if why != "" {
		return nil, nil, why
	}
	return card, pue, ""
}

// groupKey is a charge's: a lease's usage in one currency and cycle of one
// rating, in chunks of at most chargeEventsMax events.
type groupKey struct {
	lease, currency, cycle string
	chunk                  int
}

// chargeEventsMax bounds the events (and so the event ids on the wire) of
// one charge: 2000 ids of 128 characters are 262 KB of a charges.rated
// message. One charge carried every event of its lease in a fetch, over a
// MiB for an agent's week-long spool of per-minute events, and NATS refused
// it for good (max_payload; a charge is not split), dead-lettering every
// charge of its batch: the usage billed in pricing, never in the ledger.
const chargeEventsMax = 2000

type lineKey struct {
	card          *domain.Card
	kind          string
	model, region string
	count         int32
	band, tier    int
}

// lineAgg is one line of a group: the pieces of the group's events that
// price alike, so decimal work happens once per line, not per event. event
// is the first event the line prices (events of one lease that price alike
// share the line; the charge's event_ids list them all).
type lineAgg struct {
	event      string
	micros     int64
	start, end time.Time
}

type group struct {
	key              groupKey
	cur              money.Currency
	renter, provider string
	source           string
	events           []string
	effective        time.Time
	lines            map[lineKey]*lineAgg
	order            []lineKey
	aggs             []*lineAgg // order's lines, by index
}

// rated is an event a card prices, with its usage.
type rated struct {
	it    item
	card  *domain.Card
	usage domain.Usage
	cur   money.Currency
}

// ratingState is what rating reads before pricing: renters' monthly tier
// volume and the leases' cumulative rounding.
type ratingState struct {
	months []domain.RenterMonth
	used   map[string]domain.MonthUsage // renter → month → GPU-microseconds
	leases map[domain.LeaseCurrency]domain.LeaseTotal
}

// apply prices items inside tx and writes their effects.
func (a *App) apply(ctx context.Context, tx Tx, book *domain.Book, items []item, now time.Time) error {
	if len(items) == 0 {
		return nil
	}
	toRate, pending, months, leaseKeys := classify(book, items)
	st := ratingState{months: months, used: map[string]domain.MonthUsage{}}
	if len(toRate) > 0 {
		if err := st.load(ctx, tx, leaseKeys); err != nil {
			return err
		}
	}
	groups, err := priceEvents(toRate, st.used)
	if err != nil {
		return err
	}
	charges := st.charge(groups)
	if err := checkAmounts(charges); err != nil {
		return err
	}
	if len(toRate) > 0 {
		if err := st.save(ctx, tx, charges, now); err != nil {
			return err
		}
	}
	if err := tx.AddPending(ctx, pending, now); err != nil {
		return err
	}
	return tx.PublishCharges(ctx, batchByProvider(charges, items[0].source))
}

// classify is the first pass: the events a card prices, with their usage,
// and those none does (kept as pending); and the tier months and leases the
// priced ones touch.
func classify(book *domain.Book, items []item) ([]rated, []domain.PendingUsage, []domain.RenterMonth, []domain.LeaseCurrency) {
	var pending []domain.PendingUsage
	toRate := make([]rated, 0, len(items))
	pues := pueReads{}
	monthSet := map[domain.RenterMonth]bool{}
	leaseSet := map[domain.LeaseCurrency]bool{}
	// The events of a fetch come in runs of one lease and renter: an event
	// whose lease, or whose renter and months, the one before it already
	// added skips the sets (hashing their strings showed in the profile).
	var lastLease domain.LeaseCurrency
	var lastRenter string
	var lastFrom, lastTo time.Time // the months [from, to) lastRenter's last event added (Months: up to the one holding its end's last instant)
	for _, it := range items {
		ev := it.ev
		card, pue, why := rateable(book, ev, pues)
		if why != "" {
			pending = append(pending, domain.PendingUsage{Event: *ev, MessageID: it.source, Reason: why})
			continue
		}
		u := domain.Usage{Model: ev.GPUModel, Region: ev.Region, GPUCount: ev.GPUCount, Start: ev.Start, End: ev.End, PUE: pue}
		toRate = append(toRate, rated{it: it, card: card, usage: u, cur: card.Currency})
		if ev.RenterID != lastRenter || u.Start.Before(lastFrom) || u.End.After(lastTo) {
			for _, m := range domain.Months(u.Start, u.End) {
				monthSet[domain.RenterMonth{RenterID: ev.RenterID, Month: m}] = true
			}
			lastRenter, lastFrom, lastTo = ev.RenterID, domain.MonthStart(u.Start), domain.MonthStart(u.End.Add(-time.Nanosecond)).AddDate(0, 1, 0)
		}
		if lk := (domain.LeaseCurrency{LeaseID: ev.LeaseID, Currency: card.Currency.Code}); lk != lastLease {
			leaseSet[lk] = true
			lastLease = lk
		}
	}
	months := make([]domain.RenterMonth, 0, len(monthSet))
	for k := range monthSet {
		months = append(months, k)
	}
	leases := make([]domain.LeaseCurrency, 0, len(leaseSet))
	for k := range leaseSet {
		leases = append(leases, k)
	}
	return toRate, pending, months, leases
}

// load reads the tier volume of st.months and the state of the leases.
func (st *ratingState) load(ctx context.Context, tx Tx, leaseKeys []domain.LeaseCurrency) error {
	tiers, err := tx.TierUsage(ctx, st.months)
	if err != nil {
		return err
	}
	if st.leases, err = tx.LeaseTotals(ctx, leaseKeys); err != nil {
		return err
	}
	for k, v := range tiers {
		if st.used[k.RenterID] == nil {
			st.used[k.RenterID] = domain.MonthUsage{}
		}
		st.used[k.RenterID][k.Month] = v
	}
	return nil
}

// priceEvents is the second pass: every event into integer pieces (tier
// volume accrues in used as it goes), aggregated per lease and cycle into
// lines.
func priceEvents(toRate []rated, used map[string]domain.MonthUsage) ([]*group, error) {
	groups := map[groupKey]*group{}
	var order []*group
	var buf []domain.Piece
	var g *group // the last event's group: the next event is most often of the same lease
	for _, r := range toRate {
		ev := r.it.ev
		mu := used[ev.RenterID]
		if mu == nil {
			mu = domain.MonthUsage{}
			used[ev.RenterID] = mu
		}
		var err error
		buf, err = r.card.Rate(r.usage, mu, buf[:0])
		if err != nil {
			return nil, fmt.Errorf("rate event %s: %w", ev.ID, err)
		}
		gk := groupKey{lease: ev.LeaseID, currency: r.cur.Code, cycle: ev.CycleID} // chunk 0: the map's key for the open chunk
		if g == nil || g.key.lease != gk.lease || g.key.currency != gk.currency || g.key.cycle != gk.cycle {
			g = groups[gk]
		}
		if g != nil && len(g.events) >= chargeEventsMax { // full: the next chunk of the lease
			gk.chunk = g.key.chunk + 1
			g = nil
		}
		if g == nil {
			g = &group{key: gk, cur: r.cur, renter: ev.RenterID, provider: ev.ProviderID, source: r.it.source, lines: map[lineKey]*lineAgg{}}
			groups[groupKey{lease: gk.lease, currency: gk.currency, cycle: gk.cycle}] = g
			order = append(order, g)
		}
		g.events = append(g.events, ev.ID)
		if r.usage.End.After(g.effective) {
			g.effective = r.usage.End
		}
		for _, p := range buf {
			g.addPiece(lineKey{card: r.card, kind: p.Kind, model: ev.GPUModel, region: ev.Region, count: ev.GPUCount, band: p.Band, tier: p.Tier}, ev.ID, p)
		}
	}
	return order, nil
}

// lineScanMax is how many lines a group searches in order before it hashes
// into its map instead.
const lineScanMax = 8

// addPiece adds a piece to its line. A group has a few lines (bands,
// tiers), so they are searched in order before the map is hashed.
func (g *group) addPiece(lk lineKey, event string, p domain.Piece) {
	var la *lineAgg
	if len(g.order) <= lineScanMax {
		for i := range g.order {
			if g.order[i] == lk {
				la = g.aggs[i]
				break
			}
		}
	} else {
		la = g.lines[lk]
	}
	if la == nil {
		la = &lineAgg{event: event, start: p.Start, end: p.End}
		g.lines[lk] = la
		g.order = append(g.order, lk)
		g.aggs = append(g.aggs, la)
	}
	la.micros += p.GPUMicros
	if p.Start.Before(la.start) {
		la.start = p.Start
	}
	if p.End.After(la.end) {
		la.end = p.End
	}
}

// charge is the third pass: decimal work once per aggregated line, and
// cumulative rounding per lease (st.leases moves on).
func (st *ratingState) charge(groups []*group) []domain.Charge {
	charges := make([]domain.Charge, 0, len(groups))
	nLines := 0
	for _, g := range groups {
		nLines += len(g.order)
	}
	lines := make([]domain.ChargeLine, 0, nLines) // every charge's lines, one allocation
	for _, g := range groups {
		first := len(lines)
		total := decimal.Zero
		for i, lk := range g.order {
			la := g.aggs[i]
			p := domain.Piece{Kind: lk.kind, Band: lk.band, Tier: lk.tier}
			unit, mult := lk.card.Factors(p, lk.model, lk.region)
			ps := domain.PriceSeconds(la.micros, unit, mult)
			total = total.Add(ps)
			lines = append(lines, domain.ChargeLine{EventID: la.event, Kind: lk.kind, GPUModel: lk.model, GPUCount: lk.count,
				Band: lk.card.BandName(p), Tier: lk.card.TierLabel(p), RateCardID: lk.card.ID, Start: la.start, End: la.end,
				GPUHours: domain.Str(domain.GPUHours(la.micros)), UnitPrice: domain.Str(unit), Multiplier: domain.Str(mult), Amount: domain.Str(domain.Amount(ps))})
		}
		lkey := domain.LeaseCurrency{LeaseID: g.key.lease, Currency: g.cur.Code}
		lt := st.leases[lkey]
		billed := lt.Add(g.cur, total)
		st.leases[lkey] = lt
		id := hashID("chg", g.source, g.key.lease, g.key.currency, g.key.cycle)
		if g.key.chunk > 0 { // chunk 0 keeps the id a charge always had
			id = hashID("chg", g.source, g.key.lease, g.key.currency, g.key.cycle, strconv.Itoa(g.key.chunk))
		}
		charges = append(charges, domain.Charge{ID: id,
			SourceID: g.source, LeaseID: g.key.lease, RenterID: g.renter, ProviderID: g.provider, CycleID: g.key.cycle,
			Currency: g.cur, Amount: billed, ExactAmount: domain.Amount(total), ExactPS: total, EventIDs: g.events,
			EffectiveAt: g.effective, Lines: lines[first:len(lines):len(lines)]})
	}
	return charges
}

// checkAmounts asserts what WithinEventMax and chargeEventsMax keep every
// charge to: an amount the ledger takes (below domain.AmountMax). One it
// refuses is never written or published: the ledger dead-lettered its
// whole ChargesRated message after pricing counted it billed. The rating
// fails instead, and the consumer tries its messages alone, dead-lettering
// the one that keeps failing.
func checkAmounts(charges []domain.Charge) error {
	for i := range charges {
		if c := &charges[i]; c.Amount.Abs().GreaterThanOrEqual(domain.AmountMax) {
			return fmt.Errorf("charge %s of lease %s: %s %s is more than the ledger takes (below %s): not rated",
				c.ID, c.LeaseID, c.Currency.Format(c.Amount), c.Currency.Code, domain.AmountMax)
		}
	}
	return nil
}

// save writes the tier volume, the leases' state and the charges.
func (st *ratingState) save(ctx context.Context, tx Tx, charges []domain.Charge, now time.Time) error {
	tierRows := make(map[domain.RenterMonth]int64, len(st.months))
	for _, k := range st.months {
		tierRows[k] = st.used[k.RenterID][k.Month]
	}
	if err := tx.SaveTierUsage(ctx, tierRows); err != nil {
		return err
	}
	if err := tx.SaveLeaseTotals(ctx, st.leases, now); err != nil {
		return err
	}
	return tx.InsertCharges(ctx, charges, now)
}

// batchByProvider groups charges per provider, in first-charge order; a
// batch's id is unique to the rating's first source message.
func batchByProvider(charges []domain.Charge, firstSource string) []domain.ChargeBatch {
	var out []domain.ChargeBatch
	at := map[string]int{}
	for i := range charges {
		c := &charges[i]
		j, ok := at[c.ProviderID]
		if !ok {
			j = len(out)
			at[c.ProviderID] = j
			out = append(out, domain.ChargeBatch{ID: hashID("cr", firstSource, c.ProviderID), ProviderID: c.ProviderID})
		}
		out[j].Charges = append(out[j].Charges, c)
	}
	return out
}

// hashID is a deterministic id from its parts: a redelivered message that
// was already applied is skipped by the inbox, and anything else gets ids
// unique to its first source message.
func hashID(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return prefix + "_" + hex.EncodeToString(h.Sum(nil)[:16])
}
