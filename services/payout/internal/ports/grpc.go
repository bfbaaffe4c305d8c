// Package ports holds payout's gRPC handlers and its consumer of
// settlement.settled.*.
package ports

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

const (
	pageSizeDefault = 50
	pageSizeMax     = 500
	answerReadMax   = 5 * time.Second // reading a committed write's answer (committedPayout)
)

// Server implements PayoutService.
type Server struct {
	payoutv1.UnimplementedPayoutServiceServer
	Store app.Store
	App   *app.Payouts // finance's cancel and retry
	Clock clock.Clock
	Flow  *Workflows // wakes workflows after a gate change; nil in tests without Temporal
	// Webhooks checks a webhook's URL at creation.
	Webhooks WebhookGuard
	// Bank is the bank-file rail's batches and imports.
	Bank app.BankFiles
	// Defaults are the payout settings' environment defaults.
	Defaults Defaults
	// Epoch is the payout schema's restore epoch (pkg/pg.RestoreEpoch),
	// in every ETag.
	Epoch string
}

func fmtAmt(cur string, d decimal.Decimal) string {
	if c, err := money.Lookup(cur); err == nil {
		return c.Format(d)
	}
	return d.String()
}

func toProto(p domain.Payout) *payoutv1.Payout {
	out := &payoutv1.Payout{PayoutId: p.ID, ProviderId: p.ProviderID, CycleId: p.CycleID, Status: p.Status,
		Gross: fmtAmt(p.Currency, p.Gross), Commission: fmtAmt(p.Currency, p.Commission), TaxWithheld: fmtAmt(p.Currency, p.Tax),
		Net: fmtAmt(p.Currency, p.Net), Currency: p.Currency, Method: p.Method, FailureCode: p.FailureCode,
		CreatedAt: timestamppb.New(p.CreatedAt), UpdatedAt: timestamppb.New(p.UpdatedAt), RailReference: p.RailRef,
		StatusReason: p.Reason, FailureMessage: p.FailureMessage, Attempt: int32(p.Attempt), MethodSummary: p.MethodSum,
		AbsorbedInto: p.AbsorbedInto}
	if p.ExpectedArrival != nil {
		out.ExpectedArrivalDate = p.ExpectedArrival.Format(time.DateOnly)
	}
	for _, c := range p.History {
		out.StatusHistory = append(out.StatusHistory, &payoutv1.PayoutStatusChange{Status: c.Status, At: timestamppb.New(c.At), Note: c.Note})
	}
	for _, st := range p.Statements {
		out.Statements = append(out.Statements, &payoutv1.PayoutStatement{CycleId: st.CycleID, Currency: st.Currency, Net: fmtAmt(st.Currency, st.Net)})
	}
	return out
}

// Conditional GET (DESIGN §7: providers poll cheaply). The
// gateway forwards If-None-Match as grpcgateway-if-none-match; an answer
// carries its ETag in the "etag" header, and "gpubill-not-modified" when
// the client's copy is current (pkg/server turns both into ETag and 304).
const (
	mdIfNoneMatch      = "if-none-match"
	mdGatewayNoneMatch = "grpcgateway-if-none-match"
	mdETag             = "etag"
	mdNotModified      = "gpubill-not-modified"
)

