package ports

import (
	"maps"
	"slices"
	"testing"

	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
)

// Only credits to provider:{id}:available wake a provider's payouts.
func TestCreditedProviders(t *testing.T) {
	b := &eventsv1.LedgerPostedBatch{Transactions: []*eventsv1.LedgerPosted{
		{Postings: []*eventsv1.Posting{
			{Account: "renter:r1:wallet", Direction: "debit"},
			{Account: "provider:p1:available", Direction: "credit"},
		}},
		{Postings: []*eventsv1.Posting{
			{Account: "provider:p2:available", Direction: "debit"},   // a payout or a reversal: no wake
			{Account: "provider:p3:in_transit", Direction: "credit"}, // not available
			{Account: "provider:p4:pending:cyc-20260101", Direction: "credit"},
			{Account: "provider::available", Direction: "credit"},
			{Account: "provider:p5:available", Direction: "credit"},
		}},
	}}
	got := slices.Sorted(maps.Keys(creditedProviders(b)))
	if !slices.Equal(got, []string{"p1", "p5"}) {
		t.Errorf("credited providers %v, want [p1 p5]", got)
	}
}
