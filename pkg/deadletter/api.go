package deadletter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/cursor"
	opsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ops/v1"
)

// Limits of the API.
const (
	pageSizeDefault = 100
	pageSizeMax     = 1000
	replayWaitMax   = 10 * time.Second // how long a replay call waits for its outcome
	replayWaitPoll  = 100 * time.Millisecond
)

// lettersListing names the dead-letter listing in its page tokens (pkg/cursor).
const lettersListing = "ops.dead_letters"

// Statuses of a letter.
const (
	StatusDead            = "dead"
	StatusReplayRequested = "replay_requested"
	StatusReplayed        = "replayed"
)

// Server serves gpubill.ops.v1.DeadLetterService over the dead-letter tables
// of one service (a service run alone) or of all (gpubill dev). It is a
// pkg/server.Service.
type Server struct {
	opsv1.UnimplementedDeadLetterServiceServer
	sinks []*Sink // by schema name: the order of a listing
}

// NewServer serves the given services' dead letters.
func NewServer(sinks ...*Sink) *Server {
	s := &Server{sinks: slices.Clone(sinks)}
	slices.SortFunc(s.sinks, func(a, b *Sink) int { return strings.Compare(a.Schema, b.Schema) })
	return s
}

// RegisterGRPC implements server.Service.
func (s *Server) RegisterGRPC(g grpc.ServiceRegistrar) { opsv1.RegisterDeadLetterServiceServer(g, s) }

// RegisterGateway implements server.Service.
func (s *Server) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
	return opsv1.RegisterDeadLetterServiceHandlerClient(ctx, mux, opsv1.NewDeadLetterServiceClient(conn))
}

// Policy implements server.Service: finance and admin.
func (s *Server) Policy() auth.Policy {
	roles := []string{auth.RoleFinance, auth.RoleAdmin}
	return auth.Policy{
		opsv1.DeadLetterService_ListDeadLetters_FullMethodName:  roles,
		opsv1.DeadLetterService_ReplayDeadLetter_FullMethodName: roles,
	}
}

// ListDeadLetters implements opsv1.DeadLetterServiceServer. The page token
// is the id of the last letter of the previous page.
func (s *Server) ListDeadLetters(ctx context.Context, req *opsv1.ListDeadLettersRequest) (*opsv1.ListDeadLettersResponse, error) {
	size := int(req.GetPageSize())
	if size < 0 || size > pageSizeMax {
		return nil, apperr.Invalid("page_size", "must be 0..%d", pageSizeMax)
	}
	if size == 0 {
		size = pageSizeDefault
	}
	switch req.GetStatus() {
	case "", StatusDead, StatusReplayRequested, StatusReplayed:
	default:
		return nil, apperr.Invalid("status", "must be %s, %s or %s", StatusDead, StatusReplayRequested, StatusReplayed)
	}
	if req.GetService() != "" && s.sink(req.GetService()) == nil {
		return nil, apperr.Invalid("service", "unknown service %q", req.GetService())
	}
	afterService, afterID := "", int64(0)
	listing := cursor.Scoped(lettersListing, req.GetService(), req.GetStatus())
	if tok := req.GetPageToken(); tok != "" {
		pos, err := cursor.Decode(listing, tok, 1)
		if err != nil {
			return nil, err
		}
		sk, n, err := s.parseID(pos.String(0))
		if err != nil {
			return nil, cursor.Malformed()
		}
		afterService, afterID = sk.Schema, n
	}
	out := &opsv1.ListDeadLettersResponse{}
	for _, sk := range s.sinks {
		if req.GetService() != "" && sk.Schema != req.GetService() || sk.Schema < afterService {
			continue
		}
		after := int64(0)
		if sk.Schema == afterService {
			after = afterID
		}
		left := size + 1 - len(out.DeadLetters)
		rows, err := sk.list(ctx, after, req.GetStatus(), left)
		if err != nil {
			return nil, err
		}
		out.DeadLetters = append(out.DeadLetters, rows...)
		if len(out.DeadLetters) > size {
			out.DeadLetters = out.DeadLetters[:size]
			out.NextPageToken = cursor.Encode(listing, out.DeadLetters[size-1].Id)
			break
		}
	}
	return out, nil
}

