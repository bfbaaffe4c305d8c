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
