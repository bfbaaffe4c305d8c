package ports

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Limits of the API.
const (
	pageSizeDefault = 50
	pageSizeMax     = 500
	closeWaitMax    = 10 * time.Second // how long a close request waits to report "closing"
	closeWaitPoll   = 50 * time.Millisecond
	releaseAttempts = 3
	releaseWaitMax  = 30 * time.Second // how long a release waits for the provider's settlement
)

// The listings' names in their page tokens (pkg/cursor).
const (
	cyclesListing     = "settlement.cycles"
	statementsListing = "settlement.statements"
)

// Server implements SettlementService.
type Server struct {
	settlementv1.UnimplementedSettlementServiceServer
	Store     app.Queries
	Temporal  client.Client
	TaskQueue string
	Calendar  cycles.Calendar
	Clock     clock.Clock
	BatchSize int // providers per cycle run (app.CycleInput.BatchSize)
	Window    int // provider workflows in flight per page (app.CycleInput.Window)
	// ReleaseWait is how long a release waits for the provider's
	// settlement (0: releaseWaitMax).
	ReleaseWait time.Duration
}

func pageSize(n int32) int {
	if n <= 0 {
		return pageSizeDefault
	}
	return min(int(n), pageSizeMax)
}

func ts(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

func toProtoCycle(c domain.Cycle) *settlementv1.SettlementCycle {
	out := &settlementv1.SettlementCycle{
		CycleId: c.ID, Status: c.Status, StartsAt: timestamppb.New(c.StartsAt), EndsAt: timestamppb.New(c.EndsAt),
		ClosesAt: timestamppb.New(c.ClosesAt), ClosedAt: ts(c.ClosedAt), SettledAt: ts(c.SettledAt),
	}
	for _, t := range c.Totals {
		cur, err := money.Lookup(t.Currency)
		f := func(d interface{ String() string }) string { return d.String() }
		tot := &settlementv1.CycleTotal{Currency: t.Currency, Providers: int32(t.Providers), ProvidersSettled: int32(t.ProvidersSettled)}
		if err == nil {
			tot.Gross, tot.Commission, tot.TaxWithheld, tot.Net = cur.Format(t.Gross), cur.Format(t.Commission), cur.Format(t.Tax), cur.Format(t.Net)
			tot.GrossUnsettled = cur.Format(t.GrossUnsettled)
		} else {
			tot.Gross, tot.Commission, tot.TaxWithheld, tot.Net = f(t.Gross), f(t.Commission), f(t.Tax), f(t.Net)
			tot.GrossUnsettled = f(t.GrossUnsettled)
		}
		out.Totals = append(out.Totals, tot)
	}
	return out
}

// cycle returns the cycle from settlement's tables, or the calendar's open
// cycle when settlement has not recorded it yet.
func (s *Server) cycle(ctx context.Context, id string) (domain.Cycle, error) {
	cy, err := s.Calendar.Parse(id)
	if err != nil {
		return domain.Cycle{}, apperr.Invalid("cycle_id", "%v", err)
	}
	c, err := s.Store.GetCycle(ctx, id)
	if errors.Is(err, apperr.ErrNotFound) {
		return domain.Cycle{ID: cy.ID, Status: domain.CycleOpen, StartsAt: cy.Start, EndsAt: cy.End, ClosesAt: cy.Closes}, nil
	}
	return c, err
}

// ListSettlementCycles implements SettlementService.
func (s *Server) ListSettlementCycles(ctx context.Context, req *settlementv1.ListSettlementCyclesRequest) (*settlementv1.ListSettlementCyclesResponse, error) {
	switch req.Status {
	case "", domain.CycleOpen, domain.CycleClosing, domain.CycleSettled:
	default:
		return nil, apperr.Invalid("status", "want open, closing or settled")
	}
	before := ""
	if req.PageToken != "" {
		pos, err := cursor.Decode(cursor.Scoped(cyclesListing, req.Status), req.PageToken, 1)
		if err != nil {
			return nil, err
		}
		before = pos.String(0)
	}
	n := pageSize(req.PageSize)
	cs, err := s.Store.ListCycles(ctx, req.Status, before, n)
	if err != nil {
		return nil, err
	}
	resp := &settlementv1.ListSettlementCyclesResponse{}
	for _, c := range cs {
		resp.SettlementCycles = append(resp.SettlementCycles, toProtoCycle(c))
	}
	if len(cs) == n {
		resp.NextPageToken = cursor.Encode(cursor.Scoped(cyclesListing, req.Status), cs[len(cs)-1].ID)
	}
	return resp, nil
}

// GetSettlementCycle implements SettlementService.
func (s *Server) GetSettlementCycle(ctx context.Context, req *settlementv1.GetSettlementCycleRequest) (*settlementv1.GetSettlementCycleResponse, error) {
	c, err := s.cycle(ctx, req.CycleId)
	if err != nil {
		return nil, err
	}
	return &settlementv1.GetSettlementCycleResponse{SettlementCycle: toProtoCycle(c)}, nil
}

// CloseSettlementCycle implements SettlementService: signal the cycle's
// workflow to close now, starting it (with close-now) if none runs. A
// closing cycle's settlement is run again (RerunCycleWorkflow: its run in
// flight settles the providers still pending once its pass is done, or a
// new run does): one whose settlement failed keeps the cycle closing. A
// settled cycle is returned unchanged.
func (s *Server) CloseSettlementCycle(ctx context.Context, req *settlementv1.CloseSettlementCycleRequest) (*settlementv1.CloseSettlementCycleResponse, error) {
	c, err := s.cycle(ctx, req.CycleId)
	if err != nil {
		return nil, err
	}
	if c.Status == domain.CycleClosing {
		cy, err := s.Calendar.Parse(c.ID)
		if err != nil {
			return nil, err
		}
		if err := RerunCycleWorkflow(ctx, s.Temporal, s.TaskQueue, cy, s.BatchSize, s.Window, "close request"); err != nil {
			return nil, fmt.Errorf("close %s again: %w: %v", c.ID, apperr.ErrUnavailable, err)
		}
	}
	if c.Status != domain.CycleOpen {
		return &settlementv1.CloseSettlementCycleResponse{SettlementCycle: toProtoCycle(c)}, nil
	}
	if !s.Clock.Now().After(c.StartsAt) {
		return nil, fmt.Errorf("cycle %s has not started yet: %w", c.ID, apperr.ErrPrecondition)
	}
	reason := req.Reason
	if reason == "" {
		reason = "closed on request"
	}
	_, err = s.Temporal.SignalWithStartWorkflow(ctx, domain.CycleWorkflowID(c.ID), app.SignalClose, app.CloseSignal{Reason: reason},
		client.StartWorkflowOptions{
			ID: domain.CycleWorkflowID(c.ID), TaskQueue: s.TaskQueue,
			// A run that ended (failed or terminated) left the cycle open:
			// a new one closes it.
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		},
		app.CycleWorkflowName, app.CycleInput{CycleID: c.ID, ClosesAt: c.ClosesAt, CloseNow: true, CloseReason: reason, BatchSize: s.BatchSize, Window: s.Window})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &already) {
		return nil, fmt.Errorf("close %s: %w: %v", c.ID, apperr.ErrUnavailable, err)
	}
	deadline := time.Now().Add(closeWaitMax)
	for c.Status == domain.CycleOpen && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(closeWaitPoll):
		}
		if c, err = s.cycle(ctx, req.CycleId); err != nil {
			return nil, err
		}
	}
	return &settlementv1.CloseSettlementCycleResponse{SettlementCycle: toProtoCycle(c)}, nil
}

