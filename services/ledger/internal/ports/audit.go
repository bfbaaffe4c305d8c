package ports

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Audit consumer and query limits.
const (
	auditFetchMax     = 500
	auditFetchWait    = 50 * time.Millisecond
	auditPageDefault  = 100
	auditPageMax      = 1000
	auditConsumerName = "ledger-audit"
	// auditResourceBytesMax bounds a resource filter: a field name, "=" and
	// a value, of which a record keeps at most 200 bytes (pkg/audit).
	auditResourceBytesMax = 256
)

// AuditSpec is the durable pull consumer on AUDIT.
func AuditSpec(dl natsx.DeadLetters) natsx.ConsumerSpec {
	return natsx.ConsumerSpec{Stream: natsx.StreamAudit, Durable: auditConsumerName, BatchMax: auditFetchMax, MaxWait: auditFetchWait,
		DeadLetters: dl}
}

// ConsumeAudit stores every service's audit.recorded.* events until ctx
// ends. A batch that cannot be stored is redelivered (nothing is acked
// before it is committed); a repeat changes nothing (event id is unique); a
// record that does not decode is dead-lettered whole, never stored half.
func ConsumeAudit(ctx context.Context, js jetstream.JetStream, log *slog.Logger, a *app.App, dl natsx.DeadLetters) error {
	return natsx.Consume(ctx, js, log, AuditSpec(dl), func(ctx context.Context, msgs []jetstream.Msg) error {
		evs := make([]domain.AuditEvent, 0, len(msgs))
		var poison *natsx.PoisonError
		for _, m := range msgs {
			if !strings.HasPrefix(m.Subject(), subjects.AuditRecorded.Prefix()) {
				continue
			}
			recs, err := decodeAudit(m.Data())
			if err != nil {
				if poison == nil {
					poison = &natsx.PoisonError{}
				}
				poison.Add(natsx.MsgID(m), err)
				continue
			}
			for _, e := range recs {
				evs = append(evs, domain.AuditEvent{EventID: e.EventId, At: e.At.AsTime(), Service: e.Service, Method: e.Method,
					Actor: e.Actor, Role: e.Role, ResourceIDs: maskResourceIDs(e.ResourceIds), RequestID: e.RequestId, Code: e.Code,
					ClientAddr: e.ClientAddr})
			}
		}
		if poison != nil {
			return poison
		}
		return a.RecordAuditEvents(ctx, evs)
	})
}

// maskResourceIDs masks the payout account identifiers among a record's
// resource ids (audit.MaskResourceID). A service records them masked, but
// a payout replica of an earlier version, still serving in a rolling
// upgrade (the ledger goes first), sends them in clear, and the audit log
// is append-only and read by finance and auditors: an Alipay phone number
// stored whole stayed readable there for good.
func maskResourceIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = audit.MaskResourceID(id)
	}
	return out
}

// decodeAudit reads an audit.recorded.* message: one AuditRecorded, or an
// AuditRecordedBatch (which reads as an AuditRecorded without event_id).
// Every record must have its event_id and at, or the message is refused
// whole.
func decodeAudit(b []byte) ([]*eventsv1.AuditRecorded, error) {
	one := &eventsv1.AuditRecorded{}
	if err := proto.Unmarshal(b, one); err != nil {
		return nil, err
	}
	recs := []*eventsv1.AuditRecorded{one}
	if one.EventId == "" && one.At == nil {
		batch := &eventsv1.AuditRecordedBatch{}
		if err := proto.Unmarshal(b, batch); err != nil {
			return nil, err
		}
		recs = batch.Records
	}
	if len(recs) == 0 {
		return nil, errors.New("audit record without event_id or at")
	}
	for _, e := range recs {
		if e.EventId == "" || e.At == nil {
			return nil, errors.New("audit record without event_id or at")
		}
	}
	return recs, nil
}

// AuditServer is the gRPC AuditService (GET /v1/audit-events).
type AuditServer struct {
	ledgerv1.UnimplementedAuditServiceServer
	App *app.App
}

// ListAuditEvents implements AuditService.
func (s *AuditServer) ListAuditEvents(ctx context.Context, r *ledgerv1.ListAuditEventsRequest) (*ledgerv1.ListAuditEventsResponse, error) {
	var v apperr.Validator
	f := app.AuditFilter{Actor: r.GetActor(), Method: r.GetMethod(), Resource: r.GetResource(), Limit: int(r.GetPageSize())}
	v.Check(f.Limit >= 0 && f.Limit <= auditPageMax, "page_size", "want 0..%d", auditPageMax)
	v.Check(f.Resource == "" || isResourceID(f.Resource), "resource",
		"want one resource id entry, field=value (transaction_id=…, payout_id=…), a lower-case field name, at most %d bytes",
		auditResourceBytesMax)
	if f.Limit == 0 {
		f.Limit = auditPageDefault
	}
	if r.GetFrom() != nil {
		t := r.GetFrom().AsTime()
		v.Check(apperr.CheckTime("from", t) == nil, "from", "outside 0001..9999")
		f.From = &t
	}
	if r.GetTo() != nil {
		t := r.GetTo().AsTime()
		v.Check(apperr.CheckTime("to", t) == nil, "to", "outside 0001..9999")
		f.To = &t
	}
	v.Check(f.From == nil || f.To == nil || !f.From.After(*f.To), "to", "before from")
	if err := v.Err(); err != nil {
		return nil, err
	}
	rows, next, err := s.App.ListAuditEvents(ctx, f, r.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListAuditEventsResponse{Events: make([]*ledgerv1.AuditEvent, 0, len(rows)), NextPageToken: next}
	for _, e := range rows {
		out.Events = append(out.Events, &ledgerv1.AuditEvent{EventId: e.EventID, At: timestamppb.New(e.At), Service: e.Service, Method: e.Method,
			Actor: e.Actor, Role: e.Role, ResourceIds: e.ResourceIDs, RequestId: e.RequestID, Code: e.Code,
			ClientAddr: e.ClientAddr, StoredAt: timestamppb.New(e.StoredAt)})
	}
	return out, nil
}

// isResourceID says whether s is shaped as a record's resource id entry
// (pkg/audit): a proto field name in lower case, "=", a value (possibly
// empty). A NUL is refused before (pkg/server's text guard).
func isResourceID(s string) bool {
	field, _, ok := strings.Cut(s, "=")
	if !ok || field == "" || len(s) > auditResourceBytesMax {
		return false
	}
	for i, c := range field {
		if (c < 'a' || c > 'z') && c != '_' && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
