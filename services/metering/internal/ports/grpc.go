// Package ports adapts metering's use cases to gRPC and JetStream.
package ports

import (
	"context"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// PartyServer serves PartyService.
type PartyServer struct {
	meteringv1.UnimplementedPartyServiceServer
	App *app.App
}

func providerPB(p domain.Provider) *meteringv1.Provider {
	return &meteringv1.Provider{
		ProviderId: p.ID, Name: p.Name, Tier: p.Tier, TaxProfile: p.TaxProfile, Jurisdiction: p.Jurisdiction,
		Pue: domain.PUEString(p.PUE), Currency: p.Currency, Version: p.Version,
		CreatedAt: timestamppb.New(p.CreatedAt), UpdatedAt: timestamppb.New(p.UpdatedAt),
	}
}

func renterPB(r domain.Renter) *meteringv1.Renter {
	out := &meteringv1.Renter{
		RenterId: r.ID, Name: r.Name, Currency: r.Currency, CreditLimit: r.CreditLimit.String(), Version: r.Version,
		CreatedAt: timestamppb.New(r.CreatedAt), UpdatedAt: timestamppb.New(r.UpdatedAt), Status: r.Status,
	}
	if r.Closed() {
		out.ClosedAt = timestamppb.New(r.ClosedAt)
	}
	return out
}

// CreateProvider implements PartyService.
func (s *PartyServer) CreateProvider(ctx context.Context, r *meteringv1.CreateProviderRequest) (*meteringv1.CreateProviderResponse, error) {
	p, err := s.App.CreateProvider(ctx, domain.ProviderInput{ID: r.ProviderId, Name: r.Name, Tier: r.Tier,
		TaxProfile: r.TaxProfile, Jurisdiction: r.Jurisdiction, PUE: r.Pue, Currency: r.Currency})
	if err != nil {
		return nil, err
	}
	return &meteringv1.CreateProviderResponse{Provider: providerPB(p)}, nil
}

// GetProvider implements PartyService; a provider may read its own record.
func (s *PartyServer) GetProvider(ctx context.Context, r *meteringv1.GetProviderRequest) (*meteringv1.GetProviderResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, r.ProviderId); err != nil {
		return nil, err
	}
	p, err := s.App.Provider(ctx, r.ProviderId)
	if err != nil {
		return nil, err
	}
	return &meteringv1.GetProviderResponse{Provider: providerPB(p)}, nil
}

// UpdateProvider implements PartyService.
func (s *PartyServer) UpdateProvider(ctx context.Context, r *meteringv1.UpdateProviderRequest) (*meteringv1.UpdateProviderResponse, error) {
	in := r.GetProvider()
	if in.GetProviderId() == "" {
		return nil, apperr.Invalid("provider.provider_id", "required")
	}
	paths := r.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		paths = []string{"name", "tier", "tax_profile", "jurisdiction", "pue", "currency"}
	}
	var patch app.ProviderPatch
	v := &apperr.Validator{}
	for _, p := range paths {
		p = strings.TrimPrefix(p, "provider.")
		switch p {
		case "name":
			patch.Name = &in.Name
		case "tier":
			patch.Tier = &in.Tier
		case "tax_profile":
			patch.TaxProfile = &in.TaxProfile
		case "jurisdiction":
			patch.Jurisdiction = &in.Jurisdiction
		case "pue":
			patch.PUE = &in.Pue
		case "currency":
			patch.Currency = &in.Currency
		case "provider_id", "version", "created_at", "updated_at":
			// identity and bookkeeping: not patchable, ignored when echoed back
		default:
			v.Add("update_mask", "unknown field %q", p)
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	p, err := s.App.UpdateProvider(ctx, in.ProviderId, patch)
	if err != nil {
		return nil, err
	}
	return &meteringv1.UpdateProviderResponse{Provider: providerPB(p)}, nil
}

// ListProviders implements PartyService.
func (s *PartyServer) ListProviders(ctx context.Context, r *meteringv1.ListProvidersRequest) (*meteringv1.ListProvidersResponse, error) {
	ps, next, err := s.App.ListProviders(ctx, r.Tier, r.PageToken, int(r.PageSize))
	if err != nil {
		return nil, err
	}
	out := &meteringv1.ListProvidersResponse{NextPageToken: next}
	for _, p := range ps {
		out.Providers = append(out.Providers, providerPB(p))
	}
	return out, nil
}

// CreateRenter implements PartyService.
func (s *PartyServer) CreateRenter(ctx context.Context, r *meteringv1.CreateRenterRequest) (*meteringv1.CreateRenterResponse, error) {
	rt, err := s.App.CreateRenter(ctx, domain.RenterInput{ID: r.RenterId, Name: r.Name, Currency: r.Currency, CreditLimit: r.CreditLimit})
	if err != nil {
		return nil, err
	}
	return &meteringv1.CreateRenterResponse{Renter: renterPB(rt)}, nil
}

// GetRenter implements PartyService; a renter may read its own record.
func (s *PartyServer) GetRenter(ctx context.Context, r *meteringv1.GetRenterRequest) (*meteringv1.GetRenterResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleRenter, r.RenterId); err != nil {
		return nil, err
	}
	rt, err := s.App.Renter(ctx, r.RenterId)
	if err != nil {
		return nil, err
	}
	return &meteringv1.GetRenterResponse{Renter: renterPB(rt)}, nil
}