// HoldProvider implements SettlementService.
func (s *Server) HoldProvider(ctx context.Context, req *settlementv1.HoldProviderRequest) (*settlementv1.HoldProviderResponse, error) {
	h, err := s.setHold(ctx, req.CycleId, req.ProviderId, req.Reason, true)
	if err != nil {
		return nil, err
	}
	return &settlementv1.HoldProviderResponse{Hold: h}, nil
}

// ReleaseProvider implements SettlementService: the provider is settled now
// if its cycle is closing or settled (waiting at most releaseWaitMax for it;
// a settlement still retrying goes on in its workflow), and a closing cycle
// whose last provider it was is marked settled.
func (s *Server) ReleaseProvider(ctx context.Context, req *settlementv1.ReleaseProviderRequest) (*settlementv1.ReleaseProviderResponse, error) {
	h, err := s.setHold(ctx, req.CycleId, req.ProviderId, req.Reason, false)
	if err != nil {
		return nil, err
	}
	c, err := s.cycle(ctx, req.CycleId)
	if err != nil {
		return nil, err
	}
	if c.Status != domain.CycleOpen {
		done, err := s.settleReleased(ctx, req.CycleId, req.ProviderId)
		if err != nil {
			return nil, err
		}
		if done && c.Status == domain.CycleClosing {
			if _, err := s.Store.CompleteCycle(ctx, req.CycleId, s.Clock.Now()); err != nil {
				return nil, err
			}
		}
	}
	return &settlementv1.ReleaseProviderResponse{Hold: h}, nil
}

