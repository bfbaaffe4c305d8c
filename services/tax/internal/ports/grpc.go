// Package ports holds the tax service's gRPC handlers and its party consumer.
package ports

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
	"github.com/gpubill/gpubill/services/tax/internal/app"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

const (
	pageSizeDefault = 50
	pageSizeMax     = 500
	// certificateCurrenciesMax bounds the withholdings read for a
	// certificate: one per currency of the provider's cycle.
	certificateCurrenciesMax = 1000
)

// withholdingsListing and remittancesListing name the listings in their
// page tokens (pkg/cursor).
const (
	withholdingsListing = "tax.withholdings"
	remittancesListing  = "tax.remittances"
	rulesListing        = "tax.rules"
)

// Server implements TaxService.
type Server struct {
	taxv1.UnimplementedTaxServiceServer
	App *app.App
}

func fmtAmt(cur string, d decimal.Decimal) string {
	if c, err := money.Lookup(cur); err == nil {
		return c.Format(d)
	}
	return d.String()
}

func toProto(w domain.Withholding) *taxv1.TaxWithholding {
	return &taxv1.TaxWithholding{
		WithholdingId: w.ID, ProviderId: w.ProviderID, CycleId: w.CycleID, Currency: w.Currency,
		Gross: fmtAmt(w.Currency, w.Gross), Commission: fmtAmt(w.Currency, w.Commission),
		TaxableBase: fmtAmt(w.Currency, w.TaxableBase), TaxWithheld: fmtAmt(w.Currency, w.Tax),
		TaxProfile: w.TaxProfile, Jurisdiction: w.Jurisdiction, RuleSet: w.RuleSet, RuleVersion: w.RuleVersion,
		CreatedAt: timestamppb.New(w.CreatedAt),
	}
}

// ComputeWithholding implements TaxService (internal: settlement's activities).
func (s *Server) ComputeWithholding(ctx context.Context, req *taxv1.ComputeWithholdingRequest) (*taxv1.ComputeWithholdingResponse, error) {
	var closedAt time.Time
	if req.ClosedAt != nil {
		closedAt = req.ClosedAt.AsTime()
	}
	w, err := s.App.ComputeWithholding(ctx, app.WithholdingRequest{
		ProviderID: req.ProviderId, CycleID: req.CycleId, Currency: req.Currency, Gross: req.Gross,
		CommissionRate: req.CommissionRate, Commission: req.Commission, TaxProfile: req.TaxProfile,
		Jurisdiction: req.Jurisdiction, RuleSet: req.RuleSet, IdempotencyKey: req.IdempotencyKey, ClosedAt: closedAt,
	})
	if err != nil {
		return nil, err
	}
	return &taxv1.ComputeWithholdingResponse{
		TaxWithheld: fmtAmt(w.Currency, w.Tax), RuleSet: w.RuleSet, RuleVersion: w.RuleVersion,
		TaxableBase: fmtAmt(w.Currency, w.TaxableBase), WithholdingId: w.ID, Currency: w.Currency,
		Commission: fmtAmt(w.Currency, w.Commission), Net: fmtAmt(w.Currency, w.Net), TaxProfile: w.TaxProfile,
		Jurisdiction: w.Jurisdiction, CertificateId: w.CertificateID,
	}, nil
}

func pageSize(n int32) int {
	if n <= 0 {
		return pageSizeDefault
	}
	return min(int(n), pageSizeMax)
}