// ifNoneMatch returns the client's If-None-Match, "" when none.
func ifNoneMatch(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, k := range []string{mdGatewayNoneMatch, mdIfNoneMatch} {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// etagMatches reports whether an If-None-Match value names tag (a list, or *).
func etagMatches(header, tag string) bool {
	for _, v := range strings.Split(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == tag || v == "*" {
			return true
		}
	}
	return false
}

// conditional sets the answer's ETag and reports whether the client's copy
// is current (the handler then answers empty, marked not modified).
func conditional(ctx context.Context, tag string) bool {
	fresh := etagMatches(ifNoneMatch(ctx), tag)
	pairs := []string{mdETag, tag}
	if fresh {
		pairs = append(pairs, mdNotModified, "1")
	}
	grpc.SetHeader(ctx, metadata.Pairs(pairs...)) // only fails outside a gRPC call (tests calling the handler)
	return fresh
}

// GetPayout implements PayoutService. Providers see only their own; another's
// payout is answered as not found. Polls are served from the store's cache
// of payouts (no database round trip once a payout is cached); the ETag is
// the payout's version and the schema's restore epoch.
func (s *Server) GetPayout(ctx context.Context, req *payoutv1.GetPayoutRequest) (*payoutv1.GetPayoutResponse, error) {
	p, err := s.Store.PollPayout(ctx, req.PayoutId)
	if err != nil {
		return nil, err
	}
	if err := auth.CheckOwner(ctx, auth.RoleProvider, p.ProviderID); err != nil {
		return nil, fmt.Errorf("payout %s: %w", req.PayoutId, apperr.ErrNotFound)
	}
	if conditional(ctx, payoutETag(p.ID, p.Version, s.Epoch)) {
		return &payoutv1.GetPayoutResponse{}, nil
	}
	return &payoutv1.GetPayoutResponse{Payout: toProto(p)}, nil
}

// payoutETag is `"<payout id>.<version>.r<restore epoch>"`: versions
// restart from a snapshot's at a restore, the epoch does not repeat.
func payoutETag(id string, version int64, epoch string) string {
	b := make([]byte, 0, len(id)+len(epoch)+26)
	b = append(b, '"')
	b = append(b, id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, version, 10)
	b = append(b, ".r"...)
	b = append(b, epoch...)
	return string(append(b, '"'))
}

// payoutsListing names the provider payout listing in its page tokens
// (pkg/cursor). A token is the last payout served, its creation time and
// id: a token of the listing by id alone (one value, before payouts listed
// newest created first) is refused as malformed, a 400 on page_token. It
// cannot be read as a position of this order: the payouts before it by id
// are not those before it by creation, so the client would miss some and
// see others twice.
const payoutsListing = "payout.payouts"

// ListProviderPayouts implements PayoutService.
func (s *Server) ListProviderPayouts(ctx context.Context, req *payoutv1.ListProviderPayoutsRequest) (*payoutv1.ListProviderPayoutsResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	if req.Status != "" && !domain.ValidStatus(req.Status) {
		return nil, apperr.Invalid("status", "want one of %s", strings.Join(domain.Statuses(), ", "))
	}
	listing := cursor.Scoped(payoutsListing, req.ProviderId, req.CycleId, req.Status)
	var before app.PayoutsPosition
	if req.PageToken != "" {
		pos, err := cursor.Decode(listing, req.PageToken, 2)
		if err != nil {
			return nil, err
		}
		if before.CreatedAt, err = pos.Time(0); err != nil {
			return nil, err
		}
		if before.ID = pos.String(1); before.ID == "" {
			return nil, cursor.Malformed()
		}
	}
	n := pageSizeDefault
	if req.PageSize > 0 {
		n = min(int(req.PageSize), pageSizeMax)
	}
	count, versions, err := s.Store.ListVersion(ctx, req.ProviderId)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%s|%s|%s|%d|%d|%d|%s", req.ProviderId, req.CycleId, req.Status,
		cursor.FormatTime(before.CreatedAt), before.ID, n, count, versions, s.Epoch))
	if conditional(ctx, `"l.`+hex.EncodeToString(h[:12])+`"`) {
		return &payoutv1.ListProviderPayoutsResponse{}, nil
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
		last := ps[len(ps)-1]
		resp.NextPageToken = cursor.Encode(listing, cursor.FormatTime(last.CreatedAt), last.ID)
	}
	return resp, nil
}

func methodProto(m domain.ProviderMethod) *payoutv1.PayoutMethod {
	mm := m.Masked()
	return &payoutv1.PayoutMethod{ProviderId: m.ProviderID, Type: mm.Type, AccountName: mm.AccountName, AccountNumber: mm.AccountNumber,
		AlipayId: mm.AlipayID, WechatOpenid: mm.WechatOpenID, BankCode: mm.BankCode, UpdatedAt: timestamppb.New(m.UpdatedAt)}
}

