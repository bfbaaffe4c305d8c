package ledger_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// publishRenter publishes party.updated for a renter's version, under
// metering's message id (party-renter-{id}-v{version}) when id is "".
func publishRenter(t *testing.T, js *testkit.JetStream, id string, ev *eventsv1.PartyUpdated) {
	t.Helper()
	ev.Kind = "renter"
	if ev.UpdatedAt == nil {
		ev.UpdatedAt = timestamppb.Now()
	}
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("party.updated." + ev.PartyId)
	m.Data = b
	if id == "" {
		id = fmt.Sprintf("party-renter-%s-v%d", ev.PartyId, ev.Version)
	}
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := js.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// A renter's credit limit lowered, or the renter closed, asks to stop its
// GPUs as the update reaches the ledger. Renter r-1 had a credit limit of
// 500 and left with 200 in its wallet; finance refunded the 200 by a
// manual entry: with the wallet at 0, lease control still saw 500 to spend
// and asked no stop, and nothing could tell it the renter had left (no
// status reached it), so up to 500 more was charged to an empty wallet.
func TestLeaseControlStopsALoweredLimitAndAClosedRenter(t *testing.T) {
	t.Parallel()
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	f.runService(t)
	state := func(renter string) string {
		s := f.texts(t, `select state from ledger.lease_control where renter_id = $1 and currency = 'CNY'`, renter)
		if len(s) == 0 {
			return ""
		}
		return s[0]
	}
	stops := func(renter string) int { // each stop is one crossing
		return f.count(t, `select coalesce(sum(crossings), 0)::int from ledger.lease_control where renter_id = $1`, renter)
	}
	refunds := map[string]string{}
	for _, r := range []string{"r-lim", "r-cls"} {
		publishRenter(t, js, "", &eventsv1.PartyUpdated{PartyId: r, Currency: "CNY", CreditLimit: "500", Version: 1})
		testkit.Eventually(t, 20*time.Second, func() bool {
			return f.count(t, `select count(*) from ledger.renters where renter_id = $1`, r) == 1
		}, r+"'s limit of 500 known")
		f.deposit(t, r, "200.00", "CNY", "top-up-"+r)
		refund, err := f.app.CreateTransaction(f.ctx, transfer("refund-"+r, "renter:"+r+":wallet", "bank:client", "200.00", "CNY"))
		if err != nil {
			t.Fatal(err)
		}
		refunds[r] = refund.ID
		testkit.Eventually(t, 20*time.Second, func() bool {
			return f.count(t, `select count(*) from ledger.inbox where consumer = 'ledger-lease-control'`) >= 2 && state(r) == "ok"
		}, r+" refunded to 0, still ok with 500 of credit")
	}

	publishRenter(t, js, "", &eventsv1.PartyUpdated{PartyId: "r-lim", Currency: "CNY", CreditLimit: "0", Version: 2})
	testkit.Eventually(t, 20*time.Second, func() bool { return state("r-lim") == "stopped" },
		"r-lim stopped once its credit limit was lowered to 0 with 0 in its wallet")

	closedAt := timestamppb.New(time.Now().Add(-time.Minute))
	publishRenter(t, js, "", &eventsv1.PartyUpdated{PartyId: "r-cls", Currency: "CNY", CreditLimit: "500", Version: 2, Status: "closed", ClosedAt: closedAt})
	testkit.Eventually(t, 20*time.Second, func() bool { return state("r-cls") == "stopped" },
		"r-cls stopped once closed, with 500 of credit left")

	// A closed renter stays stopped: money again does not resume it, nor
	// does the sweep, nor an older version redelivered under a new id.
	evaluated := func() int {
		return f.count(t, `select count(*) from ledger.inbox where consumer = 'ledger-lease-control'`)
	}
	before := evaluated()
	// A closed renter takes no deposit (TestDepositToAClosedRenterRefused)
	// nor a finance entry's credit (TestFinanceEntryCreditingAClosedRenterRefused);
	// a reversal still credits it (its refund returned by the bank), money
	// all the same.
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: refunds["r-cls"], IdempotencyKey: "late-credit-r-cls", Description: "refund returned by the bank"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return evaluated() > before }, "the credit evaluated")
	publishRenter(t, js, "old-copy-of-r-cls-v1", &eventsv1.PartyUpdated{PartyId: "r-cls", Currency: "CNY", CreditLimit: "500", Version: 1, UpdatedAt: timestamppb.Now()})
	testkit.Eventually(t, 20*time.Second, func() bool {
		return f.count(t, `select count(*) from ledger.inbox where consumer = 'ledger-renters'`) >= 5
	}, "v1 of r-cls redelivered")
	lc := &app.LeaseControl{Clock: clock.System{}, Log: slog.New(slog.DiscardHandler),
		Wallets: &postgres.Wallets{Pool: f.pool}, Store: postgres.LeaseStore{Pool: f.pool}}
	if err := lc.Sweep(f.ctx); err != nil {
		t.Fatal(err)
	}
	if s, n := state("r-cls"), stops("r-cls"); s != "stopped" || n != 1 {
		t.Fatalf("closed r-cls after a top-up and a sweep: %q with %d stop events; want stopped, 1", s, n)
	}
}
