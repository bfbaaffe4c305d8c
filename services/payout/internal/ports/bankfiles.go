package ports

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/money"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// bankFileNameLenMax bounds the name an upload is remembered by.
const bankFileNameLenMax = 255

func batchProto(b app.PayoutBatch) *payoutv1.PayoutBatch {
	out := &payoutv1.PayoutBatch{BatchId: b.ID, CutoffAt: timestamppb.New(b.CutoffAt), ExecutionDate: b.ExecutionDate.Format(time.DateOnly),
		Transfers: int32(b.Transfers), FileSha256: b.FileSHA256, CreatedAt: timestamppb.New(b.CreatedAt), DeliveredPath: b.DeliveredPath}
	minor := int32(0)
	for _, t := range b.Totals {
		out.Totals = append(out.Totals, &payoutv1.PayoutBatchTotal{Currency: t.Currency, Transfers: int32(t.Transfers), Amount: fmtAmt(t.Currency, t.Amount)})
		if c, err := money.Lookup(t.Currency); err == nil && c.MinorUnits > minor {
			minor = c.MinorUnits
		}
	}
	out.ControlSum = b.ControlSum.StringFixed(minor)
	if b.DeliveredAt != nil {
		out.DeliveredAt = timestamppb.New(*b.DeliveredAt)
	}
	return out
}

// batchesListing names the payout batch listing in its page tokens (pkg/cursor).
const batchesListing = "payout.batches"

// ListPayoutBatches implements PayoutService (finance).
func (s *Server) ListPayoutBatches(ctx context.Context, req *payoutv1.ListPayoutBatchesRequest) (*payoutv1.ListPayoutBatchesResponse, error) {
	before := ""
	if req.PageToken != "" {
		pos, err := cursor.Decode(batchesListing, req.PageToken, 1)
		if err != nil {
			return nil, err
		}
		before = pos.String(0)
	}
	n := pageSizeDefault
	if req.PageSize > 0 {
		n = min(int(req.PageSize), pageSizeMax)
	}
	bs, err := s.Bank.ListBatches(ctx, before, n)
	if err != nil {
		return nil, err
	}
	resp := &payoutv1.ListPayoutBatchesResponse{}
	for _, b := range bs {
		resp.Batches = append(resp.Batches, batchProto(b))
	}
	if len(bs) == n {
		resp.NextPageToken = cursor.Encode(batchesListing, bs[len(bs)-1].ID)
	}
	return resp, nil
}

// GetPayoutBatch implements PayoutService (finance).
func (s *Server) GetPayoutBatch(ctx context.Context, req *payoutv1.GetPayoutBatchRequest) (*payoutv1.GetPayoutBatchResponse, error) {
	if req.BatchId == "" {
		return nil, apperr.Invalid("batch_id", "required")
	}
	b, err := s.Bank.GetBatch(ctx, req.BatchId)
	if err != nil {
		return nil, err
	}
	return &payoutv1.GetPayoutBatchResponse{Batch: batchProto(b)}, nil
}

// GetPayoutBatchFile implements PayoutService (finance): the pain.001 raw.
func (s *Server) GetPayoutBatchFile(ctx context.Context, req *payoutv1.GetPayoutBatchFileRequest) (*httpbody.HttpBody, error) {
	if req.BatchId == "" {
		return nil, apperr.Invalid("batch_id", "required")
	}
	b, err := s.Bank.BatchFile(ctx, req.BatchId)
	if err != nil {
		return nil, err
	}
	return &httpbody.HttpBody{ContentType: "application/xml", Data: b}, nil
}

// ImportBankFile implements PayoutService (finance): a pain.002 or
// camt.054, applied once; malformed is a 400 naming the element.
func (s *Server) ImportBankFile(ctx context.Context, req *payoutv1.ImportBankFileRequest) (*payoutv1.ImportBankFileResponse, error) {
	if strings.TrimSpace(req.Content) == "" {
		return nil, apperr.Invalid("content", "required: the XML file as the request body (content-type application/xml)")
	}
	if len(req.Name) > bankFileNameLenMax || !utf8.ValidString(req.Name) {
		return nil, apperr.Invalid("name", "at most %d bytes of UTF-8", bankFileNameLenMax)
	}
	rep, err := s.Bank.Import(ctx, app.SourceUpload, req.Name, []byte(req.Content))
	var me *iso20022.MalformedError
	if errors.As(err, &me) {
		field := me.Element
		if field == "" {
			field = "content"
		}
		return nil, apperr.Invalid(field, "%s", me.Reason)
	}
	if err != nil {
		return nil, err
	}
	resp := &payoutv1.ImportBankFileResponse{FileId: rep.FileID, Kind: rep.Kind, MessageId: rep.MessageID, OriginalMessageId: rep.OriginalMessageID,
		Duplicate: rep.Duplicate, ImportedAt: timestamppb.New(rep.ImportedAt)}
	for _, e := range rep.Entries {
		resp.Entries = append(resp.Entries, &payoutv1.BankFileEntry{Element: e.Element, EndToEndId: e.EndToEndID, PayoutReference: e.PayoutRef,
			BankStatus: e.BankStatus, ReasonCode: e.ReasonCode, Outcome: e.Outcome, Note: e.Note})
		switch {
		case e.Outcome == app.EntryApplied:
			resp.Applied++
		case app.EntryNotApplied(e.Outcome):
			resp.NotApplied++
		}
	}
	return resp, nil
}

