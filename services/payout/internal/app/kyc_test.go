package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// kycStore is failureStore whose provider's KYC reads kyc.
type kycStore struct {
	failureStore
	kyc string
}

func (s *kycStore) KYCStatus(context.Context, string) (string, error) { return s.kyc, nil }

// keyLedger covers every payout and keeps the keys posted to it.
type keyLedger struct{ keys []string }

func (l *keyLedger) Available(context.Context, string, string) (decimal.Decimal, error) {
	return decimal.NewFromInt(1_000_000), nil
}
func (l *keyLedger) Transfer(_ context.Context, t domain.LedgerTransfer) error {
	l.keys = append(l.keys, t.Key)
	return nil
}

// A payout past the gate whose rail was down when its provider's KYC was
// rejected is not handed to the rail once it recovers: the rail never had
// its reference, so it fails kyc_rejected, its amount posted back to
// available. It was paid hours after finance rejected the provider for
// fraud. Each stop is counted (gpubill_payout_kyc_rejected_total): it read
// as any other failed payout, and only a WARN line said why. Not parallel:
// the counter is the process's.
func TestSubmitStopsAPayoutOfARejectedKYC(t *testing.T) {
	ctx := context.Background()
	before := counterValue(t, "gpubill_payout_kyc_rejected_total")
	st := &kycStore{failureStore: failureStore{gateStore: gateStore{readStore: readStore{p: submittingPayout(domain.StatusCreated)}}}, kyc: domain.KYCVerified}
	l := &keyLedger{}
	rail := &bookRail{name: "alipay", refs: map[string]bool{}, down: true}
	a := &Payouts{Store: st, Ledger: l, Rail: rail, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := a.Submit(ctx, "po_1"); err == nil {
		t.Fatal("Submit with the rail down answered no error")
	}
	st.kyc, rail.down = domain.KYCRejected, false
	got, err := a.Submit(ctx, "po_1")
	if err != nil || got != domain.StatusFailed {
		t.Fatalf("Submit after the KYC was rejected answered %q, %v; want failed", got, err)
	}
	if len(rail.refs) != 0 {
		t.Fatalf("the rail has %v; want nothing: the provider's KYC is rejected", rail.refs)
	}
	if st.p.FailureCode != domain.FailKYCRejected || st.p.Submitting {
		t.Fatalf("payout failed %q (submitting %v); want %s, no longer submitting", st.p.FailureCode, st.p.Submitting, domain.FailKYCRejected)
	}
	want := []string{"payout-po_1-1-submitted", "payout-po_1-1-submitted", "payout-po_1-1-failed"}
	if !slices.Equal(l.keys, want) {
		t.Fatalf("ledger posted %q; want %q (its submission returned to available)", l.keys, want)
	}
	if n := counterValue(t, "gpubill_payout_kyc_rejected_total") - before; n != 1 {
		t.Fatalf("gpubill_payout_kyc_rejected_total rose by %v; want 1 (the payout stopped)", n)
	}
	if domain.PayeeFailure(domain.FailKYCRejected) {
		t.Fatal("kyc_rejected waits for a method change to be retried; want a retry once finance verified the KYC again")
	}
}

// crashKYCStore is failureStore whose provider's KYC reads kyc and whose
// first Update after the ledger took a failed posting fails (the process
// dying, the database failing over, between the posting and its record).
type crashKYCStore struct {
	failureStore
	kyc     string
	ledger  *keyLedger
	crashed bool
}

func (s *crashKYCStore) KYCStatus(context.Context, string) (string, error) { return s.kyc, nil }
func (s *crashKYCStore) Update(_ context.Context, fn func(Tx) error) error {
	if !s.crashed && slices.ContainsFunc(s.ledger.keys, func(k string) bool { return strings.HasSuffix(k, "-failed") }) {
		s.crashed = true
		return errors.New("conn closed")
	}
	return fn(s)
}

// A payout Submit stopped as kyc_rejected, its amount posted back to
// available but the payout not yet recorded failed when the process died,
// is stopped again on the retry even though finance verified the KYC
// meanwhile: it is not handed to the rail. It was paid by the rail while
// the same net also sat in available (paid twice).
func TestSubmitStopKYCRejectedSurvivesACrashAfterItsPosting(t *testing.T) {
	ctx := context.Background()
	l := &keyLedger{}
	st := &crashKYCStore{failureStore: failureStore{gateStore: gateStore{readStore: readStore{p: submittingPayout(domain.StatusCreated)}}},
		kyc: domain.KYCRejected, ledger: l}
	rail := &bookRail{name: "alipay", refs: map[string]bool{}}
	a := &Payouts{Store: st, Ledger: l, Rail: rail, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if got, err := a.Submit(ctx, "po_1"); err == nil {
		t.Fatalf("Submit with the store failing after the posting answered %q, no error", got)
	}
	st.kyc = domain.KYCVerified
	got, err := a.Submit(ctx, "po_1")
	if err != nil || got != domain.StatusFailed {
		t.Fatalf("retry answered %q, %v; want failed (the stop was decided before its posting)", got, err)
	}
	if len(rail.refs) != 0 {
		t.Fatalf("the rail has %v; want nothing: the net went back to available", rail.refs)
	}
	if st.p.Status != domain.StatusFailed || st.p.FailureCode != domain.FailKYCRejected || st.p.Submitting {
		t.Fatalf("payout %s, failure %q (submitting %v); want failed %s", st.p.Status, st.p.FailureCode, st.p.Submitting, domain.FailKYCRejected)
	}
	for _, k := range l.keys {
		if strings.HasSuffix(k, "-submitted") && k != "payout-po_1-1-submitted" {
			t.Fatalf("ledger keys %q; want only attempt 1's", l.keys)
		}
	}
	if n := len(l.keys); n == 0 || l.keys[n-1] != "payout-po_1-1-failed" {
		t.Fatalf("ledger keys %q; want the last the failed posting (net back in available)", l.keys)
	}
}

// counterValue reads the counter named name (no labels) from the
// process's registry, as /metrics serves it.
func counterValue(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s on /metrics", name)
	return 0
}

// crashStore is crashKYCStore for a verified KYC: the provider may be paid.
func crashStore(l *keyLedger) *crashKYCStore {
	return &crashKYCStore{failureStore: failureStore{gateStore: gateStore{readStore: readStore{p: submittingPayout(domain.StatusCreated)}}},
		kyc: domain.KYCVerified, ledger: l}
}

// A payout its rail refuses at once, never having taken its reference (the
// strict router with no rail for the method's type, for a payout from
// before submit_rail was recorded or handed to none; Alipay's and WeChat
// Pay's own refusals: a currency they do not pay, a payee they cannot
// build), whose failed posting put its net back in available before the
// process died, ends failed on the retry, its net posted back once and
// nothing handed to a rail. Recorded submitted before its posting, the
// retry read it past submission and followed it: every rail answered its
// reference unknown, each Follow failed and was tried again for good, the
// payout submitted with its net in available, never failed, never
// retryable.
func TestSubmitRailRefusalSurvivesACrashAfterItsPosting(t *testing.T) {
	for _, rail := range []string{"", NoRail, "alipay"} {
		t.Run("submit_rail "+rail, func(t *testing.T) {
			ctx := context.Background()
			l := &keyLedger{}
			st := crashStore(l)
			st.p.SubmitRail = rail
			wechat := &bookRail{name: "wechatpay", refs: map[string]bool{}}
			sandbox := &bookRail{name: "sandbox", refs: map[string]bool{}}
			r := Router{Default: sandbox, ByType: map[string]Rail{domain.MethodWechat: wechat}, Strict: true}
			if rail == "alipay" { // Alipay refusing a currency it does not pay: it keeps no order
				r.ByType[domain.MethodAlipay] = refusingRail{name: "alipay"}
			}
			a := &Payouts{Store: st, Ledger: l, Rail: r, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if got, err := a.Submit(ctx, "po_1"); err == nil {
				t.Fatalf("Submit with the store failing after the posting answered %q, no error", got)
			}
			got, err := a.Submit(ctx, "po_1")
			if err == nil && got == domain.StatusSubmitted {
				got, err = a.Follow(ctx, "po_1") // the workflow's next step
			}
			if err != nil || got != domain.StatusFailed {
				t.Fatalf("retry answered %q, %v; want failed (the rail refused it at once)", got, err)
			}
			if len(sandbox.refs)+len(wechat.refs) != 0 {
				t.Fatalf("rails have %v %v; want nothing", sandbox.refs, wechat.refs)
			}
			if st.p.Status != domain.StatusFailed || st.p.FailureCode != domain.FailUnsupported || st.p.Submitting {
				t.Fatalf("payout %s, failure %q (submitting %v); want failed %s", st.p.Status, st.p.FailureCode, st.p.Submitting, domain.FailUnsupported)
			}
			if n := len(l.keys); n == 0 || l.keys[n-1] != "payout-po_1-1-failed" {
				t.Fatalf("ledger keys %q; want the last the failed posting (net back in available)", l.keys)
			}
		})
	}
}

// refusingRail refuses every transfer at once (unsupported_by_rail) and
// keeps nothing of it: Alipay's and WeChat Pay's own refusals, made before
// any call to the platform.
type refusingRail struct{ name string }

func (r refusingRail) Name() string { return r.name }
func (r refusingRail) Submit(_ context.Context, t Transfer) (RailStatus, error) {
	return RailStatus{Reference: t.Reference, State: RailFailed, FailureCode: domain.FailUnsupported, Message: "pays CNY only"}, nil
}
func (r refusingRail) Query(context.Context, string) (RailStatus, error) {
	return RailStatus{}, ErrUnknownReference
}

// thenPaysRail refuses its first transfer at once (the platform's balance
// short: insufficient_funds), keeping nothing of it, and takes the next.
type thenPaysRail struct{ bookRail }

func (r *thenPaysRail) Submit(ctx context.Context, t Transfer) (RailStatus, error) {
	if !r.down {
		r.down = true // refused once
		return RailStatus{Reference: t.Reference, State: RailFailed, FailureCode: domain.FailInsufficientFunds, Message: "NOT_ENOUGH"}, nil
	}
	return r.bookRail.Submit(ctx, t)
}
func (r *thenPaysRail) Query(_ context.Context, ref string) (RailStatus, error) {
	if !r.refs[ref] {
		return RailStatus{}, ErrUnknownReference
	}
	return RailStatus{Reference: ref, State: RailAccepted}, nil
}

// A rail's refusal is the payout's decision from the moment it is
// answered: its failed posting made (net back in available) and the process
// dying before the payout was recorded failed, the retry does not hand the
// attempt to the rail again, which takes it now (finance topped the
// merchant account up meanwhile): paid at the rail with its net in
// available too.
func TestSubmitRailRefusalIsNotSentAgainAfterACrash(t *testing.T) {
	ctx := context.Background()
	l := &keyLedger{}
	st := crashStore(l)
	rail := &thenPaysRail{bookRail{name: "wechatpay", refs: map[string]bool{}}}
	a := &Payouts{Store: st, Ledger: l, Rail: rail, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if got, err := a.Submit(ctx, "po_1"); err == nil {
		t.Fatalf("Submit with the store failing after the posting answered %q, no error", got)
	}
	got, err := a.Submit(ctx, "po_1")
	if err != nil || got != domain.StatusFailed || len(rail.refs) != 0 {
		t.Fatalf("retry answered %q, %v, the rail holding %v; want failed, nothing sent (its net is back in available)", got, err, rail.refs)
	}
	if st.p.FailureCode != domain.FailInsufficientFunds || st.p.Submitting {
		t.Fatalf("payout failed %q (submitting %v); want %s", st.p.FailureCode, st.p.Submitting, domain.FailInsufficientFunds)
	}
}
