package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
)

// TestUnparseableChargeIsDeadLettered: a charges.rated message holding a
// charge the ledger cannot parse is kept whole in ledger.dead_letters (none
// of its charges posted, so a replay after a fix posts them all once), an
// undecodable one too, and the charges published after them are posted.
// Before, the ledger claimed such a message and dropped the charge.
func TestUnparseableChargeIsDeadLettered(t *testing.T) {
	t.Parallel()
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- f.svc.Run(ctx) }()
	const cyc = "cyc-20261112"
	publish := func(msgID string, payload []byte) {
		m := nats.NewMsg("charges.rated.p-1")
		m.Data = payload
		m.Header.Set(jetstream.MsgIDHeader, msgID)
		if _, err := js.JS.PublishMsg(f.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(id string, cs ...*eventsv1.RatedCharge) []byte {
		b, err := proto.Marshal(&eventsv1.ChargesRatedBatch{BatchId: id, Charges: cs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	publish("b-bad", batch("b-bad", charge("c-1", "r-1", "p-1", cyc, "1.00"), charge("c-2", "r-1", "p-1", cyc, "1,5")))
	publish("b-garbage", []byte{0xff, 0xff, 0xff})
	publish("b-good", batch("b-good", charge("c-3", "r-1", "p-1", cyc, "0.75")))
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.count(t, `select count(*) from ledger.dead_letters`) == 2
	}, "both poisoned messages dead-lettered")
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.balance(t, "provider:p-1:pending:"+cyc, "USD").Equal(dec("0.75"))
	}, "the good charge behind them posted")
	var subject, errText string
	var attempts int
	var payload []byte
	if err := f.pool.QueryRow(f.ctx, `select subject, attempts, payload, error from ledger.dead_letters
		where consumer = 'ledger-charges' and message_id = 'b-bad'`).Scan(&subject, &attempts, &payload, &errText); err != nil {
		t.Fatal(err)
	}
	if subject != "charges.rated.p-1" || attempts != 1 || string(payload) != string(batch("b-bad", charge("c-1", "r-1", "p-1", cyc, "1.00"), charge("c-2", "r-1", "p-1", cyc, "1,5"))) || !strings.Contains(errText, `"c-2"`) {
		t.Errorf("dead letter b-bad: subject %q, attempts %d, error %q", subject, attempts, errText)
	}
	// Not claimed: a replay after a fix would still apply it.
	if n := f.count(t, `select count(*) from ledger.inbox where message_id in ('b-bad', 'b-garbage')`); n != 0 {
		t.Errorf("%d dead letters claimed in the inbox, want 0", n)
	}
	if n := f.count(t, `select count(*) from ledger.transactions where kind = 'charge'`); n != 1 {
		t.Errorf("%d charge transactions, want 1 (c-3 only; c-1 waits with its message)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