// ReplayDeadLetter implements opsv1.DeadLetterServiceServer.
func (s *Server) ReplayDeadLetter(ctx context.Context, req *opsv1.ReplayDeadLetterRequest) (*opsv1.ReplayDeadLetterResponse, error) {
	sk, n, err := s.parseID(req.GetId())
	if err != nil {
		return nil, apperr.Invalid("id", "want <service>-<number>, e.g. ledger-42")
	}
	before, err := sk.get(ctx, n)
	if err != nil {
		return nil, err
	}
	if before.Status == StatusReplayed {
		// A replay sent again (its answer lost) answers the letter as it
		// is: the replay it asks for has run, exactly once.
		return &opsv1.ReplayDeadLetterResponse{DeadLetter: before}, nil
	}
	if _, err := sk.Pool.Exec(ctx, `update `+sk.table()+` set replay_requested_at = now() where id = $1 and replayed_at is null`, n); err != nil {
		return nil, err
	}
	// The owning consumer polls for requests; wait a little for its
	// outcome: the letter replayed, or the replay's error recorded (attempts
	// grow). Once the consumer has taken the request, and until it records
	// the outcome, the row reads "dead" with its old error: not an outcome.
	deadline := time.Now().Add(replayWaitMax)
	for {
		got, err := sk.get(ctx, n)
		if err != nil {
			return nil, err
		}
		outcome := got.Status == StatusReplayed || (got.Status == StatusDead && got.Attempts > before.Attempts)
		if outcome || !time.Now().Before(deadline) {
			return &opsv1.ReplayDeadLetterResponse{DeadLetter: got}, nil
		}
		t := time.NewTimer(replayWaitPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return &opsv1.ReplayDeadLetterResponse{DeadLetter: got}, nil
		case <-t.C:
		}
	}
}

func (s *Server) sink(service string) *Sink {
	for _, sk := range s.sinks {
		if sk.Schema == service {
			return sk
		}
	}
	return nil
}

// parseID splits "<service>-<number>", the number written as the letter's
// id reads (no sign, no leading zero): "pricing-+1" and "pricing-01"
// replayed pricing-1, a letter the call did not name.
func (s *Server) parseID(id string) (*Sink, int64, error) {
	service, num, ok := strings.Cut(id, "-")
	n, err := strconv.ParseInt(num, 10, 64)
	sk := s.sink(service)
	if !ok || err != nil || n <= 0 || sk == nil || strconv.FormatInt(n, 10) != num {
		return nil, 0, errors.New("bad dead-letter id")
	}
	return sk, n, nil
}

const letterColumns = `id, consumer, message_id, subject, headers, payload, error, attempts, first_seen_at, last_seen_at,
	replay_requested_at, replayed_at`

func (s *Sink) list(ctx context.Context, after int64, status string, limit int) ([]*opsv1.DeadLetter, error) {
	rows, err := s.Pool.Query(ctx, `select `+letterColumns+` from `+s.table()+`
		where id > $1 and ($2 = '' or $2 = case when replayed_at is not null then 'replayed'
			when replay_requested_at is not null then 'replay_requested' else 'dead' end)
		order by id limit $3`, after, status, limit)
	if err != nil {
		return nil, fmt.Errorf("list %s dead letters: %w", s.Schema, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*opsv1.DeadLetter, error) { return s.scan(r) })
}

func (s *Sink) get(ctx context.Context, id int64) (*opsv1.DeadLetter, error) {
	rows, err := s.Pool.Query(ctx, `select `+letterColumns+` from `+s.table()+` where id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("dead letter %s-%d: %w", s.Schema, id, err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*opsv1.DeadLetter, error) { return s.scan(r) })
	if err != nil {
		return nil, fmt.Errorf("dead letter %s-%d: %w", s.Schema, id, err)
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("dead letter %s-%d: %w", s.Schema, id, apperr.ErrNotFound)
	}
	return got[0], nil
}

func (s *Sink) scan(r pgx.CollectableRow) (*opsv1.DeadLetter, error) {
	var (
		id                  int64
		d                   opsv1.DeadLetter
		headers             map[string][]string
		first, last         time.Time
		requested, replayed *time.Time
	)
	if err := r.Scan(&id, &d.Consumer, &d.MessageId, &d.Subject, &headers, &d.Payload, &d.Error, &d.Attempts,
		&first, &last, &requested, &replayed); err != nil {
		return nil, err
	}
	d.Id, d.Service = fmt.Sprintf("%s-%d", s.Schema, id), s.Schema
	d.FirstSeenAt, d.LastSeenAt = timestamppb.New(first), timestamppb.New(last)
	d.Headers = make(map[string]string, len(headers))
	for k, v := range headers {
		if len(v) > 0 {
			d.Headers[k] = v[0]
		}
	}
	switch {
	case replayed != nil:
		d.Status, d.ReplayedAt = StatusReplayed, timestamppb.New(*replayed)
	case requested != nil:
		d.Status = StatusReplayRequested
	default:
		d.Status = StatusDead
	}
	return &d, nil
}
