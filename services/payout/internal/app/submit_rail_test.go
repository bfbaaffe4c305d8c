package app

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// hungRail accepts every call and never answers (a gateway that takes the
// TCP connection and sends nothing): each call ends with its context.
type hungRail struct {
	name  string
	calls int
}

func (h *hungRail) Name() string { return h.name }
func (h *hungRail) Submit(ctx context.Context, _ Transfer) (RailStatus, error) {
	h.calls++
	<-ctx.Done()
	return RailStatus{}, fmt.Errorf("%s: %w: %w", h.name, ctx.Err(), ErrRailUnavailable)
}
func (h *hungRail) Query(ctx context.Context, _ string) (RailStatus, error) {
	h.calls++
	<-ctx.Done()
	return RailStatus{}, fmt.Errorf("%s: %w: %w", h.name, ctx.Err(), ErrRailUnavailable)
}

// railStore is gateStore whose gate passes the payout with the provider's
// current method, which GetMethod answers too.
type railStore struct {
	gateStore
	method domain.Method
}

func (s *railStore) Update(_ context.Context, fn func(Tx) error) error { return fn(s) }
func (s *railStore) GetMethod(context.Context, string) (domain.ProviderMethod, error) {
	return domain.ProviderMethod{ProviderID: s.p.ProviderID, Method: s.method}, nil
}
func (s *railStore) Gate(context.Context, domain.Payout, domain.Minimums) (string, string, string, error) {
	return domain.StatusCreated, "", s.method.Type, nil
}

// railsWithHungAlipay is the router of a platform with every real rail on,
// Alipay's gateway hung.
func railsWithHungAlipay() (Router, *bookRail, *hungRail, *bookRail) {
	bank, alipay, wechat := &bookRail{name: "bank-file", refs: map[string]bool{}}, &hungRail{name: "alipay"},
		&bookRail{name: "wechatpay", refs: map[string]bool{}}
	return Router{Default: &bookRail{name: "sandbox", refs: map[string]bool{}},
		ByType: map[string]Rail{domain.MethodBank: bank, domain.MethodAlipay: alipay, domain.MethodWechat: wechat}, Strict: true}, bank, alipay, wechat
}

// A rail whose gateway hangs holds up its own payouts only. Asked before
// every first submission about a reference it was never handed, Alipay
// hung made every new bank and WeChat payout wait for Alipay's timeout and
// end "outcome unknown": never submitted, its net in in_transit, retried
// every minute, each try holding one of the worker's activity slots.
func TestAHungRailHoldsUpOnlyItsOwnPayouts(t *testing.T) {
	r, bank, alipay, _ := railsWithHungAlipay()
	st := &railStore{method: domain.Method{Type: domain.MethodBank, AccountName: "X", AccountNumber: "6222020200112233", BankCode: "ICBC"}}
	st.p = domain.Payout{ID: "po_b1", ProviderID: "p-1", Currency: "CNY", Net: decimal.RequireFromString("500.00"),
		Status: domain.StatusActionRequired, Attempt: 1}
	a := testPayouts(st, coveringLedger{available: decimal.NewFromInt(1000)})
	a.Rail = r
	ctx := context.Background()
	if status, err := a.Prepare(ctx, st.p.ID); err != nil || status != domain.StatusCreated {
		t.Fatalf("prepare: %q %v", status, err)
	}
	// One activity attempt; Alipay's client gives up after 20 s, 5 s here.
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	status, err := a.Submit(actx, st.p.ID)
	if err != nil || status != domain.StatusSubmitted {
		t.Fatalf("a bank payout's submission with Alipay hung: after %v: %q %v (Alipay asked %d time(s)); want submitted",
			time.Since(start).Round(time.Second), status, err, alipay.calls)
	}
	if st.p.SubmitRail != "bank-file" {
		t.Fatalf("the gate recorded rail %q for a bank payout, want bank-file", st.p.SubmitRail)
	}
	ref := domain.RailReference("po_b1", 1)
	if !bank.refs[ref] || alipay.calls != 0 {
		t.Fatalf("bank rail holds %s: %v; Alipay asked %d time(s), want 0", ref, bank.refs[ref], alipay.calls)
	}
	if _, err := a.Follow(actx, st.p.ID); err != nil || alipay.calls != 0 {
		t.Fatalf("follow of the bank payout: %v; Alipay asked %d time(s), want 0", err, alipay.calls)
	}
}

// An attempt stays on the rail the gate handed it to: an Alipay payout
// whose submission's answer was lost, its provider's method since WeChat
// (a method changed by hand, a restore), is followed on Alipay when Alipay
// has it, waits while Alipay is down, and is given to Alipay again when
// Alipay never got it (an earlier try's request may still land there): it
// is never submitted to WeChat Pay, which would pay the provider twice.
func TestAnAttemptStaysOnTheRailItWasHandedTo(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		give                  string
		alipayHas, alipayDown bool
		wantStatus            string
		wantErr               error
	}{
		{give: "alipay has it", alipayHas: true, wantStatus: domain.StatusSubmitted},
		{give: "alipay down", alipayHas: true, alipayDown: true, wantErr: ErrRailUnavailable},
		{give: "alipay never got it", wantStatus: domain.StatusSubmitted},
	}
	for i, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			alipay, wechat := &bookRail{name: "alipay", refs: map[string]bool{}}, &bookRail{name: "wechatpay", refs: map[string]bool{}}
			r := Router{Default: &bookRail{name: "sandbox", refs: map[string]bool{}},
				ByType: map[string]Rail{domain.MethodAlipay: alipay, domain.MethodWechat: wechat}, Strict: true}
			id := fmt.Sprintf("po_a%d", i)
			ref := domain.RailReference(id, 1)
			alipay.refs[ref], alipay.down = tt.alipayHas, tt.alipayDown
			st := &railStore{method: domain.Method{Type: domain.MethodWechat, AccountName: "X", WechatOpenID: "o-123"}}
			st.p = domain.Payout{ID: id, ProviderID: "p-1", Currency: "CNY", Net: decimal.RequireFromString("500.00"),
				Status: domain.StatusCreated, Attempt: 1, Submitting: true, Method: domain.MethodAlipay, SubmitRail: "alipay"}
			a := testPayouts(st, coveringLedger{available: decimal.NewFromInt(1000)})
			a.Rail = r
			status, err := a.Submit(ctx, id)
			if wechat.refs[ref] {
				t.Fatalf("%s submitted to WeChat Pay: paid twice", ref)
			}
			if status != tt.wantStatus || !errors.Is(err, tt.wantErr) {
				t.Fatalf("submit: %q %v; want %q %v", status, err, tt.wantStatus, tt.wantErr)
			}
			if tt.wantStatus == domain.StatusSubmitted && !alipay.refs[ref] {
				t.Fatalf("submitted, Alipay does not hold %s", ref)
			}
		})
	}
}
