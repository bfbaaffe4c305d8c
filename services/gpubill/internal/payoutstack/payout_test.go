package payoutstack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout"
)

const waitLong = 30 * time.Second

// Every path of DESIGN §6 against the real ledger, the sandbox rail and a
// real Temporal dev server: paid, failed (account_frozen, money back in
// available, then retried after the method changed), returned (paid, then
// bounced), canceled before submission, the KYC gate healing by itself,
// the minimum rolling over into the next payout, and isolation between
// providers. After each path the provider's accounts are exact, and at the
// end bank:client and the segregated-funds report agree.
func TestPayoutPaths(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{})
	const cyc1, cyc2 = "cyc-20260101", "cyc-20260215"
	paidOut := decimal.Zero

	// Providers set up before their money settles.
	st.setup(t, "p-paid", "6222000011110001")
	st.setup(t, "p-frozen", "6222000011110002")
	st.setup(t, "p-returned", "6222000011110003")
	st.setup(t, "p-min", "6222000011110004")
	if _, err := st.s.API().PutKyc(fin, &payoutv1.PutKycRequest{ProviderId: "p-cancel", Status: "verified"}); err != nil {
		t.Fatal(err)
	}
	st.method(t, "p-kyc", "6222000011110005")
	st.setup(t, "p-held", "6222000011110007")
	if _, err := st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "p-held", Reason: "dispute"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ p, net string }{
		{"p-paid", "620.00"}, {"p-frozen", "300.00"}, {"p-returned", "150.00"}, {"p-min", "60.00"}, {"p-kyc", "210.00"}, {"p-cancel", "400.00"}, {"p-held", "180.00"},
	} {
		st.settle(t, s.p, cyc1, "CNY", s.net)
	}

	// paid: submitted under the payout id, in transit, paid; watched for a
	// return, then done. Dr available / Cr in_transit, Dr in_transit / Cr bank:client.
	p := st.waitStatus(t, "p-paid", cyc1, "paid", waitLong)
	if h := history(p); h != "created>submitted>in_transit>paid" {
		t.Errorf("p-paid history %s", h)
	}
	if p.RailReference != p.PayoutId || p.ExpectedArrivalDate == "" || p.MethodSummary != "bank ****0001" {
		t.Errorf("p-paid: reference %q (id %s), arrival %q, method %q", p.RailReference, p.PayoutId, p.ExpectedArrivalDate, p.MethodSummary)
	}
	if len(p.Statements) != 1 || p.Statements[0].CycleId != cyc1 || p.Statements[0].Net != "620.00" {
		t.Errorf("p-paid statements %v", p.Statements)
	}
	if n := st.submissions(t, p.PayoutId); n != 1 {
		t.Errorf("p-paid submitted %d times", n)
	}
	st.checkProvider(t, "p-paid", "CNY", "0", "0")
	paidOut = paidOut.Add(decimal.RequireFromString("620.00"))

	// failed: account_frozen, the money back in available.
	p = st.waitStatus(t, "p-frozen", cyc1, "failed", waitLong)
	// (in_transit shows when a poll or callback caught the transfer in transit.)
	if h := history(p); p.FailureCode != "account_frozen" || p.FailureMessage == "" || (h != "created>submitted>in_transit>failed" && h != "created>submitted>failed") {
		t.Errorf("p-frozen: %s %q %s", p.FailureCode, p.FailureMessage, history(p))
	}
	st.checkProvider(t, "p-frozen", "CNY", "300.00", "0")
	// Retry refused until the method changed; then a new attempt under a new reference is paid.
	if _, err := st.s.API().RetryPayout(fin, &payoutv1.RetryPayoutRequest{PayoutId: p.PayoutId}); status.Code(apperr.ToStatus(err)) != codes.FailedPrecondition {
		t.Errorf("retry before the method changed: %v", err)
	}
	st.method(t, "p-frozen", "6222000099990001")
	if _, err := st.s.API().RetryPayout(fin, &payoutv1.RetryPayoutRequest{PayoutId: p.PayoutId, Reason: "new account"}); err != nil {
		t.Fatal(err)
	}
	// The retry sent again (its answer lost) answers the payout, with no
	// third attempt: it was a 400 saying the payout was not failed.
	if again, err := st.s.API().RetryPayout(fin, &payoutv1.RetryPayoutRequest{PayoutId: p.PayoutId, Reason: "new account"}); err != nil || again.Payout.Attempt != 2 {
		t.Errorf("second retry: %v, %v; want attempt 2", again, err)
	}
	p = st.waitStatus(t, "p-frozen", cyc1, "paid", waitLong)
	if h := history(p); p.Attempt != 2 || p.RailReference != p.PayoutId+"-2" || !strings.HasSuffix(h, "failed>created>submitted>in_transit>paid") {
		t.Errorf("p-frozen retried: attempt %d ref %s history %s", p.Attempt, p.RailReference, history(p))
	}
	if n := st.submissions(t, p.PayoutId); n != 1 {
		t.Errorf("p-frozen first attempt submitted %d times", n)
	}
	st.checkProvider(t, "p-frozen", "CNY", "0", "0")
	paidOut = paidOut.Add(decimal.RequireFromString("300.00"))

	// returned: paid, then bounced a second later: Dr bank:client / Cr available.
	p = st.waitStatus(t, "p-returned", cyc1, "returned", waitLong)
	if h := history(p); h != "created>submitted>in_transit>paid>returned" || p.FailureCode != "account_closed" {
		t.Errorf("p-returned: %s %s", h, p.FailureCode)
	}
	st.checkProvider(t, "p-returned", "CNY", "150.00", "0")
	recordHistory(t, st.tc, "returned_history.json", st.s.WorkflowID(p.PayoutId))

	// canceled: no payout method, so it waits; finance cancels it; the
	// money stays in available; a canceled payout cannot be canceled again.
	p = st.waitStatus(t, "p-cancel", cyc1, "action_required", waitLong)
	if p.StatusReason != "no payout method" {
		t.Errorf("p-cancel reason %q", p.StatusReason)
	}
	// Finance holds it first, so setting a method shows in its history without releasing it.
	if _, err := st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "p-cancel", Reason: "closing"}); err != nil {
		t.Fatal(err)
	}
	st.method(t, "p-cancel", "6222000011116661")
	testkit.Eventually(t, waitLong, func() bool {
		notes := ""
		for _, c := range st.payouts(t, "p-cancel")[0].StatusHistory {
			notes += c.Note + "|"
		}
		return strings.Contains(notes, "payout method set: bank ****6661") && strings.Contains(notes, "held by finance: closing")
	}, "method change and hold in the waiting payout's history")
	canceled, err := st.s.API().CancelPayout(fin, &payoutv1.CancelPayoutRequest{PayoutId: p.PayoutId, Reason: "provider closed"})
	if err != nil {
		t.Fatal(err)
	}
	// The cancel sent again (a client's retry) answers the canceled payout,
	// its history unchanged: it was a 400 saying it was on its way to the rail.
	again, err := st.s.API().CancelPayout(fin, &payoutv1.CancelPayoutRequest{PayoutId: p.PayoutId, Reason: "provider closed"})
	if err != nil || again.Payout.Status != "canceled" || len(again.Payout.StatusHistory) != len(canceled.Payout.StatusHistory) {
		t.Errorf("second cancel: %v, %v; want the canceled payout as it was (%d changes)", again, err, len(canceled.Payout.StatusHistory))
	}
	st.method(t, "p-cancel", "6222000011110006") // a method now changes nothing: canceled is final
	st.waitStatus(t, "p-cancel", cyc1, "canceled", waitLong)
	st.checkProvider(t, "p-cancel", "CNY", "400.00", "0")
	// A paid payout cannot be canceled.
	paid := st.payouts(t, "p-paid")[0]
	if _, err := st.s.API().CancelPayout(fin, &payoutv1.CancelPayoutRequest{PayoutId: paid.PayoutId}); status.Code(apperr.ToStatus(err)) != codes.FailedPrecondition {
		t.Errorf("cancel of a paid payout: %v", err)
	}

	// A hold: the payout waits with finance's reason; released, it goes.
	p = st.waitStatus(t, "p-held", cyc1, "action_required", waitLong)
	if p.StatusReason != "held by finance: dispute" {
		t.Errorf("p-held reason %q", p.StatusReason)
	}
	st.checkProvider(t, "p-held", "CNY", "180.00", "0")
	if _, err := st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "p-held"}); err != nil {
		t.Fatal(err)
	}
	st.waitStatus(t, "p-held", cyc1, "paid", waitLong)
	st.checkProvider(t, "p-held", "CNY", "0", "0")
	paidOut = paidOut.Add(decimal.RequireFromString("180.00"))

	// The KYC gate heals by itself: waiting with the reason, then paid once
	// finance verifies the KYC (a provider may not verify itself).
	p = st.waitStatus(t, "p-kyc", cyc1, "action_required", waitLong)
	if p.StatusReason != "kyc not verified (missing)" {
		t.Errorf("p-kyc reason %q", p.StatusReason)
	}
	if _, err := st.s.API().PutKyc(as(auth.RoleProvider, "p-kyc"), &payoutv1.PutKycRequest{ProviderId: "p-kyc", Status: "verified"}); err == nil {
		t.Error("a provider verified its own KYC")
	}
	if _, err := st.s.API().PutKyc(fin, &payoutv1.PutKycRequest{ProviderId: "p-kyc", Status: "verified"}); err != nil {
		t.Fatal(err)
	}
	p = st.waitStatus(t, "p-kyc", cyc1, "paid", waitLong)
	if h := history(p); h != "action_required>created>submitted>in_transit>paid" {
		t.Errorf("p-kyc history %s", h)
	}
	st.checkProvider(t, "p-kyc", "CNY", "0", "0")
	paidOut = paidOut.Add(decimal.RequireFromString("210.00"))

	// Under the minimum: 60.00 waits in available; the next settlement's
	// 50.00 joins it into one payout of 110.00 paying both statements.
	first := st.waitStatus(t, "p-min", cyc1, "action_required", waitLong)
	if !strings.HasPrefix(first.StatusReason, "under minimum 100.00 CNY") {
		t.Errorf("p-min reason %q", first.StatusReason)
	}
	st.checkProvider(t, "p-min", "CNY", "60.00", "0")
	st.settle(t, "p-min", cyc2, "CNY", "50.00")
	p = st.waitStatus(t, "p-min", cyc2, "paid", waitLong)
	if p.Net != "110.00" || len(p.Statements) != 2 {
		t.Errorf("p-min joined payout: net %s statements %v", p.Net, p.Statements)
	}
	first = st.waitStatus(t, "p-min", cyc1, "canceled", waitLong)
	if first.AbsorbedInto != p.PayoutId {
		t.Errorf("p-min first payout absorbed into %q, want %s", first.AbsorbedInto, p.PayoutId)
	}
	// Canceling the payout that joined another names that one (its money
	// goes with it): a 200 read as stopped while it was paid.
	if _, err := st.s.API().CancelPayout(fin, &payoutv1.CancelPayoutRequest{PayoutId: first.PayoutId}); status.Code(apperr.ToStatus(err)) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), p.PayoutId) {
		t.Errorf("cancel of a payout that joined %s: %v; want FailedPrecondition naming it", p.PayoutId, err)
	}
	// Its workflow, waiting at the gate (re-checked hourly), is woken and ends.
	testkit.Eventually(t, waitLong, func() bool {
		desc, err := st.tc.DescribeWorkflowExecution(context.Background(), st.s.WorkflowID(first.PayoutId), "")
		return err == nil && desc.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}, "the joined payout's workflow completed")
	st.checkProvider(t, "p-min", "CNY", "0", "0")
	paidOut = paidOut.Add(decimal.RequireFromString("110.00"))

	// Isolation: a provider sees only its own payouts; another's is 404.
	if _, err := st.s.API().GetPayout(as(auth.RoleProvider, "p-kyc"), &payoutv1.GetPayoutRequest{PayoutId: paid.PayoutId}); status.Code(apperr.ToStatus(err)) != codes.NotFound {
		t.Errorf("p-kyc read p-paid's payout: %v", err)
	}
	if _, err := st.s.API().ListProviderPayouts(as(auth.RoleProvider, "p-kyc"), &payoutv1.ListProviderPayoutsRequest{ProviderId: "p-paid"}); err == nil {
		t.Error("p-kyc listed p-paid's payouts")
	}
	for _, prov := range []string{"p-paid", "p-frozen", "p-returned", "p-kyc", "p-cancel"} {
		if ps := st.payouts(t, prov); len(ps) != 1 || ps[0].ProviderId != prov {
			t.Errorf("%s: %d payouts (redelivered settled event must not duplicate)", prov, len(ps))
		}
	}
	st.checkFunds(t, "CNY", paidOut)
}

