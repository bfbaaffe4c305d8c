package payout

import (
	"testing"

	"github.com/gpubill/gpubill/services/payout/internal/adapters/sandbox"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
	"github.com/gpubill/gpubill/services/payout/internal/ports"
)

// What payouts go through: the sandbox for every method while no real rail
// is on; once one is, a router that fails a method type with no rail of its
// own (Strict) rather than have the sandbox mark it paid, bank staying on
// the sandbox only when GPUBILL_PAYOUT_RAIL_BANK=sandbox is set.
func TestRailsWired(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		sandboxed bool     // the sandbox alone
		types     []string // the router's types, the sandbox's marked "=sandbox"
	}{
		{"no real rail", Config{}, true, nil},
		{"bank sandbox chosen, no real rail", Config{BankRail: BankRailSandbox}, true, nil},
		{"alipay on", Config{AlipayOn: true}, false, []string{"alipay"}},
		{"alipay on, bank sandbox chosen", Config{AlipayOn: true, BankRail: BankRailSandbox}, false, []string{"alipay", "bank=sandbox"}},
		{"bank file", Config{BankRail: BankRailFile}, false, []string{"bank"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{sandbox: &sandbox.Sandbox{}, flow: &ports.Workflows{}}
			rail := s.wireRails(tc.cfg)
			if tc.sandboxed {
				if rail != app.Rail(s.sandbox) {
					t.Fatalf("rail %T, want the sandbox alone", rail)
				}
				return
			}
			r, ok := rail.(app.Router)
			if !ok || !r.Strict {
				t.Fatalf("rail %T %+v, want a strict router", rail, rail)
			}
			var got []string
			for _, typ := range []string{domain.MethodAlipay, domain.MethodBank, domain.MethodWechat} {
				rl, ok := r.ByType[typ]
				switch {
				case !ok:
				case rl == app.Rail(s.sandbox):
					got = append(got, typ+"=sandbox")
				default:
					got = append(got, typ)
				}
			}
			if len(got) != len(tc.types) {
				t.Fatalf("router types %v, want %v", got, tc.types)
			}
			for i := range got {
				if got[i] != tc.types[i] {
					t.Fatalf("router types %v, want %v", got, tc.types)
				}
			}
		})
	}
}
