package settlement

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
)

// party.updated (metering's announcement of a provider) reaches settlement's
// tier read model, newest version wins, renters are ignored; and the close
// charges commission at the tier it brought (partner, 15 %), not the
// standard tier a provider without a record gets.
func TestPartyUpdatedSetsTheTierSettlementUses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	js := testkit.NewJetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	if err := natsx.EnsureStreams(ctx, js.JS, natsx.StreamParty); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	f.s.d.JS, f.s.d.Log = js.JS, discardLog()
	go func() { done <- f.s.consumeParties(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	})
	for _, ev := range []*eventsv1.PartyUpdated{
		{PartyId: "p-00001", Kind: "provider", Tier: "partner", Version: 2},
		{PartyId: "p-00001", Kind: "provider", Tier: "pro", Version: 1}, // older, arriving late
		{PartyId: "r-00001", Kind: "renter", Tier: "pro", Version: 1},
	} {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("party.updated." + ev.PartyId)
		m.Data = b
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("party-%s-v%d", ev.PartyId, ev.Version))
		if _, err := js.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		cons, err := js.JS.Consumer(ctx, natsx.StreamParty, ports.PartyConsumerName)
		if err != nil {
			return false
		}
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.AckFloor.Stream == 3
	}, "party consumer drained")
	var tier string
	if err := f.s.d.Pool.QueryRow(ctx, `select tier from settlement.providers where provider_id = 'p-00001'`).Scan(&tier); err != nil || tier != "partner" {
		t.Fatalf("p-00001's tier in settlement's read model: %q, %v; want partner (version 2)", tier, err)
	}
	if n := f.count(t, `select count(*) from settlement.providers where provider_id = 'r-00001'`); n != 0 {
		t.Fatalf("a renter's party.updated entered the provider tiers")
	}

	f.ledger.Charge("p-00001", cycle1.ID, "CNY", "1033.33")
	runCycle(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, CloseNow: true}, nil)
	wc, wt, wn := wantSplit(t, dec("1033.33"), "partner")
	var gotTier string
	var c, tx, n decimal.Decimal
	if err := f.s.d.Pool.QueryRow(ctx, `select tier, commission, tax_withheld, net from settlement.settlements
		where cycle_id = $1 and provider_id = 'p-00001' and status = 'settled'`, cycle1.ID).Scan(&gotTier, &c, &tx, &n); err != nil {
		t.Fatal(err)
	}
	if gotTier != "partner" || !c.Equal(wc) || !tx.Equal(wt) || !n.Equal(wn) {
		t.Fatalf("p-00001 settled as %s %s / %s / %s, want partner %s / %s / %s", gotTier, c, tx, n, wc, wt, wn)
	}
}
