package ports

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// TestConsumeRentersKeepsTheNewestRenter: party.updated reaches the
// renters' read model through the use case — the newest version wins, a
// provider's event is claimed but kept nowhere, and a negative credit limit
// is dead-lettered, never stored.
func TestConsumeRentersKeepsTheNewestRenter(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	ctx := testkit.Context(t)
	if err := pg.Migrate(ctx, pool, postgres.Schema, migrations.For("ledger")); err != nil {
		t.Fatal(err)
	}
	js := testkit.NewJetStream(t)
	if err := natsx.EnsureStreams(ctx, js.JS, natsx.StreamParty); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- ConsumeRenters(runCtx, js.JS, log, &app.Renters{Store: postgres.RenterStore(pool, nil, false), Consumer: app.RentersConsumer}, deadletter.New(pool, postgres.Schema, log))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	})
	evs := []*eventsv1.PartyUpdated{
		{PartyId: "r-00001", Kind: "renter", Currency: "cny", CreditLimit: "100", Version: 2},
		{PartyId: "r-00001", Kind: "renter", Currency: "CNY", CreditLimit: "50", Version: 1}, // older, arriving late
		{PartyId: "p-00001", Kind: "provider", Version: 1},
		{PartyId: "r-00002", Kind: "renter", Currency: "CNY", CreditLimit: "-5", Version: 1},
	}
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("party.updated." + ev.PartyId)
		m.Data = b
		m.Header.Set(jetstream.MsgIDHeader, "party-"+ev.Kind+"-"+ev.PartyId+"-v"+string(rune('0'+ev.Version)))
		if _, err := js.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		cons, err := js.JS.Consumer(ctx, natsx.StreamParty, RentersConsumer)
		if err != nil {
			return false
		}
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.AckFloor.Stream == uint64(len(evs))
	}, "renters consumer drained")
	var limit, currency string
	var version int64
	if err := pool.QueryRow(ctx, `select credit_limit::text, currency, version from ledger.renters where renter_id = 'r-00001'`).Scan(&limit, &currency, &version); err != nil {
		t.Fatal(err)
	}
	if limit != "100" || currency != "CNY" || version != 2 {
		t.Fatalf("r-00001 = %s %s v%d, want 100 CNY v2", limit, currency, version)
	}
	var others, claimed, dead int
	if err := pool.QueryRow(ctx, `select (select count(*) from ledger.renters where renter_id <> 'r-00001'),
		(select count(*) from ledger.inbox where consumer = $1),
		(select count(*) from ledger.dead_letters where consumer = $1 and message_id = 'party-renter-r-00002-v1')`, RentersConsumer).Scan(&others, &claimed, &dead); err != nil {
		t.Fatal(err)
	}
	if others != 0 || claimed != 3 || dead != 1 {
		t.Fatalf("other renters %d (want 0), ids claimed %d (want 3: both r-00001 versions and the provider's), dead letters %d (want 1)", others, claimed, dead)
	}
}