// UpdateRenter implements PartyService: the name, the credit limit, or the
// status "closed" (final).
func (s *PartyServer) UpdateRenter(ctx context.Context, r *meteringv1.UpdateRenterRequest) (*meteringv1.UpdateRenterResponse, error) {
	in := r.GetRenter()
	if in.GetRenterId() == "" {
		return nil, apperr.Invalid("renter.renter_id", "required")
	}
	paths := r.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		paths = []string{"name", "credit_limit", "status"}
	}
	var patch app.RenterPatch
	v := &apperr.Validator{}
	for _, p := range paths {
		p = strings.TrimPrefix(p, "renter.")
		switch p {
		case "name":
			patch.Name = &in.Name
		case "credit_limit":
			patch.CreditLimit = &in.CreditLimit
		case "status":
			patch.Status = &in.Status
		case "currency":
			patch.Currency = &in.Currency
		case "renter_id", "version", "created_at", "updated_at", "closed_at":
			// identity and bookkeeping: not patchable, ignored when echoed back
		default:
			v.Add("update_mask", "unknown field %q", p)
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	rt, err := s.App.UpdateRenter(ctx, in.RenterId, patch)
	if err != nil {
		return nil, err
	}
	return &meteringv1.UpdateRenterResponse{Renter: renterPB(rt)}, nil
}

// ListRenters implements PartyService.
func (s *PartyServer) ListRenters(ctx context.Context, r *meteringv1.ListRentersRequest) (*meteringv1.ListRentersResponse, error) {
	rs, next, err := s.App.ListRenters(ctx, r.PageToken, int(r.PageSize))
	if err != nil {
		return nil, err
	}
	out := &meteringv1.ListRentersResponse{NextPageToken: next}
	for _, rt := range rs {
		out.Renters = append(out.Renters, renterPB(rt))
	}
	return out, nil
}

// UsageServer serves UsageService.
type UsageServer struct {
	meteringv1.UnimplementedUsageServiceServer
	App *app.App
}

// EventInputs converts the wire events to the domain's raw inputs.
func EventInputs(evs []*meteringv1.UsageEventInput) []domain.EventInput {
	out := make([]domain.EventInput, len(evs))
	for i, e := range evs {
		out[i] = domain.EventInput{ID: e.GetId(), LeaseID: e.GetLeaseId(), ProviderID: e.GetProviderId(), RenterID: e.GetRenterId(),
			GPUModel: e.GetGpuModel(), GPUCount: e.GetGpuCount(), StartTime: e.GetStartTime(), EndTime: e.GetEndTime(),
			Region: e.GetRegion(), Workload: e.GetWorkload(), Malformed: e.GetMalformed()}
	}
	return out
}

// IngestResponse converts an ingest result to the wire answer.
func IngestResponse(res app.IngestResult) *meteringv1.IngestUsageEventsResponse {
	out := &meteringv1.IngestUsageEventsResponse{Accepted: int32(res.Accepted), Duplicates: int32(res.Duplicates),
		Rejected: make([]*meteringv1.RejectedUsageEvent, 0, len(res.Rejected))}
	for _, r := range res.Rejected {
		out.Rejected = append(out.Rejected, &meteringv1.RejectedUsageEvent{Index: int32(r.Index), Id: r.ID, Reason: r.Reason})
	}
	return out
}

// IngestUsageEvents implements UsageService. A meter token naming a
// provider (gpubill token --role meter --sub p-001) is that provider's node
// agent: it ingests that provider's usage only, each event of another
// refused on its own, as usage.ingest.{provider} does on NATS (accepted,
// it debited any renter and credited whichever provider it named). A meter
// token without a subject is the platform's meter, for every provider, and
// staff ingest for any.
func (s *UsageServer) IngestUsageEvents(ctx context.Context, r *meteringv1.IngestUsageEventsRequest) (*meteringv1.IngestUsageEventsResponse, error) {
	var opt app.IngestOptions
	if p, ok := auth.FromContext(ctx); ok && p.Role == auth.RoleMeter {
		opt.OnlyProvider = p.Subject
	}
	res, err := s.App.Ingest(ctx, EventInputs(r.Events), opt)
	if err != nil {
		return nil, err
	}
	return IngestResponse(res), nil
}

// ListUsageEvents implements UsageService. Providers and renters see only
// their own usage.
func (s *UsageServer) ListUsageEvents(ctx context.Context, r *meteringv1.ListUsageEventsRequest) (*meteringv1.ListUsageEventsResponse, error) {
	q := app.UsageQuery{LeaseID: r.LeaseId, RenterID: r.RenterId, ProviderID: r.ProviderId,
		PageSize: int(r.PageSize), PageToken: r.PageToken}
	if p, ok := auth.FromContext(ctx); ok {
		switch p.Role {
		case auth.RoleProvider:
			if q.ProviderID != "" && q.ProviderID != p.Subject {
				return nil, auth.CheckOwner(ctx, auth.RoleProvider, q.ProviderID)
			}
			q.ProviderID = p.Subject
		case auth.RoleRenter:
			if q.RenterID != "" && q.RenterID != p.Subject {
				return nil, auth.CheckOwner(ctx, auth.RoleRenter, q.RenterID)
			}
			q.RenterID = p.Subject
		}
	}
	if r.From != nil {
		q.From = r.From.AsTime()
		if err := apperr.CheckTime("from", q.From); err != nil {
			return nil, err // over gRPC a year PostgreSQL cannot hold: a 500
		}
	}
	if r.To != nil {
		q.To = r.To.AsTime()
		if err := apperr.CheckTime("to", q.To); err != nil {
			return nil, err
		}
	}
	rows, next, err := s.App.ListUsage(ctx, q)
	if err != nil {
		return nil, err
	}
	out := &meteringv1.ListUsageEventsResponse{NextPageToken: next, UsageEvents: make([]*meteringv1.UsageEvent, 0, len(rows))}
	for _, e := range rows {
		out.UsageEvents = append(out.UsageEvents, usagePB(e))
	}
	return out, nil
}

func usagePB(e domain.Recorded) *meteringv1.UsageEvent {
	return &meteringv1.UsageEvent{Id: e.ID, LeaseId: e.LeaseID, ProviderId: e.ProviderID, RenterId: e.RenterID,
		GpuModel: e.GPUModel, GpuCount: e.GPUCount, StartTime: timestamppb.New(e.Start), EndTime: timestamppb.New(e.End),
		Region: e.Region, Workload: e.Workload, CycleId: e.CycleID, Status: e.Status, ReceivedAt: timestamppb.New(e.ReceivedAt)}
}