// ListTaxWithholdings implements TaxService. Providers see only their own.
func (s *Server) ListTaxWithholdings(ctx context.Context, req *taxv1.ListTaxWithholdingsRequest) (*taxv1.ListTaxWithholdingsResponse, error) {
	if req.ProviderId == "" {
		return nil, apperr.Invalid("provider_id", "required")
	}
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var afterCycle, afterCurrency string
	if req.PageToken != "" {
		pos, err := cursor.Decode(cursor.Scoped(withholdingsListing, req.ProviderId, req.CycleId), req.PageToken, 2)
		if err != nil {
			return nil, err
		}
		afterCycle, afterCurrency = pos.String(0), pos.String(1)
	}
	n := pageSize(req.PageSize)
	ws, err := s.App.Store.Withholdings(ctx, req.ProviderId, req.CycleId, afterCycle, afterCurrency, n)
	if err != nil {
		return nil, err
	}
	resp := &taxv1.ListTaxWithholdingsResponse{}
	for _, w := range ws {
		resp.TaxWithholdings = append(resp.TaxWithholdings, toProto(w))
	}
	// A full page may end inside a cycle (one withholding per currency): the
	// token holds the last one's cycle and currency.
	if len(ws) == n {
		last := ws[len(ws)-1]
		resp.NextPageToken = cursor.Encode(cursor.Scoped(withholdingsListing, req.ProviderId, req.CycleId), last.CycleID, last.Currency)
	}
	return resp, nil
}

