// Package domain holds metering's pure types and rules: parties and usage
// events, their validation. No pgx, NATS or protobuf here.
package domain

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
)

// Party kinds as published in party.updated.
const (
	KindProvider = "provider"
	KindRenter   = "renter"
)

// DefaultCurrency is a provider's settlement currency when none is given.
const DefaultCurrency = "USD"

const nameLenMax = 200

var (
	tiers       = []string{"standard", "pro", "partner"}
	taxProfiles = []string{"individual", "enterprise"}
	pueMin      = decimal.NewFromInt(1)
	// pueMax bounds a PUE: real data centres are near 1.1 to 3. Unbounded,
	// "1e64" was taken and published on every usage event as its 65
	// digits, which pricing's parse refuses (over 64 characters).
	pueMax = decimal.NewFromInt(10)
)

// Violation names one bad field.
type Violation struct {
	Field  string
	Reason string
}

// Provider is a GPU provider as metering records it.
type Provider struct {
	ID           string
	Name         string
	Tier         string
	TaxProfile   string
	Jurisdiction string
	PUE          *decimal.Decimal // nil when unknown
	Currency     string
	Version      int64
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Renter statuses: a closed renter is final (never reopened).
const (
	RenterActive = "active"
	RenterClosed = "closed"
)

// Renter is a renter with a prepaid wallet.
type Renter struct {
	ID          string
	Name        string
	Currency    string
	CreditLimit decimal.Decimal
	Status      string    // RenterActive or RenterClosed
	ClosedAt    time.Time // zero unless closed
	Version     int64
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Closed reports whether the renter was closed.
func (r Renter) Closed() bool { return r.Status == RenterClosed }

// RefusesUsage returns why the renter takes no usage starting at start
// ("" when it does): usage of a closed renter that starts at or after its
// close is refused; usage that started before still posts (a late report
// of GPU time it did use).
func (r Renter) RefusesUsage(start time.Time) string {
	if !r.Closed() || start.Before(r.ClosedAt) {
		return ""
	}
	return fmt.Sprintf("renter %q closed at %s: usage starting at or after its close is not taken",
		r.ID, r.ClosedAt.UTC().Format(time.RFC3339Nano))
}

// CheckRenterStatus refuses a status no renter can have.
func CheckRenterStatus(status string) error {
	if status != RenterActive && status != RenterClosed {
		return fmt.Errorf("%q is not one of active, closed", status)
	}
	return nil
}

// SameBody reports whether two providers carry the same client-given fields
// (a create replay with the same body is idempotent).
func (p Provider) SameBody(o Provider) bool {
	return p.ID == o.ID && p.Name == o.Name && p.Tier == o.Tier && p.TaxProfile == o.TaxProfile &&
		p.Jurisdiction == o.Jurisdiction && p.Currency == o.Currency && PUEString(p.PUE) == PUEString(o.PUE)
}

// SameBody reports whether two renters carry the same client-given fields
// of a create (not the status, which only an update sets).
func (r Renter) SameBody(o Renter) bool {
	return r.ID == o.ID && r.Name == o.Name && r.Currency == o.Currency && r.CreditLimit.Equal(o.CreditLimit)
}

// PUEString renders a PUE, "" when unknown.
func PUEString(p *decimal.Decimal) string {
	if p == nil {
		return ""
	}
	return p.String()
}

// ProviderInput is the raw, client-given provider.
type ProviderInput struct {
	ID, Name, Tier, TaxProfile, Jurisdiction, PUE, Currency string
}

// RenterInput is the raw, client-given renter.
type RenterInput struct {
	ID, Name, Currency, CreditLimit string
}

// ParseProvider validates a provider input.
func ParseProvider(in ProviderInput) (Provider, []Violation) {
	var vs []Violation
	add := func(f, format string, args ...any) { vs = append(vs, Violation{f, fmt.Sprintf(format, args...)}) }
	p := Provider{
		ID: strings.TrimSpace(in.ID), Name: strings.TrimSpace(in.Name), Tier: in.Tier,
		TaxProfile: in.TaxProfile, Jurisdiction: strings.TrimSpace(in.Jurisdiction),
	}
	if err := ids.CheckPartyID(p.ID); err != nil {
		add("provider_id", "%s", err)
	}
	if len(p.Name) > nameLenMax {
		add("name", "longer than %d characters", nameLenMax)
	}
	if !contains(tiers, p.Tier) {
		add("tier", "%q is not one of standard, pro, partner", in.Tier)
	}
	if !contains(taxProfiles, p.TaxProfile) {
		add("tax_profile", "%q is not one of individual, enterprise", in.TaxProfile)
	}
	if err := ids.CheckJurisdiction(p.Jurisdiction); err != nil {
		add("jurisdiction", "%s", err)
	}
	if s := strings.TrimSpace(in.PUE); s != "" {
		d, err := money.ParseDecimal(s)
		switch {
		case err != nil:
			add("pue", "%q is not a decimal number", in.PUE)
		case d.LessThan(pueMin):
			add("pue", "%s is below 1 (a PUE is total facility power over IT power)", s)
		case d.GreaterThan(pueMax):
			add("pue", "%s is above 10 (a PUE is total facility power over IT power)", s)
		default:
			p.PUE = &d
		}
	}
	cur := in.Currency
	if strings.TrimSpace(cur) == "" {
		cur = DefaultCurrency
	}
	if c, err := money.Lookup(cur); err != nil {
		add("currency", "%q is not a supported currency (%s)", in.Currency, strings.Join(money.Codes(), ", "))
	} else {
		p.Currency = c.Code
	}
	return p, vs
}

// ParseRenter validates a renter input.
func ParseRenter(in RenterInput) (Renter, []Violation) {
	var vs []Violation
	add := func(f, format string, args ...any) { vs = append(vs, Violation{f, fmt.Sprintf(format, args...)}) }
	r := Renter{ID: strings.TrimSpace(in.ID), Name: strings.TrimSpace(in.Name)}
	if err := ids.CheckPartyID(r.ID); err != nil {
		add("renter_id", "%s", err)
	}
	if len(r.Name) > nameLenMax {
		add("name", "longer than %d characters", nameLenMax)
	}
	c, err := money.Lookup(in.Currency)
	if err != nil {
		add("currency", "%q is not a supported currency (%s)", in.Currency, strings.Join(money.Codes(), ", "))
	} else {
		r.Currency = c.Code
	}
	limit := strings.TrimSpace(in.CreditLimit)
	if limit == "" {
		limit = "0"
	}
	// An amount in the renter's currency (its minor units, at most 18
	// digits before the point): "1e64" was taken, published as 65 digits,
	// and the ledger's parse refused it (the party.updated dead-lettered).
	parse := money.ParseDecimal
	if c.Code != "" {
		parse = c.Parse
	}
	switch d, err := parse(limit); {
	case errors.Is(err, money.ErrNotDecimal):
		add("credit_limit", "%q is not a decimal number", in.CreditLimit)
	case err != nil:
		add("credit_limit", "%v", err)
	case d.IsNegative():
		add("credit_limit", "%s is negative (it is how far the wallet may go below zero)", limit)
	default:
		r.CreditLimit = d
	}
	return r, vs
}

// CheckTier refuses a tier no provider can have (a listing filter).
func CheckTier(tier string) error {
	if !contains(tiers, tier) {
		return fmt.Errorf("%q is not one of standard, pro, partner", tier)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