// PutPayoutMethod implements PayoutService: validated, kept in the method
// history, answered masked with the payouts already submitted, which still
// go to the previous method; payouts waiting for a method wake up.
func (s *Server) PutPayoutMethod(ctx context.Context, req *payoutv1.PutPayoutMethodRequest) (*payoutv1.PutPayoutMethodResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	dm := domain.Method{Type: req.Type, AccountName: req.AccountName, AccountNumber: req.AccountNumber, AlipayID: req.AlipayId,
		WechatOpenID: req.WechatOpenid, BankCode: req.BankCode}.Normalized()
	var v apperr.Validator
	checkProviderID(&v, req.ProviderId)
	for _, bad := range dm.Validate() {
		v.Add(bad.Field, "%s", bad.Reason)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	m, changed, inFlight, err := s.Store.PutMethod(ctx, domain.ProviderMethod{ProviderID: req.ProviderId, Method: dm, UpdatedAt: s.Clock.Now()})
	if err != nil {
		return nil, err
	}
	if changed {
		s.wakeProvider(ctx, req.ProviderId)
	}
	pm := methodProto(m)
	pm.PayoutsToPreviousMethod = inFlight
	return &payoutv1.PutPayoutMethodResponse{PayoutMethod: pm}, nil
}

// GetPayoutMethod implements PayoutService (masked, with its changes).
func (s *Server) GetPayoutMethod(ctx context.Context, req *payoutv1.GetPayoutMethodRequest) (*payoutv1.GetPayoutMethodResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	m, err := s.Store.GetMethod(ctx, req.ProviderId)
	if err != nil {
		return nil, err
	}
	hist, err := s.Store.MethodHistory(ctx, req.ProviderId)
	if err != nil {
		return nil, err
	}
	resp := &payoutv1.GetPayoutMethodResponse{PayoutMethod: methodProto(m)}
	for _, h := range hist {
		resp.History = append(resp.History, &payoutv1.PayoutMethodChange{Summary: h.Note, At: timestamppb.New(h.At)})
	}
	return resp, nil
}

// PutKyc implements PayoutService. A provider may not verify itself, nor
// set its KYC over finance's rejection. A rejection stops the provider's
// payouts as a hold does (Store.PutKYC): the answer names those it stops
// and those already in flight, which it cannot recall.
func (s *Server) PutKyc(ctx context.Context, req *payoutv1.PutKycRequest) (*payoutv1.PutKycResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var v apperr.Validator
	checkProviderID(&v, req.ProviderId)
	switch req.Status {
	case domain.KYCVerified, domain.KYCRejected, domain.KYCPending:
	default:
		v.Add("status", "want verified, rejected or pending")
	}
	p, ok := auth.FromContext(ctx)
	byProvider := ok && p.Role == auth.RoleProvider
	if byProvider && req.Status != domain.KYCPending {
		v.Add("status", "a provider may only submit its KYC (pending); finance verifies it")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	now := s.Clock.Now()
	waiting, inFlight, err := s.Store.PutKYC(ctx, req.ProviderId, req.Status, req.Reference, byProvider, now)
	if err != nil {
		return nil, err
	}
	switch {
	case s.Flow == nil:
	case req.Status == domain.KYCRejected || len(waiting) > 0:
		// As a hold: those at the gate and those whose bank transfer is
		// queued (held, or released with its date), not only the former
		// (wakeProvider).
		s.Flow.Wake(context.WithoutCancel(ctx), waiting...)
	default:
		s.wakeProvider(ctx, req.ProviderId)
	}
	return &payoutv1.PutKycResponse{Kyc: &payoutv1.Kyc{ProviderId: req.ProviderId, Status: req.Status, Reference: req.Reference,
		UpdatedAt: timestamppb.New(now), PayoutsWaiting: waiting, PayoutsInFlight: inFlight}}, nil
}

func (s *Server) wakeProvider(ctx context.Context, provider string) {
	if s.Flow != nil {
		s.Flow.WakeProvider(context.WithoutCancel(ctx), provider)
	}
}

// CancelPayout implements PayoutService: before submission, or while the
// payout's bank transfer waits in the bank-file queue (app.Payouts.Cancel).
func (s *Server) CancelPayout(ctx context.Context, req *payoutv1.CancelPayoutRequest) (*payoutv1.CancelPayoutResponse, error) {
	if err := checkReason(req.Reason); err != nil {
		return nil, err
	}
	err := s.App.Cancel(ctx, req.PayoutId, req.Reason)
	var unposted *app.CanceledUnpostedError
	if s.Flow != nil && (err == nil || errors.As(err, &unposted)) {
		// Canceled: woken, its workflow ends, posting the return to
		// available of one canceled in the queue if Cancel could not (the
		// ledger down) as soon as the ledger answers, not on its next rail
		// poll (up to PollMax).
		s.Flow.Wake(context.WithoutCancel(ctx), req.PayoutId)
	}
	if err != nil {
		return nil, err
	}
	p, err := s.committedPayout(ctx, req.PayoutId)
	if err != nil {
		return nil, err
	}
	return &payoutv1.CancelPayoutResponse{Payout: toProto(p)}, nil
}

// RetryPayout implements PayoutService: a failed or returned payout goes
// again as a new attempt (new rail reference), once the provider's payout
// method changed after it failed.
func (s *Server) RetryPayout(ctx context.Context, req *payoutv1.RetryPayoutRequest) (*payoutv1.RetryPayoutResponse, error) {
	if err := checkReason(req.Reason); err != nil {
		return nil, err
	}
	err := s.App.Retry(ctx, req.PayoutId, req.Reason)
	if err != nil {
		return nil, err
	}
	if s.Flow != nil {
		s.Flow.Nudge()
	}
	p, err := s.committedPayout(ctx, req.PayoutId)
	if err != nil {
		return nil, err
	}
	return &payoutv1.RetryPayoutResponse{Payout: toProto(p)}, nil
}

// SettlePayoutOutside implements PayoutService (finance): a failed or
// returned payout finance paid by hand, naming the ledger transaction that
// paid it, is final (settled_outside).
func (s *Server) SettlePayoutOutside(ctx context.Context, req *payoutv1.SettlePayoutOutsideRequest) (*payoutv1.SettlePayoutOutsideResponse, error) {
	if err := checkReason(req.Reason); err != nil {
		return nil, err
	}
	o := app.OutsideSettlement{PayoutID: req.PayoutId, Reason: req.Reason, By: actor(ctx)}
	switch {
	case req.TransactionId != "" && len(req.TransactionIds) > 0:
		return nil, apperr.Invalid("transaction_ids", "give transaction_id (one transaction paid the net) or transaction_ids (several did), not both")
	case len(req.TransactionIds) > app.SettleOutsideTransactionsMax:
		return nil, apperr.Invalid("transaction_ids", "at most %d transactions", app.SettleOutsideTransactionsMax)
	case len(req.TransactionIds) > 0:
		for _, id := range req.TransactionIds {
			txID, err := uuid.Parse(id)
			if err != nil || len(id) != uuidLen {
				return nil, apperr.Invalid("transaction_ids", "each the id of a ledger transaction that paid part of the net (a UUID)")
			}
			o.TransactionIDs = append(o.TransactionIDs, txID.String())
		}
	default:
		txID, err := uuid.Parse(req.TransactionId)
		if err != nil || len(req.TransactionId) != uuidLen {
			return nil, apperr.Invalid("transaction_id", "required: the id of the ledger transaction that paid the net (a UUID)")
		}
		o.TransactionID = txID.String()
	}
	// Their canonical form: the claim is unique on it, and one upper-cased
	// named the same entry again for another payout (or twice in the list:
	// the app refuses a duplicate).
	p, err := s.App.SettleOutside(ctx, o)
	if err != nil {
		return nil, err
	}
	return &payoutv1.SettlePayoutOutsideResponse{Payout: toProto(p)}, nil
}

// uuidLen is a ledger transaction id's length, in its canonical form (the
// one the ledger answers and the claim is unique on).
const uuidLen = 36

// committedPayout reads, for its answer, the payout a write (a cancel, a
// retry) has committed a change to, with a context its caller's leaving
// does not end (bounded by answerReadMax): read with the caller's, a
// caller that left just after the commit was answered its context's error,
// and the audit log, which records the answer's code, read as if nothing
// had changed.
func (s *Server) committedPayout(ctx context.Context, id string) (domain.Payout, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), answerReadMax)
	defer cancel()
	return s.Store.GetPayout(rctx, id)
}