// A rail outage: the payout waits and retries, the rail sees exactly one
// submission; an answer lost after the rail booked the transfer is
// recovered by querying the same reference (no second submission).
func TestPayoutRailOutage(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{})
	st.s.TestHooks().SetSandboxOutage(true)
	st.setup(t, "p-out", "6222000011119991")
	st.setup(t, "p-lost", "6222000011117771")
	st.settle(t, "p-out", "cyc-20260101", "CNY", "500.00")
	// While the rail is down the payout stays created, its amount reserved
	// (in_transit) and not submitted.
	var p *payoutv1.Payout
	testkit.Eventually(t, waitLong, func() bool {
		ps := st.payouts(t, "p-out")
		if len(ps) == 0 {
			return false
		}
		p = ps[0]
		return st.balance(t, "provider:p-out:in_transit", "CNY").Equal(decimal.RequireFromString("500.00"))
	}, "payout reserved during the outage")
	var attempts int
	testkit.Eventually(t, waitLong, func() bool {
		desc, err := st.tc.DescribeWorkflowExecution(context.Background(), st.s.WorkflowID(p.PayoutId), "")
		if err != nil || len(desc.PendingActivities) == 0 {
			return false
		}
		attempts = int(desc.PendingActivities[0].Attempt)
		return attempts >= 2
	}, "submission retried during the outage")
	if p = st.payouts(t, "p-out")[0]; p.Status != "created" || st.submissions(t, p.PayoutId) != 0 {
		t.Fatalf("during the outage: %s, %d submissions", p.Status, st.submissions(t, p.PayoutId))
	}
	// A hold now cannot stop the payout (past the gate, its rail may have
	// it): the answer says so. It counted it as waiting, held.
	hold, err := st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "p-out", Reason: "dispute"})
	if err != nil || hold.PayoutsWaiting != 0 || hold.PayoutsInFlight != 1 {
		t.Fatalf("hold during the submission: %v %v; want 0 waiting, 1 in flight", hold, err)
	}
	st.s.TestHooks().SetSandboxOutage(false)
	p = st.waitStatus(t, "p-out", "cyc-20260101", "paid", 2*waitLong)
	if _, err := st.s.API().HoldProviderPayouts(fin, &payoutv1.HoldProviderPayoutsRequest{ProviderId: "p-out"}); err != nil {
		t.Fatal(err)
	}
	if n := st.submissions(t, p.PayoutId); n != 1 {
		t.Errorf("submitted %d times after the outage", n)
	}
	st.checkProvider(t, "p-out", "CNY", "0", "0")

	// The rail books the transfer but its answer is lost: the retry queries
	// the reference and finds it.
	st.s.TestHooks().LoseSandboxAnswers(1)
	st.settle(t, "p-lost", "cyc-20260101", "CNY", "700.00")
	p = st.waitStatus(t, "p-lost", "cyc-20260101", "paid", waitLong)
	if n := st.submissions(t, p.PayoutId); n != 1 {
		t.Errorf("lost answer: submitted %d times", n)
	}
	st.checkProvider(t, "p-lost", "CNY", "0", "0")
	st.checkFunds(t, "CNY", decimal.RequireFromString("1200.00"))
}

