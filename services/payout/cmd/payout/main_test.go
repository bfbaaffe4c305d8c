package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/svc"
)

// Payout run on its own refuses to start with no rail chosen (the sandbox
// marked every payout paid, no money leaving) and with no webhook key (one
// generated into the container's data dir was lost with it, and every
// replica made its own); the check comes before Temporal is dialled.
func TestAloneRefusesNoRailAndNoKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"nothing set", nil, "no rail"},
		{"sandbox chosen, no key", map[string]string{"GPUBILL_PAYOUT_RAIL_BANK": "sandbox"}, "no webhook key"},
		{"key, no rail", map[string]string{"GPUBILL_WEBHOOK_KEY": strings.Repeat("k", 32)}, "no rail"},
		{"sandbox chosen and a key", map[string]string{"GPUBILL_PAYOUT_RAIL_BANK": "sandbox", "GPUBILL_WEBHOOK_KEY": strings.Repeat("k", 32)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"GPUBILL_PAYOUT_RAIL_BANK", "GPUBILL_WEBHOOK_KEY", "GPUBILL_WEBHOOK_KEY_FILE", "GPUBILL_ALIPAY_APP_ID", "GPUBILL_WECHATPAY_MCHID"} {
				t.Setenv(k, "")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // past the checks, the dial fails at once
			_, _, err := build(ctx, svc.Deps{Log: slog.New(slog.DiscardHandler)}, config.Common{TemporalAddress: "127.0.0.1:1"})
			if tc.want == "" { // refused later, by the dial only
				if err == nil || strings.Contains(err.Error(), "payout alone") {
					t.Fatalf("build: %v, want the dial's error", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("build: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
