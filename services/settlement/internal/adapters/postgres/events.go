package postgres

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// cycleClosed is settlement.cycle.closed.{cycle}, once per cycle.
func cycleClosed(cycle string, now time.Time) (outbox.Message, error) {
	ev, err := proto.Marshal(&eventsv1.CycleClosed{CycleId: cycle, ClosedAt: timestamppb.New(now)})
	if err != nil {
		return outbox.Message{}, err
	}
	return outbox.Message{ID: "cycle-closed-" + cycle, Subject: subjects.CycleClosed.Of(cycle), Payload: ev}, nil
}

// providerSettled is settlement.settled.{provider} for payout, once per
// settlement key; an unknown currency is app.Rejected.
func providerSettled(st domain.Settled) (outbox.Message, error) {
	sp := st.Split
	cur, err := money.Lookup(sp.Currency)
	if err != nil {
		return outbox.Message{}, app.Rejected(err)
	}
	ev, err := proto.Marshal(&eventsv1.ProviderSettled{
		ProviderId: st.ProviderID, CycleId: st.CycleID, Currency: cur.Code,
		Gross: cur.Format(sp.Gross), Commission: cur.Format(sp.Commission), CommissionRate: sp.CommissionRate.String(),
		TaxWithheld: cur.Format(sp.Tax), Net: cur.Format(sp.Net), TransactionId: st.TransactionID, Jurisdiction: sp.Jurisdiction,
	})
	if err != nil {
		return outbox.Message{}, err
	}
	return outbox.Message{
		ID:      "settled-" + domain.SettlementKey(st.CycleID, st.ProviderID, cur.Code),
		Subject: subjects.ProviderSettled.Of(st.ProviderID), Payload: ev,
	}, nil
}