func holdProto(h app.BankFileHold) *payoutv1.BankFileRestoreHold {
	out := &payoutv1.BankFileRestoreHold{Held: h.Held(), ReleasedBy: h.ReleasedBy,
		QueuedTransfers: int32(h.QueuedTransfers), UndeliveredBatches: int32(h.UndeliveredBatches), ReviewTransfers: int32(h.ReviewTransfers)}
	for _, v := range h.InReview {
		out.InReview = append(out.InReview, reviewProto(v))
	}
	if !h.HeldSince.IsZero() {
		out.HeldSince = timestamppb.New(h.HeldSince)
	}
	if h.ReleasedAt != nil {
		out.ReleasedAt = timestamppb.New(*h.ReleasedAt)
	}
	return out
}

// GetBankFileRestoreHold implements PayoutService (finance).
func (s *Server) GetBankFileRestoreHold(ctx context.Context, _ *payoutv1.GetBankFileRestoreHoldRequest) (*payoutv1.GetBankFileRestoreHoldResponse, error) {
	h, err := s.Bank.RestoreHold(ctx)
	if err != nil {
		return nil, err
	}
	return &payoutv1.GetBankFileRestoreHoldResponse{Hold: holdProto(h)}, nil
}

// ReleaseBankFileRestoreHold implements PayoutService (finance):
// idempotent, a second release answers the first.
func (s *Server) ReleaseBankFileRestoreHold(ctx context.Context, _ *payoutv1.ReleaseBankFileRestoreHoldRequest) (*payoutv1.ReleaseBankFileRestoreHoldResponse, error) {
	h, err := s.Bank.ReleaseRestoreHold(ctx, actor(ctx))
	if err != nil {
		return nil, err
	}
	return &payoutv1.ReleaseBankFileRestoreHoldResponse{Hold: holdProto(h)}, nil
}

func reviewProto(v app.BankTransferReview) *payoutv1.BankTransferReview {
	out := &payoutv1.BankTransferReview{ReviewId: v.ReviewID, EndToEndId: v.EndToEndID, PayoutReference: v.Reference, ProviderId: v.ProviderID,
		Amount: fmtAmt(v.Currency, v.Amount), Currency: v.Currency, State: v.State, Cause: v.Cause, Note: v.Note, Since: timestamppb.New(v.Since),
		Resolution: v.Resolution, ResolvedBy: v.ResolvedBy, ResolutionReason: v.ResolutionReason}
	if v.PaidAmount != nil {
		out.PaidAmount = fmtAmt(v.Currency, *v.PaidAmount)
	}
	if v.ResolvedAt != nil {
		out.ResolvedAt = timestamppb.New(*v.ResolvedAt)
	}
	return out
}

// ResolveBankTransfer implements PayoutService (finance): idempotent, the
// same resolution again answers the first.
func (s *Server) ResolveBankTransfer(ctx context.Context, req *payoutv1.ResolveBankTransferRequest) (*payoutv1.ResolveBankTransferResponse, error) {
	res := app.BankTransferResolution{EndToEndID: req.EndToEndId, ReviewID: req.ReviewId, Resolution: req.Resolution, Currency: strings.ToUpper(strings.TrimSpace(req.Currency)),
		Reason: req.Reason, By: actor(ctx)}
	if req.Amount != "" {
		cur, err := money.Lookup(res.Currency)
		if err != nil {
			return nil, apperr.Invalid("currency", "%s", err.Error())
		}
		if res.Amount, err = cur.Parse(req.Amount); err != nil {
			return nil, apperr.Invalid("amount", "%s", err.Error())
		}
	}
	v, err := s.Bank.ResolveTransfer(ctx, res)
	if err != nil {
		return nil, err
	}
	return &payoutv1.ResolveBankTransferResponse{Review: reviewProto(v)}, nil
}

// actor names the caller in an audit trail: role, and subject when it has one.
func actor(ctx context.Context) string {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return "unknown"
	}
	if p.Subject != "" {
		return p.Role + ":" + p.Subject
	}
	return p.Role
}
