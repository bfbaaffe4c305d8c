package app

import (
	"context"
	"errors"
	"testing"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// A quote's provider PUE is bounded as metering bounds a provider's
// (ParseProvider: 1 to 10): a quote at a PUE of 11 or 1e64 was priced
// with a surcharge no provider on record can carry. Above 10 it is a 400
// naming provider_pue; 10 itself is quoted.
func TestQuoteRefusesAProviderPUEAboveTen(t *testing.T) {
	t.Parallel()
	a, start := quoteApp()
	quote := func(pue string) error {
		_, err := a.Quote(context.Background(), QuoteInput{Currency: "CNY", GPUModel: "RTX_4090", GPUCount: 1, Hours: "1",
			StartTime: &start, ProviderPUE: pue})
		return err
	}
	for _, give := range []string{"10.0001", "11", "1e64"} {
		var inv *apperr.InvalidError
		err := quote(give)
		if !errors.As(err, &inv) || len(inv.Violations) != 1 || inv.Violations[0].Field != "provider_pue" {
			t.Errorf("quote at provider_pue %q: %v; want a 400 naming provider_pue", give, err)
		}
	}
	for _, give := range []string{"1", "1.6", "10"} {
		if err := quote(give); err != nil {
			t.Errorf("quote at provider_pue %q: %v; want it quoted", give, err)
		}
	}
}
