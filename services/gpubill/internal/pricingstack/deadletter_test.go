package pricingstack_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/testkit"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
)

// TestUndecodableUsageIsDeadLettered: a usage.recorded message pricing cannot
// decode goes to pricing.dead_letters at its first delivery (not claimed, so
// a replay after a fix still rates it), and the usage behind it is rated.
func TestUndecodableUsageIsDeadLettered(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.parties(t, 1, 1, "CNY")
	s.card(t, "CNY", "0.01")
	m := nats.NewMsg("usage.recorded.p-000")
	m.Data = []byte{0x0a, 0xff, 0xff, 0xff} // a length past the end
	m.Header.Set(jetstream.MsgIDHeader, "ub-garbage")
	if _, err := s.js.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	run(t, s.metering)
	run(t, s.pricing)
	if acc, _ := s.ingest(t, []*meteringv1.UsageEventInput{usage("e-1", "l-1", "p-000", "r-000", now.Add(-2*time.Hour), time.Hour)}, 1); acc != 1 {
		t.Fatalf("accepted %d", acc)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return s.ratedEvents(t) == 1 }, "the good usage rated")
	var consumer, subject string
	var attempts, claimed int
	testkit.Eventually(t, 5*time.Second, func() bool {
		return s.deps.Pool.QueryRow(context.Background(), `select consumer, subject, attempts,
			(select count(*) from pricing.inbox where message_id = 'ub-garbage')
			from pricing.dead_letters where message_id = 'ub-garbage'`).Scan(&consumer, &subject, &attempts, &claimed) == nil
	}, "ub-garbage dead-lettered")
	if consumer != "pricing-rating" || subject != "usage.recorded.p-000" || attempts != 1 || claimed != 0 {
		t.Errorf("dead letter: consumer %q subject %q attempts %d, claimed %d times", consumer, subject, attempts, claimed)
	}
}
