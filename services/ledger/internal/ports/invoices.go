package ports

import (
	"context"
	"fmt"

	"github.com/shopspring/decimal"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/money"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app/invoicing"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// InvoiceServer is the gRPC InvoiceService. A renter reads only its own
// invoices (checked here, before anything is read for a listing, and
// against the invoice's renter for one invoice).
type InvoiceServer struct {
	ledgerv1.UnimplementedInvoiceServiceServer
	Invoicing *invoicing.Invoicing
}

// ListRenterInvoices implements InvoiceService.
func (s *InvoiceServer) ListRenterInvoices(ctx context.Context, r *ledgerv1.ListRenterInvoicesRequest) (*ledgerv1.ListRenterInvoicesResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleRenter, r.GetRenterId()); err != nil {
		return nil, err
	}
	invs, next, err := s.Invoicing.RenterInvoices(ctx, r.GetRenterId(), r.GetCurrency(), int(r.GetPageSize()), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.ListRenterInvoicesResponse{Invoices: []*ledgerv1.Invoice{}, NextPageToken: next}
	for _, inv := range invs {
		out.Invoices = append(out.Invoices, InvoiceProto(inv))
	}
	return out, nil
}

// GetInvoice implements InvoiceService: JSON (default) or PDF.
func (s *InvoiceServer) GetInvoice(ctx context.Context, r *ledgerv1.GetInvoiceRequest) (*httpbody.HttpBody, error) {
	format := r.GetFormat()
	if format == "" {
		format = "json"
	}
	if format != "json" && format != "pdf" {
		return nil, apperr.Invalid("format", "%q: want json or pdf", format)
	}
	inv, err := s.Invoicing.Invoice(ctx, r.GetInvoiceId())
	if err != nil {
		return nil, err
	}
	if err := auth.CheckOwner(ctx, auth.RoleRenter, inv.RenterID); err != nil {
		// As for an id no invoice holds: a 403 named the renter the
		// invoice is for, and told that it exists.
		return nil, fmt.Errorf("invoice %s: %w", r.GetInvoiceId(), apperr.ErrNotFound)
	}
	if format == "pdf" {
		b, err := s.Invoicing.RenderPDF(inv)
		if err != nil {
			return nil, err
		}
		return &httpbody.HttpBody{ContentType: "application/pdf", Data: b}, nil
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(InvoiceProto(inv))
	if err != nil {
		return nil, err
	}
	return &httpbody.HttpBody{ContentType: "application/json", Data: b}, nil
}

// IssueInvoices implements InvoiceService (internal: the monthly schedule).
func (s *InvoiceServer) IssueInvoices(ctx context.Context, r *ledgerv1.IssueInvoicesRequest) (*ledgerv1.IssueInvoicesResponse, error) {
	res, err := s.Invoicing.IssueMonth(ctx, r.GetPeriod())
	if err != nil {
		return nil, err
	}
	return &ledgerv1.IssueInvoicesResponse{Period: res.Period, Issued: int32(res.Issued), AlreadyIssued: int32(res.AlreadyIssued)}, nil
}

// InvoiceProto renders an invoice as its proto (amounts with the currency's
// minor units).
func InvoiceProto(inv domain.Invoice) *ledgerv1.Invoice {
	f := decimal.Decimal.String
	if cur, err := money.Lookup(inv.Currency); err == nil {
		f = cur.Format
	}
	out := &ledgerv1.Invoice{
		InvoiceId: inv.ID, Number: inv.Number, RenterId: inv.RenterID, Currency: inv.Currency, Period: inv.Period,
		TimeZone: inv.TimeZone, PeriodStart: timestamppb.New(inv.PeriodStart), PeriodEnd: timestamppb.New(inv.PeriodEnd),
		IssuedAt: timestamppb.New(inv.IssuedAt), OpeningBalance: f(inv.Opening), Deposits: f(inv.Deposits), Charges: f(inv.Charges),
		Adjustments: f(inv.Adjustments), ClosingBalance: f(inv.Closing), TierDiscounts: f(inv.TierDiscounts), Surcharges: f(inv.Surcharges),
		Lines: []*ledgerv1.InvoiceLine{}, DepositEntries: []*ledgerv1.InvoiceDeposit{},
	}
	for _, l := range inv.Lines {
		out.Lines = append(out.Lines, &ledgerv1.InvoiceLine{Kind: l.Kind, GpuModel: l.GPUModel, Band: l.Band, Tier: l.Tier,
			GpuHours: l.GPUHours.String(), Amount: f(l.Amount), TierDiscount: f(l.TierDiscount)})
	}
	for _, d := range inv.DepositEntries {
		out.DepositEntries = append(out.DepositEntries, &ledgerv1.InvoiceDeposit{TransactionId: d.TransactionID,
			PostedAt: timestamppb.New(d.PostedAt), Amount: f(d.Amount), Reference: d.Reference})
	}
	return out
}
