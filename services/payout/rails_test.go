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
			r, ok := rail.(app.Router)
			if !ok || r.Default != app.Rail(s.sandbox) {
				t.Fatalf("rail %T %+v, want a router over the sandbox", rail, rail)
			}
			// The bank-file rail's book is asked about references while
			// the file rail takes no payouts: switched off, its payouts
			// were never followed again.
			if wantReadable := tc.cfg.BankRail != BankRailFile; wantReadable != (len(r.Readable) == 1 && r.Readable[0] == app.Rail(s.bank)) {
				t.Fatalf("readable rails %v; want the bank-file rail's book: %v", r.Readable, wantReadable)
			}
			if tc.sandboxed {
				if r.Strict || len(r.ByType) != 0 {
					t.Fatalf("router %+v, want the sandbox for every method", r)
				}
				return
			}
			if !r.Strict {
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
