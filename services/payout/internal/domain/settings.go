package domain

import (
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Payout settings finance and admin may set through the API over the
// environment's defaults (stored by name; "" is never stored).
const (
	// SettingMinimumPrefix + currency: that currency's minimum payout.
	SettingMinimumPrefix = "minimums."
	// SettingWebhookRotationGrace: how long a rotated-out webhook secret
	// still signs deliveries when the rotation names no grace period.
	SettingWebhookRotationGrace = "webhook_rotation_grace"
	// WebhookRotationGraceMax bounds every grace period.
	WebhookRotationGraceMax = 7 * 24 * time.Hour
)

// SettingChange is one change of a setting (Old/New "" when it was not
// set, or returned to the environment default).
type SettingChange struct {
	Setting, Old, New, Actor, Reason string
	At                               time.Time
}

// With is m with the minimums set through the API (settings by name) over
// it; a stored value that does not parse is an error (never skipped).
func (m Minimums) With(settings map[string]string) (Minimums, error) {
	out := make(Minimums, len(m))
	for k, v := range m {
		out[k] = v
	}
	for k, v := range settings {
		cur, ok := strings.CutPrefix(k, SettingMinimumPrefix)
		if !ok {
			continue
		}
		d, err := decimal.NewFromString(v)
		if err != nil {
			return nil, fmt.Errorf("payout setting %s = %q: %w", k, v, err)
		}
		out[cur] = d
	}
	return out, nil
}

// ParseGrace reads a grace period setting: a Go duration of 0 to
// WebhookRotationGraceMax.
func ParseGrace(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > WebhookRotationGraceMax {
		return 0, fmt.Errorf("want a duration from 0s to %s, e.g. 24h", WebhookRotationGraceMax)
	}
	return d, nil
}
