package app

import (
	"context"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// quoteHoursMax bounds a quote's duration (a month of GPU time).
const quoteHoursMax = 24 * 31

// quoteEventMax is the longest usage event metering records (its
// EventDurationMax): usage of a quote's length reaches rating as events of
// at most this, each priced by a card only within domain.EventAmountMax
// (priceable). A quote's month at the most a card within today's bounds
// charges is above EventAmountMax, and its usage is charged.
const quoteEventMax = 24 * time.Hour

// QuoteInput asks what some GPU time would cost and earn.
type QuoteInput struct {
	Currency, GPUModel, Region string
	GPUCount                   int32
	Hours                      string
	StartTime                  *time.Time
	ProviderTier               string // "" = the named provider's on record (quotedRate), else standard
	TaxProfile                 string // "" = the tax service's: the named provider's, else individual
	ProviderPUE                string
	Jurisdiction               string // the provider's; "" = the tax service's: the named provider's, else its default
	ProviderID                 string // optional: its own tier, tax profile, jurisdiction and rule set selection apply
}

// QuoteLine is one priced part of a quote, by the rate card named.
type QuoteLine struct {
	Kind, Band, RateCardID                  string
	GPUHours, UnitPrice, Multiplier, Amount string
}

// QuoteResult is the price and its split, formatted in the currency.
// RateCardID is the card in force at the start; each line names its own.
type QuoteResult struct {
	Currency, RateCardID                    string
	Lines                                   []QuoteLine
	RenterPrice, Commission, CommissionRate string
	TaxWithheld, ProviderNet                string
	// The versions the quote used: the commission configuration (the one
	// settlement is configured with) and the tax service's withholding rule.
	CommissionConfigVersion, TaxRuleSet, TaxRuleVersion string
	// What the split was made for: the tier whose rate it took and where
	// that came from (Source*), the tax profile and jurisdiction the tax
	// service withheld by and where those came from (SourceRecord or
	// SourceRequest).
	ProviderTier, ProviderTierSource string
	TaxProfile, Jurisdiction         string
	TaxProfileSource                 string
}

// Where a quote's tier, tax profile and jurisdiction come from.
const (
	SourceRecord  = "record"  // the named provider's on record
	SourceRequest = "request" // as the request gave them
	SourceDefault = "default" // none given, or a provider not on record: standard, as its settlement takes
)

// quoteRequest is a validated QuoteInput.
type quoteRequest struct {
	cur     money.Currency
	usage   domain.Usage
	rate    decimal.Decimal // commission rate of the request's tier (quotedRate: the provider's)
	tier    string          // the request's tier, standard when none is given
	profile string          // "": the tax service's
	juris   string          // "": the tax service's
}

// Quote is the earnings calculator: it prices the usage with the same code
// as real charges (bands, tiers from an empty month, PUE when given), each
// part by the card in force there: the usage is cut at each later card's
// effective_from (domain.Book.Spans), each part priced by its card, each
// line naming it. A 48-hour quote priced wholly by the card in force at its
// start answered 134.40 where its usage was charged 229.60 once a dearer
// card took over after 14 hours. What still differs from real charges:
// rating prices each recorded event whole by the card in force at the
// event's start, so an event crossing an effective_from is charged by the
// earlier card to its end (the quote cuts it there); real tiers start from
// the renter's month so far, not empty; and a lease's charges round against
// its exact total so far, the quote's once on its own.
// It splits the rounded renter price as settlement would: the commission rate
// of the tier (a provider named: its own on record, quotedRate) from the
// commission configuration settlement applies
// (a.Commission, GPUBILL_COMMISSION_RATES), the tax by the withholding rule
// the tax service has in force for the jurisdiction at the end of the
// usage's cycle (a.Splits). The answer names the versions it used.
func (a *App) Quote(ctx context.Context, in QuoteInput) (QuoteResult, error) {
	if a.Splits == nil {
		return QuoteResult{}, fmt.Errorf("quotes: no tax service to split with: %w", apperr.ErrUnavailable)
	}
	model, err := a.quotedModel(ctx, in.GPUModel)
	if err != nil {
		return QuoteResult{}, err
	}
	in.GPUModel = model
	q, err := checkQuote(in, a.commission())
	if err != nil {
		return QuoteResult{}, err
	}
	tier, tierSource := q.tier, SourceRequest
	if in.ProviderTier == "" {
		tierSource = SourceDefault
	}
	if q.rate, tier, tierSource, err = a.quotedRate(ctx, in, q.rate, tier, tierSource); err != nil {
		return QuoteResult{}, err
	}
	book, err := a.Book(ctx)
	if err != nil {
		return QuoteResult{}, err
	}
	spans, ok := book.Spans(q.cur.Code, q.usage.Start, q.usage.End)
	if !ok {
		return QuoteResult{}, fmt.Errorf("no rate card in %s effective at %s: %w", q.cur.Code, q.usage.Start.Format(time.RFC3339), apperr.ErrPrecondition)
	}
	for _, s := range spans {
		if err := quotable(s, q.usage); err != nil {
			return QuoteResult{}, err
		}
	}
	out := QuoteResult{Currency: q.cur.Code, RateCardID: spans[0].Card.ID}
	// The month's volume accrues across the cards, as rating's does
	// whichever card prices each event.
	used := domain.MonthUsage{}
	total := decimal.Zero
	for _, s := range spans {
		u := q.usage
		u.Start, u.End = s.Start, s.End
		ps, err := priceQuote(s.Card, u, used, &out)
		if err != nil {
			return QuoteResult{}, err
		}
		total = total.Add(ps)
	}
	var lt domain.LeaseTotal
	gross := lt.Add(q.cur, total)
	sq, err := a.Splits.QuoteSplit(ctx, SplitRequest{Currency: q.cur.Code, Gross: gross, CommissionRate: q.rate,
		TaxProfile: q.profile, Jurisdiction: q.juris, UsageEnd: q.usage.End, ProviderID: in.ProviderID})
	if err != nil {
		return QuoteResult{}, fmt.Errorf("quote split: %w", err)
	}
	if !sq.Commission.Add(sq.Tax).Add(sq.Net).Equal(gross) {
		return QuoteResult{}, fmt.Errorf("quote split %s + %s + %s does not make %s", sq.Commission, sq.Tax, sq.Net, gross)
	}
	out.RenterPrice, out.Commission, out.CommissionRate = q.cur.Format(gross), q.cur.Format(sq.Commission), domain.Str(q.rate)
	out.TaxWithheld, out.ProviderNet = q.cur.Format(sq.Tax), q.cur.Format(sq.Net)
	out.CommissionConfigVersion, out.TaxRuleSet, out.TaxRuleVersion = a.commission().Version(), sq.RuleSet, sq.RuleVersion
	out.ProviderTier, out.ProviderTierSource = tier, tierSource
	out.TaxProfile, out.Jurisdiction, out.TaxProfileSource = sq.TaxProfile, sq.Jurisdiction, SourceRequest
	if sq.OnRecord {
		out.TaxProfileSource = SourceRecord
	}
	return out, nil
}

// quotedRate is the commission rate a quote splits by, its tier and where
// that came from: that of the named provider's tier on record (a.Tiers,
// read model of party.updated), which its settlement splits by
// (settlement's own read model of the same events), else rate, the
// request's tier's (standard when none is given: tier and source as
// given). Taken from the request, a partner quoted without a tier was
// quoted 25 % of commission where its statement took 15 %. A quote naming a
// provider cannot choose another tier than its record: one given otherwise
// is a 400 naming provider_tier (omit it, or correct the provider), never a
// split its settlement would not make. A provider pricing has not heard of
// (a new one, or its party.updated behind) is split at standard, as its
// settlement snapshots one no party.updated has given a tier (settlement's
// SnapshotBalances): quoted at the request's tier, a partner's 15 % was
// answered where its statement took 25 %. Such a quote asking for another
// tier is refused (the provider's record decides, and pricing has none).
func (a *App) quotedRate(ctx context.Context, in QuoteInput, rate decimal.Decimal, tier, source string) (decimal.Decimal, string, string, error) {
	if in.ProviderID == "" || a.Tiers == nil {
		return rate, tier, source, nil
	}
	recorded, ok, err := a.Tiers.Tier(ctx, in.ProviderID)
	if err != nil {
		return decimal.Decimal{}, "", "", fmt.Errorf("quote: %w", err)
	}
	if !ok {
		if tier != split.TierStandard {
			return decimal.Decimal{}, "", "", fmt.Errorf("provider_tier: provider %s is not on record in pricing yet (no party.updated "+
				"received), and its settlement splits a provider without a tier at %s: omit provider_tier, or quote %s without provider_id: %w",
				in.ProviderID, split.TierStandard, tier, apperr.ErrPrecondition)
		}
		return rate, split.TierStandard, SourceDefault, nil
	}
	if in.ProviderTier != "" && in.ProviderTier != recorded {
		return decimal.Decimal{}, "", "", apperr.Invalid("provider_tier",
			"provider %s is recorded as %s: omit provider_tier to quote by the provider's record", in.ProviderID, recorded)
	}
	// Metering records only tiers the configuration rates; one it lacks
	// is the provider's (or the configuration's) to correct, as its
	// settlement refuses the split: not a 400 on a field the quote left out.
	r, err := a.commission().Rate(recorded)
	if err != nil {
		return decimal.Decimal{}, "", "", fmt.Errorf("provider %s: %v; correct the provider's tier: %w", in.ProviderID, err, apperr.ErrPrecondition)
	}
	return r, recorded, SourceRecord, nil
}

// quotable checks that the card of a span of the quote prices its usage,
// as rating checks an event's card (priceable).
func quotable(s domain.Span, u domain.Usage) error {
	card, at := s.Card, s.Start.Format(time.RFC3339)
	if card.Unreadable != "" {
		return fmt.Errorf("rate card %s in force at %s cannot be read: %w", card.ID, at, apperr.ErrPrecondition)
	}
	if _, ok := card.Price(u.Model, u.Region); !ok {
		return apperr.Invalid("gpu_model", "rate card %s in force at %s has no price for %s", card.ID, at, u.Model)
	}
	// As rating does (priceable): a card stored before today's price bounds
	// may charge an event more than EventAmountMax, and its usage waits. Its
	// quote's gross (an hourly "1e20": 10^20) went to the tax service, and
	// the client got tax's 400 on a gross it never sent.
	if event := min(s.End.Sub(s.Start), quoteEventMax); !card.WithinEventMax(u.Model, u.Region, u.GPUCount, event) {
		return fmt.Errorf("rate card %s in force at %s may charge this usage (%d × %s for %s) more than %s %s, the most one event "+
			"is charged: usage it would price waits for a card that replaces it: %w", card.ID, at,
			u.GPUCount, u.Model, event, domain.EventAmountMax, card.Currency.Code, apperr.ErrPrecondition)
	}
	return nil
}

// quotedModel is name as usage records it: its catalogue id (an alias or
// another case of it resolved, as metering does for usage); a name the
// catalogue lacks is left for the card's lookup to refuse. A quote for
// "RTX 4090" was a 400 while usage naming it was charged.
func (a *App) quotedModel(ctx context.Context, name string) (string, error) {
	if a.Catalogue == nil || name == "" {
		return name, nil
	}
	ix, err := a.Catalogue.Index(ctx)
	if err != nil {
		return "", err
	}
	if id, ok := ix.Resolve(name); ok {
		return id, nil
	}
	return name, nil
}

// checkQuote validates a quote request, naming every bad field.
func checkQuote(in QuoteInput, commission split.CommissionPolicy) (quoteRequest, error) {
	v := &apperr.Validator{}
	cur, err := money.Lookup(in.Currency)
	v.Check(err == nil, "currency", "%q is not a supported currency", in.Currency)
	v.Check(in.GPUModel != "", "gpu_model", "required")
	v.Check(in.GPUCount >= 1 && in.GPUCount <= 64, "gpu_count", "%d outside 1..64", in.GPUCount)
	hours, herr := money.ParseDecimal(in.Hours)
	inRange := herr == nil && hours.IsPositive() && hours.LessThanOrEqual(decimal.NewFromInt(quoteHoursMax))
	v.Check(inRange, "hours", "%q is not a decimal in (0, %d]", in.Hours, quoteHoursMax)
	// Usage is timed to the microsecond: hours under half of one were an
	// empty usage interval, answered 500.
	v.Check(!inRange || quoteMicros(hours) >= 1, "hours", "%q is under a microsecond of GPU time", in.Hours)
	v.Check(in.StartTime != nil, "start_time", "required")
	tier := in.ProviderTier
	if tier == "" {
		tier = split.TierStandard
	}
	rate, rerr := commission.Rate(tier)
	v.Check(rerr == nil, "provider_tier", "%q is not one of standard, pro, partner", in.ProviderTier)
	// No profile is the tax service's to fill: the named provider's on
	// record, else individual. Filled in here as individual, an enterprise
	// was quoted an individual's tax its settlement never withheld.
	profile := in.TaxProfile
	v.Check(profile == "" || profile == split.ProfileIndividual || profile == split.ProfileEnterprise, "tax_profile",
		"%q is not one of individual, enterprise", in.TaxProfile)
	var pue *decimal.Decimal
	if in.ProviderPUE != "" {
		d, err := money.ParseDecimal(in.ProviderPUE)
		// Bounded as metering bounds a provider's PUE (ParseProvider: 1 to
		// 10): no provider on record carries one outside.
		v.Check(err == nil && d.GreaterThanOrEqual(pueMin) && d.LessThanOrEqual(pueMax), "provider_pue",
			"%q is not a decimal from 1 to 10 (a PUE is total facility power over IT power)", in.ProviderPUE)
		pue = &d
	}
	if in.ProviderID != "" {
		if err := ids.CheckPartyID(in.ProviderID); err != nil {
			v.Add("provider_id", "%v", err)
		}
	}
	if err := v.Err(); err != nil {
		return quoteRequest{}, err
	}
	start := *in.StartTime
	micros := quoteMicros(hours)
	u := domain.Usage{Model: in.GPUModel, Region: in.Region, GPUCount: in.GPUCount, Start: start,
		End: start.Add(time.Duration(micros) * time.Microsecond), PUE: pue}
	return quoteRequest{cur: cur, usage: u, rate: rate, tier: tier, profile: profile, juris: in.Jurisdiction}, nil
}

// The range of a quote's provider PUE: metering's (its ParseProvider).
var (
	pueMin = decimal.NewFromInt(1)
	pueMax = decimal.NewFromInt(10)
)

// quoteMicros is hours in whole microseconds, as usage is timed.
func quoteMicros(hours decimal.Decimal) int64 {
	return hours.Mul(decimal.NewFromInt(int64(time.Hour / time.Microsecond))).Round(0).IntPart()
}

// priceQuote rates the usage by card, its tier volume from used (advanced),
// adds its lines to out and returns its total in price-seconds.
func priceQuote(card *domain.Card, u domain.Usage, used domain.MonthUsage, out *QuoteResult) (decimal.Decimal, error) {
	pieces, err := card.Rate(u, used, nil)
	if err != nil {
		return decimal.Zero, err
	}
	total := decimal.Zero
	for _, p := range pieces {
		unit, mult := card.Factors(p, u.Model, u.Region)
		ps := domain.PriceSeconds(p.GPUMicros, unit, mult)
		total = total.Add(ps)
		out.Lines = append(out.Lines, QuoteLine{Kind: p.Kind, Band: card.BandName(p), RateCardID: card.ID,
			GPUHours: domain.Str(domain.GPUHours(p.GPUMicros)), UnitPrice: domain.Str(unit), Multiplier: domain.Str(mult),
			Amount: domain.Str(domain.Amount(ps))})
	}
	return total, nil
}

// commission is the commission configuration quotes use: the one settlement
// is configured with (svc.Deps.Commission), the default when unset.
func (a *App) commission() split.CommissionPolicy {
	if a.Commission.Rates == nil {
		return split.DefaultCommission()
	}
	return a.Commission
}