// hangingRail books a submission with the sandbox and then never answers:
// the worker running it is as good as dead between submission and
// confirmation.
type hangingRail struct {
	payout.Rail
	submitted chan string
}

func (h *hangingRail) Submit(ctx context.Context, tr payout.Transfer) (payout.RailStatus, error) {
	if _, err := h.Rail.Submit(ctx, tr); err != nil {
		return payout.RailStatus{}, err
	}
	h.submitted <- tr.Reference
	<-ctx.Done()
	select {} // never returns: the worker is gone
}

// A worker killed between submission and confirmation: the attempt times
// out, a new worker (the service restarted) queries the reference, finds
// the transfer, and the payout is paid with exactly one submission.
func TestPayoutWorkerKilledAfterSubmission(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{})
	st.stopPayout()
	var hang *hangingRail
	st.s.TestHooks().ReplaceRail(func(sandbox payout.Rail) payout.Rail {
		hang = &hangingRail{Rail: sandbox, submitted: make(chan string, 1)}
		return hang
	})
	st.startPayout()
	st.setup(t, "p-kill", "6222000011118881")
	st.settle(t, "p-kill", "cyc-20260101", "CNY", "800.00")
	var ref string
	select {
	case ref = <-hang.submitted:
	case <-time.After(waitLong):
		t.Fatal("no submission")
	}
	// Kill: stop the service without letting the attempt finish, then
	// restart it with the plain sandbox (a new worker process).
	stop := st.runStop
	st.runStop = nil
	stop() // the hung activity never returns: the old worker is abandoned, its attempt times out
	s, err := payout.New(context.Background(), st.d, st.tc, st.queue, st.cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.s = s
	st.startPayout()
	p := st.waitStatus(t, "p-kill", "cyc-20260101", "paid", waitLong)
	if p.PayoutId != ref {
		t.Errorf("paid %s, submitted %s", p.PayoutId, ref)
	}
	if n := st.submissions(t, ref); n != 1 {
		t.Errorf("submitted %d times", n)
	}
	st.checkProvider(t, "p-kill", "CNY", "0", "0")
	st.checkFunds(t, "CNY", decimal.RequireFromString("800.00"))
}