// settleReleased runs settle-{cycle}-{provider} again and reports whether
// it ended settled within releaseWaitMax. A run that started before the
// release may still see the hold: then it is run once more. A run that
// fails is a failed precondition naming the cause (it was a 500, and a
// settlement retrying an outage held the call up to a day).
func (s *Server) settleReleased(ctx context.Context, cycle, provider string) (bool, error) {
	wait := s.ReleaseWait
	if wait <= 0 {
		wait = releaseWaitMax
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for range releaseAttempts {
		// The run marks a closing cycle settled itself once it settles: the
		// call may stop waiting first (the run retrying a slow ledger), and
		// the cycle's workflow has ended.
		run, err := StartProviderWorkflow(ctx, s.Temporal, s.TaskQueue, app.ProviderInput{CycleID: cycle, ProviderID: provider, CompleteCycle: true})
		if err != nil {
			return false, fmt.Errorf("settle released %s: %w: %v", provider, apperr.ErrUnavailable, err)
		}
		var res app.ProviderResult
		err = run.Get(wctx, &res)
		if err != nil && ctx.Err() == nil && waitEnded(wctx, err) {
			return false, nil // still settling: its workflow goes on
		}
		if err != nil {
			if cause := refusal(err); cause != "" {
				return false, fmt.Errorf("provider %s of %s is released, but its settlement failed: %s; once the cause is gone, release it again: %w",
					provider, cycle, cause, apperr.ErrPrecondition)
			}
			return false, fmt.Errorf("settle released %s: %w: %v", provider, apperr.ErrUnavailable, err)
		}
		if !res.Held {
			return true, nil
		}
	}
	return false, fmt.Errorf("provider %s is still held in %s: %w", provider, cycle, apperr.ErrConflict)
}

// waitEnded reports whether err ended a wait under wctx because its time
// was up: the gRPC call's own deadline may answer DeadlineExceeded a moment
// before wctx's timer marks it done (the Temporal client hands it on as a
// serviceerror.DeadlineExceeded), and the release answered 503 "context
// deadline exceeded" for a settlement still going on (half of the runs of
// TestLateReleaseStillSettlesItsCycle).
func waitEnded(wctx context.Context, err error) bool {
	var de *serviceerror.DeadlineExceeded
	if wctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) || status.Code(err) == codes.DeadlineExceeded {
		return true
	}
	dl, ok := wctx.Deadline() // whatever the error's type, the wait's time is (all but) up
	return ok && time.Until(dl) < 100*time.Millisecond
}

// refusal is the message of the refusal that failed a provider's workflow
// (the activity's non-retryable error, without the chain of errors that
// carried it), "" when it failed otherwise.
func refusal(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ae, ok := e.(*temporal.ApplicationError); ok && ae.Type() == errTypeInvalid {
			return ae.Message()
		}
	}
	return ""
}

func (s *Server) setHold(ctx context.Context, cycle, provider, reason string, held bool) (*settlementv1.ProviderHold, error) {
	var v apperr.Validator
	_, err := s.Calendar.Parse(cycle)
	v.Check(err == nil, "cycle_id", "%v", err)
	// The grammar every service spells a provider by: "p-1 " held no one
	// (settlement looks holds up by the provider's id) and answered 200.
	if err := ids.CheckPartyID(provider); err != nil {
		v.Add("provider_id", "%v", err)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	h := domain.Hold{CycleID: cycle, ProviderID: provider, Held: held, Reason: reason, UpdatedAt: s.Clock.Now()}
	if err := s.Store.SetHold(ctx, h); err != nil {
		return nil, err
	}
	return &settlementv1.ProviderHold{CycleId: cycle, ProviderId: provider, Held: held, Reason: reason, UpdatedAt: timestamppb.New(h.UpdatedAt)}, nil
}

// ListStatements implements SettlementService. Providers see only their own.
func (s *Server) ListStatements(ctx context.Context, req *settlementv1.ListStatementsRequest) (*settlementv1.ListStatementsResponse, error) {
	if req.ProviderId == "" {
		return nil, apperr.Invalid("provider_id", "required")
	}
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var after *domain.StatementPos
	if req.PageToken != "" {
		pos, err := cursor.Decode(cursor.Scoped(statementsListing, req.ProviderId, req.CycleId), req.PageToken, 2)
		if err != nil {
			return nil, err
		}
		after = &domain.StatementPos{CycleID: pos.String(0), Currency: pos.String(1)}
	}
	n := pageSize(req.PageSize)
	sts, err := s.Store.ListStatements(ctx, req.ProviderId, req.CycleId, after, n)
	if err != nil {
		return nil, err
	}
	resp := &settlementv1.ListStatementsResponse{}
	for _, st := range sts {
		sp := st.Split
		cur, err := money.Lookup(sp.Currency)
		if err != nil {
			return nil, err
		}
		out := &settlementv1.Statement{
			ProviderId: st.ProviderID, CycleId: st.CycleID, Currency: cur.Code,
			Gross: cur.Format(sp.Gross), Commission: cur.Format(sp.Commission), CommissionRate: sp.CommissionRate.String(),
			TaxWithheld: cur.Format(sp.Tax), Net: cur.Format(sp.Net), TransactionId: st.TransactionID,
			CreatedAt: timestamppb.New(st.CreatedAt),
		}
		for _, l := range st.Lines {
			out.Lines = append(out.Lines, &settlementv1.StatementLine{
				LeaseId: l.LeaseID, RenterId: l.RenterID, GpuModel: l.GPUModel, GpuHours: l.GPUHours,
				Amount: l.Amount, Description: l.Description,
			})
		}
		resp.Statements = append(resp.Statements, out)
	}
	// A full page may end inside a cycle (one statement per currency): the
	// token holds the last statement's cycle and currency.
	if len(sts) == n {
		last := sts[len(sts)-1]
		resp.NextPageToken = cursor.Encode(cursor.Scoped(statementsListing, req.ProviderId, req.CycleId), last.CycleID, last.Split.Currency)
	}
	return resp, nil
}
