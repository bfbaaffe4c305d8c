package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/pricing/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// ConsumerName records usage.recorded message ids in pricing's inbox.
const ConsumerName = "pricing-rating"

// pendingRetryMax bounds one retry pass over usage waiting for a card.
const pendingRetryMax = 5000

// Incoming is one usage.recorded message.
type Incoming struct {
	ID, Subject string
	Data        []byte
}

// RateMessages rates a fetched batch of usage.recorded messages in ONE
// transaction: claim the message ids (a redelivered message changes
// nothing), price every fresh event at full precision, aggregate per lease,
// apply cumulative rounding, write the charges with their lines, and put one
// charges.rated.{provider} message per provider into the outbox.
func (a *App) RateMessages(ctx context.Context, msgs []Incoming) error {
	book, err := a.Book(ctx)
	if err != nil {
		return err
	}
	batches := make([]*eventsv1.UsageRecordedBatch, len(msgs))
	idList := make([]string, len(msgs))
	var poison natsx.PoisonError
	for i, m := range msgs {
		idList[i] = m.ID
		var b eventsv1.UsageRecordedBatch
		if err := proto.Unmarshal(m.Data, &b); err != nil {
			poison.Add(m.ID, fmt.Errorf("undecodable usage batch: %w", err))
			continue
		}
		batches[i] = &b
	}
	if len(poison.ByID) > 0 {
		return &poison // dead-lettered by the consumer; the rest comes again
	}
	now := a.Clock.Now()
	err = pg.InTx(ctx, a.Pool, func(tx pgx.Tx) error {
		if err := postgres.LockRating(ctx, tx); err != nil {
			return err
		}
		fresh, err := outbox.Claim(ctx, tx, postgres.Schema, ConsumerName, idList)
		if err != nil {
			return err
		}
		var items []item
		for i, m := range msgs {
			if !fresh[m.ID] {
				continue
			}
			for _, e := range batches[i].Events {
				items = append(items, item{source: m.ID, ev: e})
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
// prices it. It returns how many events it rated.
func (a *App) RetryPending(ctx context.Context) (int, error) {
	book, err := a.Book(ctx)
	if err != nil {
		return 0, err
	}
	rows, err := a.Store.Pending(ctx, pendingRetryMax)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	var ready []item
	var readyIDs []string
	for _, r := range rows {
		var ev eventsv1.UsageEvent
		if err := proto.Unmarshal(r.Payload, &ev); err != nil {
			continue // stays visible in pending_rating with its reason
		}
		if _, why := priceable(book, &ev); why != "" {
			continue
		}
		ready = append(ready, item{source: "pending:" + r.EventID, ev: &ev})
		readyIDs = append(readyIDs, r.EventID)
	}
	if len(ready) == 0 {
		return 0, nil
	}
	n := 0
	err = pg.InTx(ctx, a.Pool, func(tx pgx.Tx) error {
		if err := postgres.LockRating(ctx, tx); err != nil {
			return err
		}
		taken, err := postgres.TakePending(ctx, tx, readyIDs)
		if err != nil {
			return err
		}
		items := ready[:0:0]
		for _, it := range ready {
			if taken[it.ev.Id] {
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
	ev     *eventsv1.UsageEvent
}

// priceable returns the card that prices an event, or why none does.
func priceable(book *domain.Book, ev *eventsv1.UsageEvent) (*domain.Card, string) {
	cur, err := money.Lookup(ev.Currency)
	if err != nil {
		return nil, fmt.Sprintf("unknown currency %q", ev.Currency)
	}
	start := ev.StartTime.AsTime()
	card, ok := book.For(cur.Code, start)
	if !ok {
		return nil, fmt.Sprintf("no rate card in %s effective at %s", cur.Code, start.Format(time.RFC3339))
	}
	if _, ok := card.Price(ev.GpuModel, ev.Region); !ok {
		return nil, fmt.Sprintf("rate card %s has no price for GPU model %s", card.ID, ev.GpuModel)
	}
	return card, ""
}

type groupKey struct{ lease, currency, cycle string }

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
}

// apply prices items inside tx and writes their effects.
func (a *App) apply(ctx context.Context, tx pgx.Tx, book *domain.Book, items []item, now time.Time) error {
	if len(items) == 0 {
		return nil
	}
	type rated struct {
		it    item
		card  *domain.Card
		usage domain.Usage
		cur   money.Currency
	}
	var pending []postgres.PendingRow
	toRate := make([]rated, 0, len(items))
	pues := map[string]*decimal.Decimal{}
	monthSet := map[postgres.MonthKey]bool{}
	leaseSet := map[postgres.LeaseKey]bool{}
	for _, it := range items {
		ev := it.ev
		card, why := priceable(book, ev)
		if why != "" {
			payload, err := proto.Marshal(ev)
			if err != nil {
				return err
			}
			pending = append(pending, postgres.PendingRow{EventID: ev.Id, MessageID: it.source, RenterID: ev.RenterId,
				Currency: ev.Currency, GPUModel: ev.GpuModel, Payload: payload, Reason: why})
			continue
		}
		pue, ok := pues[ev.ProviderPue]
		if !ok && ev.ProviderPue != "" {
			if d, err := money.ParseDecimal(ev.ProviderPue); err == nil {
				pue = &d
			}
			pues[ev.ProviderPue] = pue
		}
		u := domain.Usage{Model: ev.GpuModel, Region: ev.Region, GPUCount: ev.GpuCount,
			Start: ev.StartTime.AsTime(), End: ev.EndTime.AsTime(), PUE: pue}
		toRate = append(toRate, rated{it: it, card: card, usage: u, cur: card.Currency})
		for _, m := range domain.Months(u.Start, u.End) {
			monthSet[postgres.MonthKey{RenterID: ev.RenterId, Month: m}] = true
		}
		leaseSet[postgres.LeaseKey{LeaseID: ev.LeaseId, Currency: card.Currency.Code}] = true
	}
	monthKeys := make([]postgres.MonthKey, 0, len(monthSet))
	for k := range monthSet {
		monthKeys = append(monthKeys, k)
	}
	leaseKeys := make([]postgres.LeaseKey, 0, len(leaseSet))
	for k := range leaseSet {
		leaseKeys = append(leaseKeys, k)
	}
	var tiers map[postgres.MonthKey]int64
	var leases map[postgres.LeaseKey]postgres.LeaseTotal
	if len(toRate) > 0 {
		var err error
		if tiers, err = postgres.TierUsage(ctx, tx, monthKeys); err != nil {
			return err
		}
		if leases, err = postgres.LeaseTotals(ctx, tx, leaseKeys); err != nil {
			return err
		}
	}
	used := map[string]domain.MonthUsage{}
	for k, v := range tiers {
		if used[k.RenterID] == nil {
			used[k.RenterID] = domain.MonthUsage{}
		}
		used[k.RenterID][k.Month] = v
	}

	// Price every event into integer pieces, aggregated per lease and cycle.
	groups := map[groupKey]*group{}
	var order []*group
	var buf []domain.Piece
	for _, r := range toRate {
		ev := r.it.ev
		mu := used[ev.RenterId]
		if mu == nil {
			mu = domain.MonthUsage{}
			used[ev.RenterId] = mu
		}
		var err error
		buf, err = r.card.Rate(r.usage, mu, buf[:0])
		if err != nil {
			return fmt.Errorf("rate event %s: %w", ev.Id, err)
		}
		gk := groupKey{ev.LeaseId, r.cur.Code, ev.CycleId}
		g := groups[gk]
		if g == nil {
			g = &group{key: gk, cur: r.cur, renter: ev.RenterId, provider: ev.ProviderId, source: r.it.source, lines: map[lineKey]*lineAgg{}}
			groups[gk] = g
			order = append(order, g)
		}
		g.events = append(g.events, ev.Id)
		if r.usage.End.After(g.effective) {
			g.effective = r.usage.End
		}
		for _, p := range buf {
			lk := lineKey{card: r.card, kind: p.Kind, model: ev.GpuModel, region: ev.Region, count: ev.GpuCount, band: p.Band, tier: p.Tier}
			la := g.lines[lk]
			if la == nil {
				la = &lineAgg{event: ev.Id, start: p.Start, end: p.End}
				g.lines[lk] = la
				g.order = append(g.order, lk)
			}
			la.micros += p.GPUMicros
			if p.Start.Before(la.start) {
				la.start = p.Start
			}
			if p.End.After(la.end) {
				la.end = p.End
			}
		}
	}

	// Decimal work once per aggregated line; cumulative rounding per lease.
	charges := make([]postgres.ChargeRow, 0, len(order))
	var lines []postgres.Line
	batches := map[string]*eventsv1.ChargesRatedBatch{}
	var provOrder []string
	firstSource := items[0].source
	for _, g := range order {
		chargeID := hashID("chg", g.source, g.key.lease, g.key.currency, g.key.cycle)
		total := decimal.Zero
		rc := &eventsv1.RatedCharge{ChargeId: chargeID, LeaseId: g.key.lease, RenterId: g.renter, ProviderId: g.provider,
			CycleId: g.key.cycle, Currency: g.cur.Code, EventIds: g.events, EffectiveAt: timestamppb.New(g.effective)}
		lines = lines[:0]
		for _, lk := range g.order {
			la := g.lines[lk]
			p := domain.Piece{Kind: lk.kind, Band: lk.band, Tier: lk.tier}
			unit, mult := lk.card.Factors(p, lk.model, lk.region)
			ps := domain.PriceSeconds(la.micros, unit, mult)
			total = total.Add(ps)
			amount, hours := domain.Amount(ps), domain.GPUHours(la.micros)
			band, tier := lk.card.BandName(p), lk.card.TierLabel(p)
			l := postgres.Line{EventID: la.event, Kind: lk.kind, GPUModel: lk.model, GPUCount: lk.count, Band: band, Tier: tier,
				RateCardID: lk.card.ID, Start: la.start.UTC().Format(time.RFC3339Nano), End: la.end.UTC().Format(time.RFC3339Nano),
				GPUHours: Str(hours), UnitPrice: Str(unit), Multiplier: Str(mult), Amount: Str(amount)}
			lines = append(lines, l)
			rc.Lines = append(rc.Lines, &eventsv1.ChargeLine{EventId: l.EventID, Kind: l.Kind, GpuModel: l.GPUModel, GpuCount: l.GPUCount,
				Band: band, Tier: tier, RateCardId: l.RateCardID, StartTime: timestamppb.New(la.start), EndTime: timestamppb.New(la.end),
				GpuHours: l.GPUHours, UnitPrice: l.UnitPrice, Multiplier: l.Multiplier, Amount: l.Amount})
		}
		linesJSON, err := json.Marshal(lines)
		if err != nil {
			return err
		}
		lkey := postgres.LeaseKey{LeaseID: g.key.lease, Currency: g.cur.Code}
		st := leases[lkey]
		lt := domain.LeaseTotal{ExactPS: st.ExactPS, Billed: st.Billed}
		charge := lt.Add(g.cur, total)
		leases[lkey] = postgres.LeaseTotal{ExactPS: lt.ExactPS, Billed: lt.Billed}
		exact := domain.Amount(total)
		rc.Amount, rc.ExactAmount = g.cur.Format(charge), Str(exact)
		charges = append(charges, postgres.ChargeRow{ChargeID: chargeID, SourceID: g.source, LeaseID: g.key.lease,
			RenterID: g.renter, ProviderID: g.provider, CycleID: g.key.cycle, Currency: g.cur.Code, Amount: charge,
			ExactAmount: exact, ExactPS: total, EventIDs: g.events, EffectiveAt: g.effective, Lines: linesJSON})
		b := batches[g.provider]
		if b == nil {
			b = &eventsv1.ChargesRatedBatch{BatchId: hashID("cr", firstSource, g.provider)}
			batches[g.provider] = b
			provOrder = append(provOrder, g.provider)
		}
		b.Charges = append(b.Charges, rc)
	}

	if len(toRate) > 0 {
		tierRows := make(map[postgres.MonthKey]int64, len(monthKeys))
		for _, k := range monthKeys {
			tierRows[k] = used[k.RenterID][k.Month]
		}
		if err := postgres.SaveTierUsage(ctx, tx, tierRows); err != nil {
			return err
		}
		if err := postgres.SaveLeaseTotals(ctx, tx, leases, now); err != nil {
			return err
		}
		if err := postgres.InsertCharges(ctx, tx, charges, now); err != nil {
			return err
		}
	}
	if err := postgres.AddPending(ctx, tx, pending, now); err != nil {
		return err
	}
	msgs := make([]outbox.Message, 0, len(provOrder))
	for _, p := range provOrder {
		b := batches[p]
		payload, err := proto.Marshal(b)
		if err != nil {
			return err
		}
		msgs = append(msgs, outbox.Message{ID: b.BatchId, Subject: "charges.rated." + p, Payload: payload})
	}
	return outbox.Add(ctx, tx, postgres.Schema, msgs...)
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

// Str renders a decimal without trailing zeros.
func Str(d decimal.Decimal) string {
	s := d.String()
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
