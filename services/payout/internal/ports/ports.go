// Package ports holds payout's gRPC handlers and its consumer of
// settlement.settled.*.
package ports

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// SettledConsumerName is the durable consumer of settlement.settled.*.
const SettledConsumerName = "payout-settled"

const (
	settledBatchMax = 200
	pageSizeDefault = 50
	pageSizeMax     = 500
)

// ConsumeSettled creates one payout per settled provider, cycle and currency.
func ConsumeSettled(ctx context.Context, js jetstream.JetStream, store *adapters.Store, clk clock.Clock, log *slog.Logger) error {
	spec := natsx.ConsumerSpec{Stream: natsx.StreamSettlement, Durable: SettledConsumerName, FilterSubjects: []string{"settlement.settled.>"}, BatchMax: settledBatchMax}
	return outbox.ConsumeOnce(ctx, js, store.Pool, log, spec, adapters.Schema, func(ctx context.Context, tx pgx.Tx, evs []*eventsv1.ProviderSettled) error {
		for _, ev := range evs {
			if err := createPayout(ctx, tx, store, clk, ev); err != nil {
				return err
			}
		}
		return nil
	})
}

func createPayout(ctx context.Context, tx pgx.Tx, store *adapters.Store, clk clock.Clock, ev *eventsv1.ProviderSettled) error {
	p := adapters.Payout{ID: ids.New("po"), ProviderID: ev.ProviderId, CycleID: ev.CycleId, Currency: ev.Currency, CreatedAt: clk.Now()}
	for _, f := range []struct {
		dst *decimal.Decimal
		s   string
	}{{&p.Gross, ev.Gross}, {&p.Commission, ev.Commission}, {&p.Tax, ev.TaxWithheld}, {&p.Net, ev.Net}} {
		d, err := decimal.NewFromString(f.s)
		if err != nil {
			return fmt.Errorf("settled event of %s: amount %q: %w", ev.ProviderId, f.s, err)
		}
		*f.dst = d
	}
	kyc, method, err := store.Gate(ctx, tx, ev.ProviderId)
	if err != nil {
		return err
	}
	var reason string
	p.Status, reason = domain.DefaultMinimums().Gate(domain.GateInput{KYC: kyc, HasMethod: method != "", Currency: ev.Currency, Amount: p.Net})
	p.Method = method
	_, err = store.CreatePayout(ctx, tx, p, reason)
	return err
}

// Server implements PayoutService.
type Server struct {
	payoutv1.UnimplementedPayoutServiceServer
	Store *adapters.Store
	Clock clock.Clock
}

func fmtAmt(cur string, d decimal.Decimal) string {
	if c, err := money.Lookup(cur); err == nil {
		return c.Format(d)
	}
	return d.String()
}

func toProto(p adapters.Payout) *payoutv1.Payout {
	out := &payoutv1.Payout{PayoutId: p.ID, ProviderId: p.ProviderID, CycleId: p.CycleID, Status: p.Status,
		Gross: fmtAmt(p.Currency, p.Gross), Commission: fmtAmt(p.Currency, p.Commission), TaxWithheld: fmtAmt(p.Currency, p.Tax),
		Net: fmtAmt(p.Currency, p.Net), Currency: p.Currency, Method: p.Method, FailureCode: p.FailureCode,
		CreatedAt: timestamppb.New(p.CreatedAt), UpdatedAt: timestamppb.New(p.UpdatedAt), RailReference: p.RailRef}
	for _, c := range p.History {
		out.StatusHistory = append(out.StatusHistory, &payoutv1.PayoutStatusChange{Status: c.Status, At: timestamppb.New(c.At), Note: c.Note})
	}
	return out
}