// A method corrected while the payout was on its way (paid, then returned
// by the bank later) is a change for the retry: it was measured from the
// return, so :retry answered "not changed" and the same PUT again changes
// nothing; the money stayed in available.
func TestRetryAfterAMethodChangedInTransit(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{SandboxLatency: 2 * time.Second, SandboxReturnAfter: 2 * time.Second}) // returned 2 s after paid
	const cyc = "cyc-20260101"
	st.setup(t, "p-moved", "6222000011110003") // paid, then returned
	st.settle(t, "p-moved", cyc, "CNY", "150.00")
	st.waitStatus(t, "p-moved", cyc, "paid", waitLong)
	st.method(t, "p-moved", "6222000099990001") // the provider closed the old account
	p := st.waitStatus(t, "p-moved", cyc, "returned", waitLong)
	if _, err := st.s.API().RetryPayout(fin, &payoutv1.RetryPayoutRequest{PayoutId: p.PayoutId, Reason: "new account"}); err != nil {
		t.Fatalf("retry after the method changed in transit: %v", err)
	}
	p = st.waitStatus(t, "p-moved", cyc, "paid", waitLong)
	if p.Attempt != 2 || p.MethodSummary != "bank ****0001" {
		t.Errorf("retried: attempt %d to %s; want attempt 2 to ****0001", p.Attempt, p.MethodSummary)
	}
}