// ResolvePayoutAmountMismatch implements PayoutService (finance): the
// resolution of a payout flagged rail_amount_mismatch is recorded, nothing
// posted; its workflow, woken, takes the rail's amount as resolved and
// records the payout paid (the paid posting its own), then ends after the
// return window. The answer is the payout as the resolution left it
// (usually still submitted): not woken (Temporal unreachable), the
// workflow's next rail poll records it paid.
func (s *Server) ResolvePayoutAmountMismatch(ctx context.Context, req *payoutv1.ResolvePayoutAmountMismatchRequest) (*payoutv1.ResolvePayoutAmountMismatchResponse, error) {
	if err := checkReason(req.Reason); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.RailAmount) == "" {
		return nil, apperr.Invalid("rail_amount", "required: the amount the rail's bill shows under the payout's reference")
	}
	// Bounded before it is parsed (money.ParseDecimal): a rail_amount of a
	// million digits cost 6 s of CPU and came back whole in the 409, and
	// one of 5 000 decimals was named in it as "0.00 CNY".
	amount, err := money.ParseDecimal(req.RailAmount)
	if err != nil {
		return nil, apperr.Invalid("rail_amount", "a decimal amount of at most %d characters, as the rail's bill shows it", money.DecimalCharsMax)
	}
	p, err := s.App.ResolveRailAmountMismatch(ctx, app.RailAmountResolution{PayoutID: req.PayoutId, RailAmount: amount,
		Reason: req.Reason, By: actor(ctx)})
	if err != nil {
		return nil, err
	}
	if s.Flow != nil {
		s.Flow.Wake(context.WithoutCancel(ctx), req.PayoutId)
	}
	return &payoutv1.ResolvePayoutAmountMismatchResponse{Payout: toProto(p)}, nil
}

