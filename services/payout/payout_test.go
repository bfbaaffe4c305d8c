package payout

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/ports"
)

func as(role, sub string) context.Context {
	return auth.WithPrincipal(context.Background(), auth.Principal{Role: role, Subject: sub})
}

// settlement.settled.* becomes one payout per provider, cycle and currency:
// created when KYC is verified and a method is set and the net reaches the
// minimum; action_required with the reason otherwise. Redelivery changes nothing.
func TestSettledCreatesPayouts(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewPool(t)
	js := testkit.NewJetStream(t)
	s, err := New(context.Background(), svc.Deps{Pool: pool, JS: js.JS, Log: slog.New(slog.DiscardHandler),
		Clock: clock.System{}, Calendar: cycles.Default()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx) //nolint:errcheck

	fin := as(auth.RoleFinance, "")
	for _, p := range []string{"p-ok", "p-small"} {
		if _, err := s.api.PutKyc(fin, &payoutv1.PutKycRequest{ProviderId: p, Status: "verified"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.api.PutPayoutMethod(as(auth.RoleProvider, p), &payoutv1.PutPayoutMethodRequest{ProviderId: p, Type: "alipay", AlipayId: "a-" + p}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.api.PutPayoutMethod(as(auth.RoleProvider, "p-kyc"), &payoutv1.PutPayoutMethodRequest{ProviderId: "p-kyc", Type: "bank", AccountNumber: "62220001"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.api.PutKyc(as(auth.RoleProvider, "p-kyc"), &payoutv1.PutKycRequest{ProviderId: "p-kyc", Status: "verified"}); err == nil {
		t.Fatal("a provider verified its own KYC")
	}
	tests := []struct {
		give, net, wantStatus, wantNote string
	}{
		{"p-ok", "620.00", "created", ""},
		{"p-small", "99.99", "action_required", "under minimum 100.00 CNY: stays available and joins the next payout"},
		{"p-kyc", "620.00", "action_required", "kyc not verified (missing)"},
		{"p-none", "620.00", "action_required", "kyc not verified (missing)"},
	}
	publish := func(provider, msgID string, data []byte) *jetstream.PubAck {
		t.Helper()
		m := nats.NewMsg("settlement.settled." + provider)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, msgID)
		ack, err := js.JS.PublishMsg(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	for _, tt := range tests {
		b, err := proto.Marshal(&eventsv1.ProviderSettled{ProviderId: tt.give, CycleId: "cyc-20260101", Currency: "CNY",
			Gross: "1033.33", Commission: "258.33", TaxWithheld: "155.00", Net: tt.net, TransactionId: "tx-1", Jurisdiction: "CN"})
		if err != nil {
			t.Fatal(err)
		}
		// The relay's retry of one outbox row: same message id, JetStream drops it.
		id := "settled-" + tt.give + "-cyc-20260101"
		if ack := publish(tt.give, id, b); ack.Duplicate {
			t.Fatalf("%s: first publish of %s seen as a duplicate", tt.give, id)
		}
		if ack := publish(tt.give, id, b); !ack.Duplicate {
			t.Fatalf("%s: JetStream accepted %s twice", tt.give, id)
		}
		// A redelivery JetStream cannot see (another id): the consumer's own key holds.
		publish(tt.give, id+"-again", b)
	}
	// Every message consumed (acked) before counting, so a second payout would be there.
	testkit.Eventually(t, 10*time.Second, func() bool {
		cons, err := js.JS.Consumer(context.Background(), natsx.StreamSettlement, ports.SettledConsumerName)
		if err != nil {
			return false
		}
		ci, err := cons.Info(context.Background())
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.AckFloor.Stream >= uint64(2*len(tests))
	}, "payout consumer drained")
	for _, tt := range tests {
		resp, err := s.api.ListProviderPayouts(as(auth.RoleProvider, tt.give), &payoutv1.ListProviderPayoutsRequest{ProviderId: tt.give})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Payouts) != 1 {
			t.Fatalf("%s: %d payouts, want 1", tt.give, len(resp.Payouts))
		}
		got := resp.Payouts[0]
		if got.Status != tt.wantStatus || got.StatusHistory[0].Note != tt.wantNote || got.Net != tt.net {
			t.Errorf("%s: %s %q net %s; want %s %q", tt.give, got.Status, got.StatusHistory[0].Note, got.Net, tt.wantStatus, tt.wantNote)
		}
		if _, err := s.api.GetPayout(as(auth.RoleProvider, "p-other"), &payoutv1.GetPayoutRequest{PayoutId: got.PayoutId}); err == nil {
			t.Errorf("another provider read %s's payout", tt.give)
		}
	}
}
