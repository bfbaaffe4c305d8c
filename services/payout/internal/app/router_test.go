package app

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// bookRail knows the references submitted to it.
type bookRail struct {
	name string
	refs map[string]bool
	down bool
}

func (b *bookRail) Name() string { return b.name }
func (b *bookRail) Submit(_ context.Context, t Transfer) (RailStatus, error) {
	b.refs[t.Reference] = true
	return RailStatus{Reference: t.Reference, State: RailAccepted}, nil
}
func (b *bookRail) Query(_ context.Context, ref string) (RailStatus, error) {
	if b.down {
		return RailStatus{}, fmt.Errorf("%s: %w", b.name, ErrRailUnavailable)
	}
	if !b.refs[ref] {
		return RailStatus{}, ErrUnknownReference
	}
	return RailStatus{Reference: ref, State: RailAccepted}, nil
}

// Bank methods go to the bank rail, the rest to the default; a reference
// is followed on the rail that has it; an outage of a rail that might have
// it leaves the outcome unknown (never "unknown reference", which would
// let the caller submit again).
func TestRouter(t *testing.T) {
	ctx := context.Background()
	sandbox, bank := &bookRail{name: "sandbox", refs: map[string]bool{}}, &bookRail{name: "bank-file", refs: map[string]bool{}}
	r := Router{Default: sandbox, ByType: map[string]Rail{domain.MethodBank: bank}}
	one := decimal.RequireFromString("1")
	if st, err := r.Submit(ctx, Transfer{Reference: "b1", Amount: one, Method: domain.Method{Type: domain.MethodBank}}); err != nil || st.Rail != "bank-file" || !bank.refs["b1"] {
		t.Errorf("bank method: %+v %v", st, err)
	}
	if st, err := r.Submit(ctx, Transfer{Reference: "a1", Amount: one, Method: domain.Method{Type: domain.MethodAlipay}}); err != nil || st.Rail != "sandbox" || !sandbox.refs["a1"] {
		t.Errorf("alipay method: %+v %v", st, err)
	}
	if st, err := r.Query(ctx, "b1"); err != nil || st.Rail != "bank-file" {
		t.Errorf("query b1: %+v %v", st, err)
	}
	if _, err := r.Query(ctx, "none"); !errors.Is(err, ErrUnknownReference) {
		t.Errorf("unknown: %v", err)
	}
	bank.down = true
	if _, err := r.Query(ctx, "none"); !errors.Is(err, ErrRailUnavailable) {
		t.Errorf("unknown while the bank rail is down: %v, want unavailable", err)
	}
	if st, err := r.Query(ctx, "a1"); err != nil || st.Rail != "sandbox" {
		t.Errorf("a1 while the bank rail is down: %+v %v", st, err)
	}
}

// A rail that takes no payouts any more (the bank file switched off) is
// still asked about the references it holds: its payouts are followed to
// the end, and one whose submit answer was lost is not submitted again
// elsewhere. It takes no new payout.
func TestRouterAsksARailThatTakesNoPayouts(t *testing.T) {
	ctx := context.Background()
	sandbox, bank := &bookRail{name: "sandbox", refs: map[string]bool{}}, &bookRail{name: "bank-file", refs: map[string]bool{"b-old": true}}
	r := Router{Default: sandbox, Readable: []Rail{bank}}
	if st, err := r.Query(ctx, "b-old"); err != nil || st.Rail != "bank-file" {
		t.Fatalf("query b-old: %+v %v; want the bank-file rail's answer", st, err)
	}
	one := decimal.RequireFromString("1")
	if st, err := r.Submit(ctx, Transfer{Reference: "b-new", Amount: one, Method: domain.Method{Type: domain.MethodBank}}); err != nil || st.Rail != "sandbox" || bank.refs["b-new"] {
		t.Fatalf("a new bank payout: %+v %v; want the sandbox's", st, err)
	}
}

