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

// StatusChangedEvent returns the maker of payout.status_changed.{provider},
// one per change, for a payout schema of restore epoch epoch (pkg/pg.RestoreEpoch).
// Its id is statusChangedEventID.
func StatusChangedEvent(epoch string) func(p domain.Payout, from string, c domain.Change) (outbox.Message, error) {
	return func(p domain.Payout, from string, c domain.Change) (outbox.Message, error) {
		net := p.Net.String()
		if cur, err := money.Lookup(p.Currency); err == nil {
			net = cur.Format(p.Net)
		}
		b, err := proto.Marshal(&eventsv1.PayoutStatusChanged{PayoutId: p.ID, ProviderId: p.ProviderID, FromStatus: from, Status: c.Status,
			Note: c.Note, Net: net, Currency: p.Currency, FailureCode: p.FailureCode, At: timestamppb.New(c.At), Version: p.Version})
		if err != nil {
			return outbox.Message{}, err
		}
		return outbox.Message{ID: statusChangedEventID(p.ID, p.Version, epoch), Subject: subjects.PayoutStatusChanged.Of(p.ProviderID), Payload: b}, nil
	}
}

// statusChangedEventID is a status change's event id (the message id on
// JetStream, the webhook's event_id and Gpubill-Event-Id):
// `payout-{id}-v{version}-r{epoch}`. A restore restarts versions from the
// snapshot's and gives the schema a new epoch, so an id issued after it
// never names a change issued before it under the same version.
func statusChangedEventID(id string, version int64, epoch string) string {
	return fmt.Sprintf("payout-%s-v%d-r%s", id, version, epoch)
}