// GetWithholdingCertificate implements TaxService.
func (s *Server) GetWithholdingCertificate(ctx context.Context, req *taxv1.GetWithholdingCertificateRequest) (*taxv1.GetWithholdingCertificateResponse, error) {
	// Ownership first: another provider learns nothing, not even which fields it got wrong.
	if err := auth.CheckOwner(ctx, auth.RoleProvider, req.ProviderId); err != nil {
		return nil, err
	}
	var v apperr.Validator
	v.Check(req.ProviderId != "", "provider_id", "required")
	v.Check(req.CycleId != "", "cycle_id", "required")
	currency := strings.ToUpper(strings.TrimSpace(req.Currency))
	if currency != "" {
		// As every listing's ?currency=: " jpy" and "XYZ" were a 404.
		if _, err := money.Lookup(currency); err != nil {
			v.Add("currency", "%v", err)
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	// A provider settled in several currencies has a certificate per
	// currency: only the first (CNY before USD) was ever answered.
	ws, err := s.App.Store.Withholdings(ctx, req.ProviderId, req.CycleId, "", "", certificateCurrenciesMax)
	if err != nil {
		return nil, err
	}
	if currency != "" {
		ws = slices.DeleteFunc(ws, func(w domain.Withholding) bool { return w.Currency != currency })
	}
	switch {
	case len(ws) == 0 && currency != "":
		return nil, apperr.ToStatus(wrapNotFound("no " + currency + " withholding for " + req.ProviderId + " in " + req.CycleId))
	case len(ws) == 0:
		return nil, apperr.ToStatus(wrapNotFound("no withholding for " + req.ProviderId + " in " + req.CycleId))
	case len(ws) > 1:
		have := make([]string, len(ws))
		for i, w := range ws {
			have[i] = w.Currency
		}
		return nil, apperr.Invalid("currency", "%s was settled in %s in %s, a certificate each: name one (?currency=%s)",
			req.ProviderId, strings.Join(have, ", "), req.CycleId, have[0])
	}
	w := ws[0]
	return &taxv1.GetWithholdingCertificateResponse{Certificate: &taxv1.WithholdingCertificate{
		CertificateId: w.CertificateID, WithholdingId: w.ID, ProviderId: w.ProviderID, CycleId: w.CycleID, Currency: w.Currency,
		Gross: fmtAmt(w.Currency, w.Gross), Commission: fmtAmt(w.Currency, w.Commission), TaxableBase: fmtAmt(w.Currency, w.TaxableBase),
		TaxWithheld: fmtAmt(w.Currency, w.Tax), TaxProfile: w.TaxProfile, Jurisdiction: w.Jurisdiction, RuleSet: w.RuleSet,
		RuleVersion: w.RuleVersion, IssuedAt: timestamppb.New(w.CreatedAt),
	}}, nil
}

type notFound string

func (e notFound) Error() string  { return string(e) }
func (e notFound) Unwrap() error  { return apperr.ErrNotFound }
func wrapNotFound(s string) error { return notFound(s) }

// ListTaxRules implements TaxService: the versions, with the parameters of
// their rule set.
func (s *Server) ListTaxRules(ctx context.Context, req *taxv1.ListTaxRulesRequest) (*taxv1.ListTaxRulesResponse, error) {
	jurisdiction := strings.ToUpper(req.Jurisdiction)
	rules, err := s.App.Store.Rules(ctx, req.RuleSet, jurisdiction)
	if err != nil {
		return nil, err
	}
	// A handful of rules (migrations seed them): paged over the whole list,
	// as page_size and page_token say (both were ignored).
	listing := cursor.Scoped(rulesListing, req.RuleSet, jurisdiction)
	if req.PageToken != "" {
		pos, err := cursor.Decode(listing, req.PageToken, 2)
		if err != nil {
			return nil, err
		}
		at := slices.IndexFunc(rules, func(r domain.Rule) bool { return r.RuleSet == pos.String(0) && r.Version == pos.String(1) })
		if at < 0 {
			return nil, cursor.Malformed()
		}
		rules = rules[at+1:]
	}
	resp := &taxv1.ListTaxRulesResponse{}
	if n := pageSize(req.PageSize); len(rules) > n {
		rules = rules[:n]
		resp.NextPageToken = cursor.Encode(listing, rules[n-1].RuleSet, rules[n-1].Version)
	}
	for _, r := range rules {
		var until *timestamppb.Timestamp
		if r.EffectiveUntil != nil {
			until = timestamppb.New(*r.EffectiveUntil)
		}
		tr := &taxv1.TaxRule{RuleSet: r.RuleSet, RuleVersion: r.Version, Jurisdiction: r.Jurisdiction, TaxProfile: split.ProfileIndividual,
			EffectiveFrom: timestamppb.New(r.EffectiveFrom), EffectiveUntil: until, Description: r.Description}
		switch r.RuleSet {
		case split.RuleSetFlat20:
			tr.Rate = "0.20"
		case split.RuleSetCNLabour:
			tr.DeductionFixed, tr.DeductionRate, tr.DeductionThreshold = "800", "0.20", "4000"
			tr.Brackets = []*taxv1.TaxBracket{{UpTo: "20000", Rate: "0.20", QuickDeduction: "0"},
				{UpTo: "50000", Rate: "0.30", QuickDeduction: "2000"}, {UpTo: "", Rate: "0.40", QuickDeduction: "7000"}}
		}
		resp.TaxRules = append(resp.TaxRules, tr)
	}
	return resp, nil
}

// SetRuleSelection implements TaxService.
func (s *Server) SetRuleSelection(ctx context.Context, req *taxv1.SetRuleSelectionRequest) (*taxv1.SetRuleSelectionResponse, error) {
	var v apperr.Validator
	j := strings.ToUpper(strings.TrimSpace(req.Jurisdiction))
	v.Check((j == "") != (req.ProviderId == ""), "jurisdiction", "set exactly one of jurisdiction or provider_id")
	if j != "" {
		if err := ids.CheckJurisdiction(j); err != nil {
			v.Add("jurisdiction", "%v", err)
		}
	}
	if req.ProviderId != "" {
		if err := ids.CheckPartyID(req.ProviderId); err != nil {
			v.Add("provider_id", "%v", err)
		}
	}
	_, err := split.RuleFor(req.RuleSet)
	v.Check(err == nil && req.RuleSet != "", "rule_set", "want %s or %s", split.RuleSetFlat20, split.RuleSetCNLabour)
	if err := v.Err(); err != nil {
		return nil, err
	}
	scope := "jurisdiction:" + j
	if req.ProviderId != "" {
		scope = "provider:" + req.ProviderId
	}
	// In force from now: for the cycles that end after it (a cycle's
	// withholdings take the selection in force at its end), never for one
	// that ended and is being settled (its providers split between two
	// rule sets). The rule set already in force, selected again, keeps
	// its day.
	from := s.App.Clock.Now().UTC().Truncate(time.Microsecond)
	from, err = s.App.Store.SetSelection(ctx, scope, req.RuleSet, from)
	if err != nil {
		return nil, err
	}
	resp := &taxv1.SetRuleSelectionResponse{Jurisdiction: j, ProviderId: req.ProviderId, RuleSet: req.RuleSet}
	if !from.IsZero() {
		resp.EffectiveFrom = timestamppb.New(from) // none: in force since always
	}
	return resp, nil
}

func remToProto(r domain.Remittance) *taxv1.TaxRemittance {
	out := &taxv1.TaxRemittance{RemittanceId: r.ID, Period: r.Period, Jurisdiction: r.Jurisdiction, Currency: r.Currency,
		Amount: fmtAmt(r.Currency, r.Amount), Status: r.Status, Reference: r.ID, TransactionId: r.TransactionID,
		CreatedAt: timestamppb.New(r.CreatedAt)}
	if r.RemittedAt != nil {
		out.RemittedAt = timestamppb.New(*r.RemittedAt)
	}
	if r.ReversedAt != nil {
		out.ReversedBy, out.ReversedAt = r.ReversedBy, timestamppb.New(*r.ReversedAt)
	}
	return out
}

// RemitTax implements TaxService.
func (s *Server) RemitTax(ctx context.Context, req *taxv1.RemitTaxRequest) (*taxv1.RemitTaxResponse, error) {
	// ~60 B a line: the schedule (summary_only) reads none, and any other
	// caller one page, the rest by ListRemittanceLines (every line of a
	// marketplace's report in one answer outgrew gRPC's 4 MiB).
	linesMax := pageSizeMax
	if req.SummaryOnly {
		linesMax = 0
	}
	got, err := s.App.RemitTax(ctx, req.Period, linesMax)
	if err != nil {
		return nil, err
	}
	resp := &taxv1.RemitTaxResponse{Period: req.Period, WithholdingsNotPosted: int32(got.NotPosted), LineCount: int32(got.LineCount),
		WithholdingsOutstanding: int32(got.Outstanding)}
	for _, r := range got.Remittances {
		resp.Remittances = append(resp.Remittances, remToProto(r))
	}
	for _, l := range got.Lines {
		resp.Lines = append(resp.Lines, lineToProto(l))
	}
	if n := got.LinesNext; n != nil {
		resp.LinesNextRemittanceId = n.RemittanceID
		if n.AfterProvider != "" {
			resp.LinesNextPageToken = cursor.Encode(cursor.Scoped(remittanceLinesListing, n.RemittanceID), n.AfterProvider)
		}
	}
	return resp, nil
}

func lineToProto(l domain.ReportLine) *taxv1.RemittanceReportLine {
	return &taxv1.RemittanceReportLine{Jurisdiction: l.Jurisdiction, Currency: l.Currency, ProviderId: l.ProviderID,
		TaxWithheld: fmtAmt(l.Currency, l.Tax), Withholdings: int32(l.Count), RemittanceId: l.RemittanceID, Period: l.Period}
}

// remittanceLinesListing names the listing in its page tokens (pkg/cursor).
const remittanceLinesListing = "tax.remittance_lines"

// ListRemittanceLines implements TaxService: one remittance's report lines
// by provider, a page at a time.
func (s *Server) ListRemittanceLines(ctx context.Context, req *taxv1.ListRemittanceLinesRequest) (*taxv1.ListRemittanceLinesResponse, error) {
	id := strings.TrimSpace(req.RemittanceId)
	var v apperr.Validator
	v.Check(id != "", "remittance_id", "required")
	v.Check(req.PageSize >= 0, "page_size", "must not be negative")
	if err := v.Err(); err != nil {
		return nil, err
	}
	listing, after, limit := cursor.Scoped(remittanceLinesListing, id), "", pageSize(req.PageSize)
	if req.PageToken != "" {
		pos, err := cursor.Decode(listing, req.PageToken, 1)
		if err != nil {
			return nil, err
		}
		after = pos.String(0)
	}
	lines, found, err := s.App.Store.ReportPage(ctx, id, after, limit)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, wrapNotFound("remittance " + id + " not found")
	}
	resp := &taxv1.ListRemittanceLinesResponse{Lines: make([]*taxv1.RemittanceReportLine, 0, len(lines))}
	for _, l := range lines {
		resp.Lines = append(resp.Lines, lineToProto(l))
	}
	if len(lines) == limit {
		resp.NextPageToken = cursor.Encode(listing, lines[len(lines)-1].ProviderID)
	}
	return resp, nil
}

// ListRemittances implements TaxService.
func (s *Server) ListRemittances(ctx context.Context, req *taxv1.ListRemittancesRequest) (*taxv1.ListRemittancesResponse, error) {
	f := app.RemittanceFilter{Period: strings.TrimSpace(req.Period), Jurisdiction: strings.ToUpper(strings.TrimSpace(req.Jurisdiction)),
		Currency: strings.ToUpper(strings.TrimSpace(req.Currency)), Limit: pageSize(req.PageSize)}
	var v apperr.Validator
	if f.Period != "" {
		if _, err := s.App.TaxPeriods.Parse(f.Period); err != nil {
			v.Add("period", "%v", err)
		}
	}
	if f.Jurisdiction != "" {
		if err := ids.CheckJurisdiction(f.Jurisdiction); err != nil {
			v.Add("jurisdiction", "%v", err)
		}
	}
	if f.Currency != "" {
		if _, err := money.Lookup(f.Currency); err != nil {
			v.Add("currency", "%v", err)
		}
	}
	v.Check(req.PageSize >= 0, "page_size", "must not be negative")
	if err := v.Err(); err != nil {
		return nil, err
	}
	listing := cursor.Scoped(remittancesListing, f.Period, f.Jurisdiction, f.Currency)
	if req.PageToken != "" {
		pos, err := cursor.Decode(listing, req.PageToken, 4)
		if err != nil {
			return nil, err
		}
		f.After = &domain.Remittance{Period: pos.String(0), Jurisdiction: pos.String(1), Currency: pos.String(2), ID: pos.String(3)}
	}
	rems, err := s.App.Store.Remittances(ctx, f)
	if err != nil {
		return nil, err
	}
	resp := &taxv1.ListRemittancesResponse{}
	for _, r := range rems {
		resp.Remittances = append(resp.Remittances, remToProto(r))
	}
	if len(rems) == f.Limit {
		last := rems[len(rems)-1]
		resp.NextPageToken = cursor.Encode(listing, last.Period, last.Jurisdiction, last.Currency, last.ID)
	}
	return resp, nil
}

// QuoteWithholding implements TaxService (internal: pricing's quotes).
func (s *Server) QuoteWithholding(ctx context.Context, req *taxv1.QuoteWithholdingRequest) (*taxv1.QuoteWithholdingResponse, error) {
	var end time.Time
	if req.UsageEnd != nil {
		end = req.UsageEnd.AsTime()
	}
	q, onRecord, err := s.App.QuoteWithholding(ctx, app.QuoteRequest{Currency: req.Currency, Gross: req.Gross, CommissionRate: req.CommissionRate,
		TaxProfile: req.TaxProfile, Jurisdiction: req.Jurisdiction, UsageEnd: end, ProviderID: req.ProviderId})
	if err != nil {
		return nil, err
	}
	return &taxv1.QuoteWithholdingResponse{Commission: fmtAmt(q.Currency, q.Commission), TaxWithheld: fmtAmt(q.Currency, q.Tax),
		Net: fmtAmt(q.Currency, q.Net), RuleSet: q.RuleSet, RuleVersion: q.RuleVersion, Currency: q.Currency,
		TaxProfile: q.TaxProfile, Jurisdiction: q.Jurisdiction, ProviderOnRecord: onRecord}, nil
}