// HoldProviderPayouts implements PayoutService: the provider's payouts not
// yet past the gate wait (or, released, go on), and so do its bank
// transfers queued for a cutoff (the cut leaves them out); the answer
// counts those past it, being submitted or sent, which the hold does not
// stop.
func (s *Server) HoldProviderPayouts(ctx context.Context, req *payoutv1.HoldProviderPayoutsRequest) (*payoutv1.HoldProviderPayoutsResponse, error) {
	// Its audit record says which, refused or not: a release (an empty
	// reason) deletes the hold's row, and read by its fields alone it was
	// the hold's record again.
	if req.Reason == "" {
		audit.Note(ctx, "action=release")
	} else {
		audit.Note(ctx, "action=hold")
	}
	if err := ids.CheckPartyID(req.ProviderId); err != nil {
		// "p-001 " was held with a 200, holding no one: p-001 was paid
		// during its dispute.
		return nil, apperr.Invalid("provider_id", "%v", err)
	}
	if err := checkReason(req.Reason); err != nil {
		return nil, err
	}
	waiting, inFlight, err := s.Store.PutHold(ctx, req.ProviderId, req.Reason, s.Clock.Now())
	if err != nil {
		return nil, err
	}
	if s.Flow != nil {
		s.Flow.Wake(context.WithoutCancel(ctx), waiting...)
	}
	return &payoutv1.HoldProviderPayoutsResponse{ProviderId: req.ProviderId, Reason: req.Reason,
		PayoutsWaiting: int32(len(waiting)), PayoutsInFlight: int32(len(inFlight))}, nil
}

// checkProviderID adds a violation on provider_id for an id outside the
// grammar (ids.CheckPartyID): a method, a KYC status or a webhook stored
// under "p-001 " reached no provider, and answered 200.
func checkProviderID(v *apperr.Validator, id string) {
	if err := ids.CheckPartyID(id); err != nil {
		v.Add("provider_id", "%v", err)
	}
}

// checkReason refuses a reason finance gives a payout write that its
// history could not keep whole (domain.ReasonLenMax bytes of UTF-8).
func checkReason(reason string) error {
	if len(reason) > domain.ReasonLenMax || !utf8.ValidString(reason) {
		return apperr.Invalid("reason", "at most %d bytes of UTF-8", domain.ReasonLenMax)
	}
	return nil
}
