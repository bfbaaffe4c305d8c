package ledger_test

import (
	"context"
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
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
	"github.com/gpubill/gpubill/services/ledger/internal/ports"
)

// Lease control follows the renter's own currency and credit limit as they
// reach the ledger. A charge evaluated before the renter's credit limit
// arrived stopped a renter within its limit, and the limit's arrival
// changed nothing until the wallet moved again (usage reported at a lease's
// end: never). A wallet in another currency than the renter's (a top-up in
// the wrong currency, reversed) stopped every GPU of a renter whose own
// wallet was full, and nothing resumed them.
func TestLeaseControlFollowsTheRentersCurrencyAndLimit(t *testing.T) {
	t.Parallel()
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	f.runService(t)
	state := func(currency string) string {
		var s string
		if err := f.pool.QueryRow(f.ctx, `select state from ledger.lease_control where renter_id = 'r-9' and currency = $1`, currency).Scan(&s); err != nil {
			return ""
		}
		return s
	}
	if _, err := f.app.CreateTransaction(f.ctx, transfer("use-1", "renter:r-9:wallet", "provider:p-1:pending:cyc-20261112", "5.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return state("CNY") == "stopped" }, "r-9 stopped: its credit limit not known yet")

	ev := &eventsv1.PartyUpdated{PartyId: "r-9", Kind: "renter", Currency: "CNY", CreditLimit: "100.00", Version: 1, UpdatedAt: timestamppb.Now()}
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("party.updated.r-9")
	m.Data = b
	m.Header.Set(jetstream.MsgIDHeader, "party-r-9-v1")
	if _, err := js.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return state("CNY") == "ok" }, "r-9 resumed once its credit limit of 100.00 arrived")

	evaluated := func() int {
		var n int
		if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.inbox where consumer = 'ledger-lease-control'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	dep := f.deposit(t, "r-9", "10.00", "USD", "wrong-currency")
	testkit.Eventually(t, 20*time.Second, func() bool { return state("USD") != "" }, "r-9's USD wallet evaluated")
	before := evaluated()
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return evaluated() > before }, "the reversal evaluated")
	if s := state("USD"); s != "ok" || state("CNY") != "ok" {
		t.Fatalf("after a USD top-up reversed: USD %q, CNY %q; want both ok (r-9 is billed in CNY)", s, state("CNY"))
	}
}

// A stopped renter whose top-up's ledger.posted.renter message never
// reached lease control (the LEDGER stream discarded it, at its cap with
// the consumer behind) is resumed by the sweep of stopped wallets: it
// stayed stopped with money to spend, making no other write.
func TestStoppedSweepResumesATopUpNotAnnounced(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil) // no stream: no message reaches lease control
	lc := &app.LeaseControl{Clock: clock.System{}, Log: slog.New(slog.DiscardHandler),
		Wallets: &postgres.Wallets{Pool: f.pool}, Store: postgres.LeaseStore{Pool: f.pool}}
	state := func() string {
		var s string
		if err := f.pool.QueryRow(f.ctx, `select state from ledger.lease_control where renter_id = 'r-s' and currency = 'CNY'`).Scan(&s); err != nil {
			return ""
		}
		return s
	}
	if _, err := f.app.CreateTransaction(f.ctx, transfer("use-s", "renter:r-s:wallet", "provider:p-1:pending:cyc-20261112", "5.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	wallet := []domain.WalletKey{{RenterID: "r-s", Currency: "CNY"}}
	if err := lc.EvaluateMoved(f.ctx, []app.WalletsMoved{{ID: "m-use", Wallets: wallet}}); err != nil || state() != "stopped" {
		t.Fatalf("after the charge: %q (%v), want stopped", state(), err)
	}
	f.deposit(t, "r-s", "20.00", "CNY", "top-up-s") // its message lost
	if err := lc.Sweep(f.ctx); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != "ok" {
		t.Fatalf("after the sweep: %q, want ok (15.00 to spend)", s)
	}
}

// The sweep finds the stopped wallet that can resume however many stopped
// wallets have nothing to spend: it read the oldest thousand stops, which a
// wallet that stays stopped never leaves, so a renter stopped after a
// thousand abandoned ones, topped up with its message lost, stayed stopped.
func TestStoppedSweepFindsATopUpBehindAThousandStops(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil) // no stream: no message reaches lease control
	lc := &app.LeaseControl{Clock: clock.System{}, Log: slog.New(slog.DiscardHandler),
		Wallets: &postgres.Wallets{Pool: f.pool}, Store: postgres.LeaseStore{Pool: f.pool}}
	if _, err := f.pool.Exec(f.ctx, `insert into ledger.lease_control (renter_id, currency, state, crossings, updated_at)
		select 'old-' || g, 'CNY', 'stopped', 1, now() - interval '1 day' from generate_series(1, 1000) g`); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		var s string
		if err := f.pool.QueryRow(f.ctx, `select state from ledger.lease_control where renter_id = 'r-s' and currency = 'CNY'`).Scan(&s); err != nil {
			return ""
		}
		return s
	}
	if _, err := f.app.CreateTransaction(f.ctx, transfer("use-s", "renter:r-s:wallet", "provider:p-1:pending:cyc-20261112", "5.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	wallet := []domain.WalletKey{{RenterID: "r-s", Currency: "CNY"}}
	if err := lc.EvaluateMoved(f.ctx, []app.WalletsMoved{{ID: "m-use", Wallets: wallet}}); err != nil || state() != "stopped" {
		t.Fatalf("after the charge: %q (%v), want stopped", state(), err)
	}
	f.deposit(t, "r-s", "20.00", "CNY", "top-up-s") // its message lost
	for range 3 {
		if err := lc.Sweep(f.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s := state(); s != "ok" {
		t.Fatalf("after three sweeps: %q, want ok (15.00 to spend)", s)
	}
}

// A charge that takes a wallet past its credit limit stops the renter
// though its ledger.posted.renter message never reached lease control: no
// stop was asked until the wallet's next charge, and usage reported at a
// lease's end makes none while the lease runs.
func TestSweepStopsAWalletChargedPastItsLimitNotAnnounced(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil) // no stream: no message reaches lease control
	lc := &app.LeaseControl{Clock: clock.System{}, Log: slog.New(slog.DiscardHandler),
		Wallets: &postgres.Wallets{Pool: f.pool}, Store: postgres.LeaseStore{Pool: f.pool, Webhooks: true}}
	if _, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "b-o", charge("ch-o", "r-o", "p-1", "", "5.00"))}); err != nil {
		t.Fatal(err)
	}
	if err := lc.Sweep(f.ctx); err != nil {
		t.Fatal(err)
	}
	state := f.texts(t, `select state from ledger.lease_control where renter_id = 'r-o' and currency = 'USD'`)
	stops := f.count(t, `select count(*) from ledger.outbox where subject = 'lease.stop.requested.r-o'`)
	hooks := f.count(t, `select count(*) from ledger.lease_webhooks where renter_id = 'r-o' and kind = 'stop_requested'`)
	if len(state) != 1 || state[0] != "stopped" || stops != 1 || hooks != 1 {
		t.Fatalf("after the sweep: lease control %q, %d stop events, %d stop webhooks; want stopped, 1, 1 (5.00 owed, no credit)", state, stops, hooks)
	}
}