// GetPayout implements PayoutService. Providers see only their own; another's
// payout is answered as not found.
func (s *Server) GetPayout(ctx context.Context, req *payoutv1.GetPayoutRequest) (*payoutv1.GetPayoutResponse, error) {
	p, err := s.Store.GetPayout(ctx, req.PayoutId)
	if err != nil {
		return nil, err
	}
	if err := auth.CheckOwner(ctx, auth.RoleProvider, p.ProviderID); err != nil {
		return nil, fmt.Errorf("payout %s: %w", req.PayoutId, apperr.ErrNotFound)
	}
	return &payoutv1.GetPayoutResponse{Payout: toProto(p)}, nil
}

// ListProviderPayouts implements PayoutService.
func (s *Server) ListProviderPayouts(ctx context.Context, req *payoutv1.ListProviderPayoutsRequest) (*payoutv1.ListProviderPayoutsResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	before := ""
	if req.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.PageToken)
		if err != nil {
			return nil, apperr.Invalid("page_token", "not a token from this API")
		}
		before = string(b)
	}
	n := pageSizeDefault
	if req.PageSize > 0 {
		n = min(int(req.PageSize), pageSizeMax)
	}
	ps, err := s.Store.ListPayouts(ctx, req.ProviderId, req.CycleId, req.Status, before, n)
	if err != nil {
		return nil, err
	}
	resp := &payoutv1.ListProviderPayoutsResponse{}
	for _, p := range ps {
		resp.Payouts = append(resp.Payouts, toProto(p))
	}
	if len(ps) == n {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(ps[len(ps)-1].ID))
	}
	return resp, nil
}

// PutPayoutMethod implements PayoutService.
func (s *Server) PutPayoutMethod(ctx context.Context, req *payoutv1.PutPayoutMethodRequest) (*payoutv1.PutPayoutMethodResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var v apperr.Validator
	v.Check(req.ProviderId != "", "provider_id", "required")
	switch req.Type {
	case "bank":
		v.Check(req.AccountNumber != "", "account_number", "required for type bank")
	case "alipay":
		v.Check(req.AlipayId != "", "alipay_id", "required for type alipay")
	case "wechat":
		v.Check(req.WechatOpenid != "", "wechat_openid", "required for type wechat")
	default:
		v.Add("type", "want bank, alipay or wechat")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	m := adapters.Method{ProviderID: req.ProviderId, Type: req.Type, AccountName: req.AccountName, AccountNumber: req.AccountNumber,
		AlipayID: req.AlipayId, WechatOpenID: req.WechatOpenid, BankCode: req.BankCode, UpdatedAt: s.Clock.Now()}
	if err := s.Store.PutMethod(ctx, m); err != nil {
		return nil, err
	}
	return &payoutv1.PutPayoutMethodResponse{PayoutMethod: &payoutv1.PayoutMethod{ProviderId: m.ProviderID, Type: m.Type,
		AccountName: m.AccountName, AccountNumber: m.AccountNumber, AlipayId: m.AlipayID, WechatOpenid: m.WechatOpenID,
		BankCode: m.BankCode, UpdatedAt: timestamppb.New(m.UpdatedAt)}}, nil
}

// PutKyc implements PayoutService. A provider may not verify itself.
func (s *Server) PutKyc(ctx context.Context, req *payoutv1.PutKycRequest) (*payoutv1.PutKycResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var v apperr.Validator
	v.Check(req.ProviderId != "", "provider_id", "required")
	switch req.Status {
	case domain.KYCVerified, domain.KYCRejected, domain.KYCPending:
	default:
		v.Add("status", "want verified, rejected or pending")
	}
	if p, ok := auth.FromContext(ctx); ok && p.Role == auth.RoleProvider && req.Status != domain.KYCPending {
		v.Add("status", "a provider may only submit its KYC (pending); finance verifies it")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	now := s.Clock.Now()
	if err := s.Store.PutKYC(ctx, req.ProviderId, req.Status, req.Reference, now); err != nil {
		return nil, err
	}
	return &payoutv1.PutKycResponse{Kyc: &payoutv1.Kyc{ProviderId: req.ProviderId, Status: req.Status, Reference: req.Reference, UpdatedAt: timestamppb.New(now)}}, nil
}
