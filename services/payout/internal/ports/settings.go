package ports

import (
	"context"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Setting sources in answers.
const (
	sourceAPI     = "api"
	sourceEnv     = "env"
	sourceDefault = "default"
)

const (
	settingChangesShown = 50
	settingReasonLenMax = 500
)

// Defaults is what payout settings fall back to: the environment's
// (GPUBILL_PAYOUT_MINIMUMS over DESIGN §6's, GPUBILL_WEBHOOK_ROTATION_GRACE).
type Defaults struct {
	Minimums      domain.Minimums
	Grace         time.Duration
	GraceFromEnv  bool
	MinimumsInEnv map[string]bool // currencies GPUBILL_PAYOUT_MINIMUMS names
}

// GetPayoutSettings implements PayoutService.
func (s *Server) GetPayoutSettings(ctx context.Context, _ *payoutv1.GetPayoutSettingsRequest) (*payoutv1.GetPayoutSettingsResponse, error) {
	out, err := s.settings(ctx)
	if err != nil {
		return nil, err
	}
	return &payoutv1.GetPayoutSettingsResponse{Settings: out}, nil
}

func (s *Server) settings(ctx context.Context) (*payoutv1.PayoutSettings, error) {
	set, err := s.Store.Settings(ctx)
	if err != nil {
		return nil, err
	}
	mins, err := s.Defaults.Minimums.With(set)
	if err != nil {
		return nil, err
	}
	out := &payoutv1.PayoutSettings{}
	curs := make([]string, 0, len(mins))
	for c := range mins {
		curs = append(curs, c)
	}
	slices.Sort(curs)
	for _, c := range curs {
		src := sourceDefault
		switch {
		case set[domain.SettingMinimumPrefix+c] != "":
			src = sourceAPI
		case s.Defaults.MinimumsInEnv[c]:
			src = sourceEnv
		}
		out.Minimums = append(out.Minimums, &payoutv1.PayoutMinimum{Currency: c, Amount: fmtAmt(c, mins[c]), Source: src})
	}
	grace, src := s.rotationGraceFrom(set)
	out.WebhookRotationGrace, out.WebhookRotationGraceSource = grace.String(), src
	changes, err := s.Store.SettingChanges(ctx, settingChangesShown)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		out.Changes = append(out.Changes, &payoutv1.PayoutSettingChange{Setting: c.Setting, OldValue: c.Old, NewValue: c.New,
			Actor: c.Actor, Reason: c.Reason, At: timestamppb.New(c.At)})
	}
	return out, nil
}

// rotationGraceFrom is the default grace period of a webhook secret
// rotation, and where it comes from. A stored value that no longer parses
// is not used (the environment's is), and says so in its source.
func (s *Server) rotationGraceFrom(set map[string]string) (time.Duration, string) {
	if v := set[domain.SettingWebhookRotationGrace]; v != "" {
		if d, err := domain.ParseGrace(v); err == nil {
			return d, sourceAPI
		}
	}
	g, src := s.Defaults.Grace, sourceDefault
	if g == 0 && !s.Defaults.GraceFromEnv {
		g = webhookGraceDefault
	}
	if s.Defaults.GraceFromEnv {
		src = sourceEnv
	}
	return g, src
}

// rotationGrace is how long a rotated-out secret keeps signing by default.
func (s *Server) rotationGrace(ctx context.Context) (time.Duration, error) {
	set, err := s.Store.Settings(ctx)
	if err != nil {
		return 0, err
	}
	g, _ := s.rotationGraceFrom(set)
	return g, nil
}

// UpdatePayoutSettings implements PayoutService: validated whole before
// anything is written; the changes and who made them are kept; payouts
// waiting in a currency whose minimum changed are woken to be gated again.
func (s *Server) UpdatePayoutSettings(ctx context.Context, req *payoutv1.UpdatePayoutSettingsRequest) (*payoutv1.UpdatePayoutSettingsResponse, error) {
	var v apperr.Validator
	changes := map[string]string{}
	var currencies []string
	for cur, amt := range req.Minimums {
		field := "minimums." + cur
		c, err := money.Lookup(cur)
		if err != nil || c.Code != cur {
			v.Add(field, "unknown currency (want an ISO 4217 code gpubill knows, upper case)")
			continue
		}
		if amt = strings.TrimSpace(amt); amt != "" {
			d, err := c.Parse(amt)
			switch {
			case err != nil:
				v.Add(field, "%s", err.Error())
				continue
			case d.IsNegative():
				v.Add(field, "must not be negative")
				continue
			}
			amt = c.Format(d)
		}
		changes[domain.SettingMinimumPrefix+cur] = amt
		currencies = append(currencies, cur)
	}
	if req.WebhookRotationGrace != nil {
		g := strings.TrimSpace(*req.WebhookRotationGrace)
		if g != "" {
			d, err := domain.ParseGrace(g)
			if err != nil {
				v.Add("webhook_rotation_grace", "%s", err.Error())
			}
			g = d.String()
		}
		changes[domain.SettingWebhookRotationGrace] = g
	}
	v.Check(utf8.RuneCountInString(req.Reason) <= settingReasonLenMax, "reason", "at most 500 characters")
	v.Check(len(changes) > 0 || len(req.Minimums) > 0, "body", "nothing to change: set minimums and/or webhook_rotation_grace")
	if err := v.Err(); err != nil {
		return nil, err
	}
	done, err := s.Store.PutSettings(ctx, changes, actor(ctx), req.Reason, s.Clock.Now())
	if err != nil {
		return nil, err
	}
	if len(done) > 0 && len(currencies) > 0 && s.Flow != nil {
		waiting, err := s.Store.WaitingInCurrencies(ctx, currencies)
		if err != nil {
			return nil, err
		}
		s.Flow.Wake(context.WithoutCancel(ctx), waiting...)
	}
	out, err := s.settings(ctx)
	if err != nil {
		return nil, err
	}
	return &payoutv1.UpdatePayoutSettingsResponse{Settings: out}, nil
}
