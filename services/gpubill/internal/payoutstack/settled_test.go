package payoutstack_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/payout"
)

// A settled statement payout cannot pay as sent — an unknown currency, an
// amount finer than its currency's minor units (stored as 100.005, the
// ledger posted 100.01 and the rail paid or refused it rounded: a fen
// between the payout and its postings) — is dead-lettered at once, naming
// the field; the statements beside it in the batch make their payouts.
func TestSettledStatementPayoutCannotPayIsDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStack(t, payout.Config{})
	publish := func(id, provider, currency, net string) {
		t.Helper()
		b, err := proto.Marshal(&eventsv1.ProviderSettled{ProviderId: provider, CycleId: "cyc-20260101", Currency: currency,
			Gross: net, Commission: "0", TaxWithheld: "0", Net: net, Jurisdiction: "CN"})
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("settlement.settled." + provider)
		m.Data = b
		m.Header.Set(jetstream.MsgIDHeader, id)
		if _, err := st.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	publish("settled-fine", "p-fine", "CNY", "100.005")
	publish("settled-xyz", "p-xyz", "XYZ", "100.00")
	publish("settled-ok", "p-ok", "cny", "100.00")

	st.waitStatus(t, "p-ok", "cyc-20260101", "action_required", waitLong) // no KYC: it waits at the gate
	if ps := st.payouts(t, "p-ok"); len(ps) != 1 || ps[0].Currency != "CNY" || ps[0].Net != "100.00" {
		t.Errorf("p-ok's payouts %v, want one of CNY 100.00", ps)
	}
	got := map[string]string{}
	testkit.Eventually(t, waitLong, func() bool {
		c, err := pgx.Connect(ctx, st.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		rows, err := c.Query(ctx, `select message_id, error from payout.dead_letters where consumer = 'payout-settled'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, e string
			if err := rows.Scan(&id, &e); err != nil {
				t.Fatal(err)
			}
			got[id] = e
		}
		return len(got) >= 2
	}, "two settled statements dead-lettered")
	for id, want := range map[string]string{"settled-fine": `gross "100.005": amount 100.005 has more than 2 decimal places`, "settled-xyz": `"XYZ"`} {
		if !strings.Contains(got[id], want) {
			t.Errorf("dead letter %s: %q, want it to name %s", id, got[id], want)
		}
	}
	if _, ok := got["settled-ok"]; ok || len(got) != 2 {
		t.Errorf("dead letters %v, want settled-fine and settled-xyz only", got)
	}
	for _, p := range []string{"p-fine", "p-xyz"} {
		if ps := st.payouts(t, p); len(ps) != 0 {
			t.Errorf("%s: payouts %v made from a statement payout cannot pay", p, ps)
		}
	}
}