// With a real rail on (Strict), a method type with no rail of its own is
// not handed to the sandbox, which "paid" it with no money leaving: its
// submission fails at once (unsupported_by_rail); the sandbox still
// answers for what it holds.
func TestStrictRouterFailsATypeWithoutARail(t *testing.T) {
	ctx := context.Background()
	sandbox, alipay := &bookRail{name: "sandbox", refs: map[string]bool{"old": true}}, &bookRail{name: "alipay", refs: map[string]bool{}}
	r := Router{Default: sandbox, ByType: map[string]Rail{domain.MethodAlipay: alipay}, Strict: true}
	one := decimal.RequireFromString("1")
	st, err := r.Submit(ctx, Transfer{Reference: "w1", Amount: one, Method: domain.Method{Type: domain.MethodWechat}})
	if err != nil || st.State != RailFailed || st.FailureCode != domain.FailUnsupported || sandbox.refs["w1"] {
		t.Fatalf("wechat with only alipay on: %+v %v (sandbox took it: %v)", st, err, sandbox.refs["w1"])
	}
	if st, err := r.Submit(ctx, Transfer{Reference: "a1", Amount: one, Method: domain.Method{Type: domain.MethodAlipay}}); err != nil || st.Rail != "alipay" {
		t.Fatalf("alipay: %+v %v", st, err)
	}
	if st, err := r.Query(ctx, "old"); err != nil || st.Rail != "sandbox" {
		t.Fatalf("a reference the sandbox holds: %+v %v", st, err)
	}
}

// An attempt's reference is asked of the rail it was handed to only: the
// bank rail down holds up bank payouts, not the others; a reference handed
// to no rail is unknown without asking any; one handed to a rail no longer
// configured, or not recorded while a rail is down, stays an unknown
// outcome (TestRouter), never "unknown reference".
func TestRouterAsksOnlyTheRailAnAttemptWasHandedTo(t *testing.T) {
	ctx := context.Background()
	sandbox, bank := &bookRail{name: "sandbox", refs: map[string]bool{}}, &bookRail{name: "bank-file", refs: map[string]bool{}}
	alipay := &bookRail{name: "alipay", refs: map[string]bool{"a1": true}}
	r := Router{Default: sandbox, ByType: map[string]Rail{domain.MethodBank: bank, domain.MethodAlipay: alipay}, Strict: true}
	for give, want := range map[string]string{domain.MethodBank: "bank-file", domain.MethodAlipay: "alipay", domain.MethodWechat: NoRail} {
		if got := r.RailFor(give); got != want {
			t.Errorf("RailFor(%s) = %q, want %q", give, got, want)
		}
	}
	bank.down = true
	if st, err := r.QueryOn(ctx, "alipay", "a1"); err != nil || st.Rail != "alipay" {
		t.Errorf("a1 on alipay while the bank rail is down: %+v %v", st, err)
	}
	if _, err := r.QueryOn(ctx, "alipay", "a2"); !errors.Is(err, ErrUnknownReference) {
		t.Errorf("a2 on alipay while the bank rail is down: %v, want unknown", err)
	}
	if _, err := r.QueryOn(ctx, "bank-file", "b1"); !errors.Is(err, ErrRailUnavailable) {
		t.Errorf("b1 on the bank rail, down: %v, want unavailable", err)
	}
	if _, err := r.QueryOn(ctx, "", "a2"); !errors.Is(err, ErrRailUnavailable) {
		t.Errorf("a2, rail not recorded, while the bank rail is down: %v, want unavailable", err)
	}
	if _, err := r.QueryOn(ctx, NoRail, "w1"); !errors.Is(err, ErrUnknownReference) {
		t.Errorf("w1 handed to no rail: %v, want unknown", err)
	}
	if _, err := r.QueryOn(ctx, "wechatpay", "w2"); !errors.Is(err, ErrRailUnavailable) {
		t.Errorf("w2 handed to a rail not configured: %v, want unavailable", err)
	}
	one := decimal.RequireFromString("1")
	st, err := r.SubmitTo(ctx, NoRail, Transfer{Reference: "w1", Amount: one, Method: domain.Method{Type: domain.MethodWechat}})
	if err != nil || st.State != RailFailed || st.FailureCode != domain.FailUnsupported || sandbox.refs["w1"] {
		t.Errorf("w1 submitted to no rail: %+v %v", st, err)
	}
	// Handed to Alipay, its method's type now bank: it stays on Alipay.
	if st, err := r.SubmitTo(ctx, "alipay", Transfer{Reference: "a3", Amount: one, Method: domain.Method{Type: domain.MethodBank}}); err != nil ||
		st.Rail != "alipay" || !alipay.refs["a3"] || bank.refs["a3"] {
		t.Errorf("a3 handed to alipay: %+v %v", st, err)
	}
}
