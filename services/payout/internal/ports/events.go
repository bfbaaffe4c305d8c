package ports

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// StatusChangedEvent is payout.status_changed.{provider}, one per change
// (id: payout id and version).
func StatusChangedEvent(p domain.Payout, from string, c domain.Change) (outbox.Message, error) {
	net := p.Net.String()
	if cur, err := money.Lookup(p.Currency); err == nil {
		net = cur.Format(p.Net)
	}
	b, err := proto.Marshal(&eventsv1.PayoutStatusChanged{PayoutId: p.ID, ProviderId: p.ProviderID, FromStatus: from, Status: c.Status,
		Note: c.Note, Net: net, Currency: p.Currency, FailureCode: p.FailureCode, At: timestamppb.New(c.At), Version: p.Version})
	if err != nil {
		return outbox.Message{}, err
	}
	return outbox.Message{ID: fmt.Sprintf("payout-%s-v%d", p.ID, p.Version), Subject: subjects.PayoutStatusChanged.Of(p.ProviderID), Payload: b}, nil
}
