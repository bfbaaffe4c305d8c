package app

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// The largest charge a new card can rate is an amount the ledger parses
// (money.Currency.Parse, at most money.AmountIntegerDigitsMax digits before
// the point) in every currency, its exact amount too: chargeEventsMax
// events, each at metering's bounds (64 GPUs, 24 hours), all in a band at
// domain.MultiplierMax over domain.PriceMax, with the PUE surcharge at
// domain.PriceMax. Raising a bound past what this holds would have the
// ledger dead-letter the charge pricing counted billed.
func TestLargestChargeIsAnAmount(t *testing.T) {
	const gpuCountMax, eventDurationMax = 64, 24 * time.Hour // metering's GPUCountMax, EventDurationMax
	micros := int64(chargeEventsMax) * gpuCountMax * eventDurationMax.Microseconds()
	ps := domain.PriceSeconds(micros, domain.PriceMax, domain.MultiplierMax).Add(domain.PriceSeconds(micros, domain.PriceMax, decimal.NewFromInt(1)))
	for _, code := range money.Codes() {
		cur := money.MustLookup(code)
		for _, s := range []string{cur.Format(domain.RoundPS(cur, ps)), money.DecimalString(domain.Amount(ps))} {
			if _, err := money.ParseDecimal(s); err != nil {
				t.Errorf("%s: %q: %v", code, s, err)
			}
		}
		if _, err := cur.Parse(cur.Format(domain.RoundPS(cur, ps))); err != nil {
			t.Errorf("%s: the largest charge: %v", code, err)
		}
	}
}
