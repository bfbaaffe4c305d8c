package payoutstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/pkg/wechatpay"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/gpubill/internal/backup"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
	"github.com/gpubill/gpubill/services/payout"
)

// After a restore a payout's version restarts from the snapshot's. A payout
// changed after the snapshot (a payout method set: version 2) and changed
// otherwise after the restore (another method: version 2 again) must not
// be answered under the ETag, nor announced under the webhook event id,
// issued before the restore: a provider polling with If-None-Match got
// 304 and kept the first method, and a receiver deduplicating by event id
// dropped the second change. The same snapshot restored twice gets two
// epochs (a counter kept in the snapshot would give both the same).
func TestRestoreNeverReissuesAnETagOrEventID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const provider, hookSecret = "p-restore", "whsec-restore-0123456789"
	// The restored stack must open the webhook secrets the first sealed.
	cfg := payout.Config{WebhookAllowPrivate: true, WebhookKey: bytes.Repeat([]byte{7}, 32)}

	// The receiver outlives the disaster: it keeps every body it got per
	// event id.
	var mu sync.Mutex
	got := map[string][]string{} // event id → the bodies received under it
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		var ev payout.WebhookEvent
		if err == nil {
			err = json.Unmarshal(b, &ev)
		}
		if err != nil || ev.EventID != r.Header.Get("Gpubill-Event-Id") {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(got[ev.EventID], string(b)) { // else a redelivery
			got[ev.EventID] = append(got[ev.EventID], string(b))
		}
	}))
	defer recv.Close()
	// delivered waits for the change whose note names the account and
	// returns its event id.
	delivered := func(account string) string {
		t.Helper()
		var id string
		testkit.Eventually(t, waitLong, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for eid, bodies := range got {
				for _, b := range bodies {
					if strings.Contains(b, "****"+account) {
						id = eid
					}
				}
			}
			return id != ""
		}, "the change naming ****%s delivered", account)
		return id
	}
	version := func(dsn string) (v int64) {
		t.Helper()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, `select version from payout.payouts where provider_id = $1`, provider).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	src := newStack(t, cfg)
	if _, err := src.s.API().CreateWebhook(as(auth.RoleProvider, provider), &payoutv1.CreateWebhookRequest{ProviderId: provider,
		Url: recv.URL, Secret: hookSecret}); err != nil {
		t.Fatal(err)
	}
	src.publishSettled(t, provider, "cyc-20260101", "CNY", "250.00")
	p := src.waitStatus(t, provider, "cyc-20260101", "action_required", waitLong) // no KYC: it waits at the gate
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := backup.Take(ctx, src.dsn, dir, backup.Tools{}, time.Now()); err != nil {
		t.Fatal(err)
	}

	// After the snapshot, before the disaster: a method set.
	src.method(t, provider, "6222000011110001")
	idBefore := delivered("0001")
	path, list := "/v1/payouts/"+p.PayoutId, "/v1/providers/"+provider+"/payouts"
	code, h, _ := src.rest(t, "GET", path, auth.RoleProvider, provider, "")
	tagBefore := h.Get("ETag")
	_, lh, _ := src.rest(t, "GET", list, auth.RoleProvider, provider, "")
	listTagBefore := lh.Get("ETag")
	if code != http.StatusOK || tagBefore == "" || listTagBefore == "" {
		t.Fatalf("GET %s: %d, ETag %q, list ETag %q", path, code, tagBefore, listTagBefore)
	}
	vBefore := version(src.dsn)
	src.stopPayout()
	// The old Temporal is lost with the disaster: the restored payout's
	// workflow is started anew by the restored stack.
	if err := src.tc.TerminateWorkflow(ctx, src.s.WorkflowID(p.PayoutId), "", "disaster"); err != nil {
		t.Fatal(err)
	}

	dst := testkit.NewDatabase(t)
	if _, err := backup.Restore(ctx, dst, dir, backup.Tools{}); err != nil {
		t.Fatal(err)
	}
	again := testkit.NewDatabase(t)
	var out, errOut bytes.Buffer
	if code := cli.Main(ctx, []string{"restore", dir, "--database-url", again}, &out, &errOut); code != 0 {
		t.Fatalf("gpubill restore: exit %d, %s %s", code, out.String(), errOut.String())
	}
	restored := newStackOn(t, dst, cfg)
	restored.method(t, provider, "6222000011110002")
	idAfter := delivered("0002")
	if vAfter := version(dst); vAfter != vBefore {
		t.Fatalf("the restored payout is at version %d, the source's was at %d: the test needs one version with two contents", vAfter, vBefore)
	}

	if idAfter == idBefore {
		t.Errorf("the change after the restore was sent under %s, the event id of the change before it (another method): "+
			"a receiver deduplicating by event id drops it", idAfter)
	}
	code, h, body := restored.rest(t, "GET", path, auth.RoleProvider, provider, tagBefore)
	if code != http.StatusOK || !strings.Contains(body, "****0002") || h.Get("ETag") == tagBefore {
		t.Errorf("GET %s with If-None-Match %s (issued before the restore, for ****0001): %d, ETag %q, %q; "+
			"want 200 with ****0002 under another ETag", path, tagBefore, code, h.Get("ETag"), body)
	}
	if code, h, _ := restored.rest(t, "GET", list, auth.RoleProvider, provider, listTagBefore); code != http.StatusOK || h.Get("ETag") == listTagBefore {
		t.Errorf("GET %s with If-None-Match %s (issued before the restore): %d, ETag %q; want 200 under another ETag",
			list, listTagBefore, code, h.Get("ETag"))
	}
	mu.Lock()
	for id, bodies := range got {
		if len(bodies) > 1 {
			t.Errorf("event id %s received with %d contents: %s", id, len(bodies), bodies)
		}
	}
	mu.Unlock()

	// The same snapshot restored again: another epoch than the first
	// restore's; the ledger's (lease event ids) is the restore's too.
	epoch := func(dsn, schema string) (e string) {
		t.Helper()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, `select epoch from `+schema+`.restore_epoch`).Scan(&e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e1, e2 := epoch(dst, "payout"), epoch(again, "payout"); e1 == "" || e1 == e2 || epoch(src.dsn, "payout") == e1 {
		t.Errorf("restore epochs of one snapshot restored twice: %q and %q (source %q); want three different ones", e1, e2, epoch(src.dsn, "payout"))
	}
	if want := "restore epoch " + epoch(again, "payout") + " (ledger, payout)"; !strings.Contains(out.String(), want) {
		t.Errorf("gpubill restore said %q; want %q", out.String(), want)
	}
	if e1, l1 := epoch(dst, "payout"), epoch(dst, "ledger"); l1 != e1 || epoch(src.dsn, "ledger") == l1 {
		t.Errorf("the restored ledger's epoch %q, payout's %q, the source ledger's %q; want the restore's in both, not the source's",
			l1, e1, epoch(src.dsn, "ledger"))
	}
}

// restoreRail is a rail a restore test pays through: its fake platform
// outlives the disaster, and the stacks before and after it are configured
// alike.
type restoreRail struct {
	name    string // the rail's name in payout histories and on /metrics
	stackOn func(t *testing.T, dsn string) *stack
	setup   func(t *testing.T, st *stack, provider string, n int) // KYC and the n-th account
	// order is what the platform holds under a rail reference: transfer
	// calls, the amount ("" when none) and how often it was queried.
	order func(t *testing.T, ref string) (calls int, amount string, queries int)
}

func alipayRestoreRail(t *testing.T) restoreRail {
	cfg, g := alipayConfig(t)
	return restoreRail{name: "alipay",
		stackOn: func(t *testing.T, dsn string) *stack { return alipayStackOn(t, dsn, cfg) },
		setup: func(t *testing.T, st *stack, provider string, n int) {
			st.alipaySetup(t, provider, fmt.Sprintf("208812341234%04d", 21+n), "")
		},
		order: func(_ *testing.T, ref string) (int, string, int) {
			calls, o := g.Transfers(ref)
			if o == nil {
				return calls, "", 0
			}
			return calls, o.Amount, o.Queries
		}}
}

func wechatRestoreRail(t *testing.T) restoreRail {
	cfg, p := wechatConfig(t)
	return restoreRail{name: "wechatpay",
		stackOn: func(t *testing.T, dsn string) *stack { return wechatStackOn(t, dsn, cfg) },
		setup: func(t *testing.T, st *stack, provider string, n int) {
			st.wechatSetup(t, provider, fmt.Sprintf("oUpF8uMuAJO_M2pxb1Q9zNjW%04d", 21+n))
		},
		order: func(t *testing.T, ref string) (int, string, int) {
			no, err := wechatpay.OutBillNo(ref)
			if err != nil {
				t.Fatal(err)
			}
			calls, b := p.Transfers(no)
			if b == nil {
				return calls, "", 0
			}
			return calls, wechatpay.Yuan(b.TransferAmount).StringFixed(2), b.Queries
		}}
}

// railAmountMismatches reads gpubill_payout_rail_amount_mismatches_total of
// a rail from the default registry (0 when it has no series).
func railAmountMismatches(t *testing.T, rail string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gpubill_payout_rail_amount_mismatches_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "rail" && lp.GetValue() == rail {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A payout paid at its rail after the snapshot is gone with the disaster,
// and settlement settles its provider again after the restore (its
// settled message sent again). The payout made again must reach the rail
// under the reference the rail paid: Alipay and WeChat Pay are asked for
// it, answer it paid, and are not sent a second transfer. With a new
// random payout id it was: the provider was paid twice. Both stacks run on
// one Temporal, as test stacks do, each on its task queue: the restored
// one's workflow (the same payout id) must not be taken for the source's
// run, still watching for a return (domain.WorkflowIDOn).
//
// Made again with another net (usage after the point not sent again:
// 300.00 where the rail paid 320.00), the payout is not recorded paid at
// an amount the rail never moved (it was: the books said 300.00 paid, the
// rail paid 320.00), nor sent again: it stays submitted, its net in
// in_transit, with failure_code rail_amount_mismatch naming both amounts,
// counted once, for finance to review; polled again, it stays there.
func TestRestoreNeverPaysAPayoutTwice(t *testing.T) {
	t.Parallel()
	for _, newRail := range []func(*testing.T) restoreRail{alipayRestoreRail, wechatRestoreRail} {
		rail := newRail(t)
		t.Run(rail.name, func(t *testing.T) {
			t.Parallel()
			restoreNeverPaysTwice(t, rail)
		})
	}
}

func restoreNeverPaysTwice(t *testing.T, rail restoreRail) {
	ctx := context.Background()
	const same, other, cyc = "pr-restore-same", "pr-restore-other", "cyc-20260101"
	src := rail.stackOn(t, "")
	rail.setup(t, src, same, 0)
	rail.setup(t, src, other, 1)
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := backup.Take(ctx, src.dsn, dir, backup.Tools{}, time.Now()); err != nil {
		t.Fatal(err)
	}

	// After the snapshot, before the disaster: settled and paid.
	src.settle(t, same, cyc, "CNY", "320.00")
	src.settle(t, other, cyc, "CNY", "320.00")
	paid := src.waitStatus(t, same, cyc, "paid", waitLong)
	paidOther := src.waitStatus(t, other, cyc, "paid", waitLong)
	src.stopPayout()

	dst := testkit.NewDatabase(t)
	if _, err := backup.Restore(ctx, dst, dir, backup.Tools{}); err != nil {
		t.Fatal(err)
	}
	mismatches := railAmountMismatches(t, rail.name)
	restored := rail.stackOn(t, dst)
	restored.settle(t, same, cyc, "CNY", "320.00")
	restored.settle(t, other, cyc, "CNY", "300.00")
	again := restored.waitStatus(t, same, cyc, "paid", waitLong)
	if again.PayoutId != paid.PayoutId {
		calls, amount, _ := rail.order(t, again.PayoutId)
		t.Errorf("the payout made again after the restore is %s, the one paid before it %s: %d transfer calls of %s under the new "+
			"reference: the provider is paid twice", again.PayoutId, paid.PayoutId, calls, amount)
	}
	if calls, amount, queries := rail.order(t, paid.PayoutId); calls != 1 || amount != "320.00" || queries == 0 {
		t.Errorf("%s at the platform: %d transfer calls (want 1) of %q (want 320.00), queried %d times (want it queried after the restore)",
			paid.PayoutId, calls, amount, queries)
	}

	// Made again at 300.00, where the rail paid 320.00.
	flagged := restored.waitPayout(t, other, cyc, "rail_amount_mismatch or paid", waitLong, func(p *payoutv1.Payout) bool {
		return p.FailureCode == "rail_amount_mismatch" || p.Status == "paid"
	})
	_, _, queried := rail.order(t, paidOther.PayoutId)
	if flagged.PayoutId != paidOther.PayoutId || flagged.Status != "submitted" || flagged.FailureCode != "rail_amount_mismatch" ||
		!strings.Contains(flagged.FailureMessage, "320.00") || !strings.Contains(flagged.FailureMessage, "300.00") || flagged.Net != "300.00" {
		t.Fatalf("the payout made again at another net: %s %s net %s, failure %q %q, history %s; want %s submitted, "+
			"rail_amount_mismatch naming 320.00 and 300.00", flagged.PayoutId, flagged.Status, flagged.Net, flagged.FailureCode,
			flagged.FailureMessage, history(flagged), paidOther.PayoutId)
	}
	// Polled again (the workflow follows a submitted payout), it stays.
	testkit.Eventually(t, waitLong, func() bool {
		_, _, q := rail.order(t, paidOther.PayoutId)
		return q >= queried+2
	}, "the flagged payout queried again")
	p := restored.waitStatus(t, other, cyc, "submitted", 0)
	if h := history(p); strings.Contains(h, "in_transit") || strings.Contains(h, "paid") || p.FailureCode != "rail_amount_mismatch" {
		t.Errorf("the flagged payout went on: history %s, failure %q", h, p.FailureCode)
	}
	if calls, amount, _ := rail.order(t, paidOther.PayoutId); calls != 1 || amount != "320.00" {
		t.Errorf("%s at the platform: %d transfer calls of %q; want the one of 320.00 before the disaster", paidOther.PayoutId, calls, amount)
	}
	if n := railAmountMismatches(t, rail.name) - mismatches; n != 1 {
		t.Errorf("gpubill_payout_rail_amount_mismatches_total{rail=%q} rose by %v; want 1", rail.name, n)
	}
	// The net is held in in_transit: not available to be paid again.
	restored.checkProvider(t, other, "CNY", "0", "300.00")
	restored.checkProvider(t, same, "CNY", "0", "0")
	resolveRailAmountMismatch(t, restored, flagged, paid.PayoutId)
}

// resolveRailAmountMismatch closes the flagged payout as finance does,
// having compared the rail's bill (320.00) with the payout (300.00): it
// stayed submitted for ever, its workflow polling the rail, no operation
// moving it. Only finance may; only at the rail's amount the flag recorded;
// only a flagged payout (paidID is one paid normally). The call records the
// resolution (its history names the reason, both amounts and the 20.00
// difference nobody posts) and posts nothing; its workflow, woken, takes
// the rail's 320.00 as resolved and records it paid at its net (in_transit
// emptied by its own paid posting), then ends; the same call again answers
// 200 with no second resolution and no second paid.
func resolveRailAmountMismatch(t *testing.T, st *stack, flagged *payoutv1.Payout, paidID string) {
	t.Helper()
	path := func(id string) string { return "/v1/payouts/" + id + ":resolve-amount-mismatch" }
	const body = `{"reason":"bill 2026-01 line 7: 320.00 paid before the disaster","rail_amount":"320.00"}`
	refused := []struct {
		give, role, id, body string
		wantCode             int
		wantSays             []string
	}{
		{"a provider", auth.RoleProvider, flagged.PayoutId, body, http.StatusForbidden, nil},
		{"no reason", auth.RoleFinance, flagged.PayoutId, `{"rail_amount":"320.00"}`, http.StatusBadRequest, []string{"reason"}},
		{"no rail amount", auth.RoleFinance, flagged.PayoutId, `{"reason":"checked"}`, http.StatusBadRequest, []string{"rail_amount"}},
		{"the payout's net", auth.RoleFinance, flagged.PayoutId, `{"reason":"checked","rail_amount":"300.00"}`, http.StatusConflict,
			[]string{"320.00", "300.00"}},
		{"not flagged", auth.RoleFinance, paidID, body, http.StatusConflict, []string{"rail_amount_mismatch"}},
		{"unknown", auth.RoleFinance, "po_unknown", body, http.StatusNotFound, nil},
	}
	for _, tt := range refused {
		code, got := st.post(t, path(tt.id), tt.role, "fin-1", tt.body)
		if code != tt.wantCode {
			t.Errorf("%s: %d %s; want %d", tt.give, code, got, tt.wantCode)
		}
		for _, w := range tt.wantSays {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %d %s; want it to name %s", tt.give, code, got, w)
			}
		}
	}
	answers := [2]*payoutv1.Payout{{}, {}}
	for i := range answers {
		code, got := st.post(t, path(flagged.PayoutId), auth.RoleFinance, "fin-1", body)
		if code != http.StatusOK {
			t.Fatalf("resolve %s (call %d): %d %s", flagged.PayoutId, i+1, code, got)
		}
		if err := protojson.Unmarshal([]byte(got), answers[i]); err != nil {
			t.Fatalf("resolve %s: %v in %s", flagged.PayoutId, err, got)
		}
	}
	for i, a := range answers {
		// Its workflow records paid through in_transit (as it records any
		// rail's paid): the second answer may come between the two.
		if a.Status != "submitted" && a.Status != "in_transit" && a.Status != "paid" {
			t.Errorf("resolve (call %d): %s, history %s; want submitted (its workflow not yet past it), in_transit or paid",
				i+1, a.Status, history(a))
		}
		if n := resolutionNotes(t, a); n != 1 {
			t.Errorf("resolve (call %d): the resolution noted %d times in the history; want once", i+1, n)
		}
	}
	p := st.waitStatus(t, flagged.ProviderId, flagged.CycleId, "paid", waitLong)
	if last := p.StatusHistory[len(p.StatusHistory)-1]; p.FailureCode != "" || last.Status != "paid" || resolutionNotes(t, p) != 1 {
		t.Fatalf("resolved: %s, failure %q, history %s; want paid by its workflow, no failure, the resolution noted once",
			p.Status, p.FailureCode, history(p))
	}
	st.checkProvider(t, flagged.ProviderId, "CNY", "0", "0")
	testkit.Eventually(t, waitLong, func() bool {
		d, err := st.tc.DescribeWorkflowExecution(context.Background(), st.s.WorkflowID(flagged.PayoutId), "")
		return err == nil && d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}, "the resolved payout's workflow completed")
	// Its workflow's last polls took the rail's 320.00 as resolved: not flagged again.
	if p = st.waitStatus(t, flagged.ProviderId, flagged.CycleId, "paid", 0); p.FailureCode != "" || strings.Count(history(p), "paid") != 1 {
		t.Errorf("after its workflow ended: %s, failure %q, history %s; want paid once, no failure", p.Status, p.FailureCode, history(p))
	}
}

// resolutionNotes counts p's history notes resolving its
// rail_amount_mismatch, each checked to name the reason, both amounts and
// the difference.
func resolutionNotes(t *testing.T, p *payoutv1.Payout) int {
	t.Helper()
	n := 0
	for _, c := range p.StatusHistory {
		if !strings.Contains(c.Note, "rail_amount_mismatch resolved by") {
			continue
		}
		n++
		for _, w := range []string{"bill 2026-01 line 7", "320.00", "300.00", "20.00"} {
			if !strings.Contains(c.Note, w) {
				t.Errorf("the resolution's history note %q does not name %s", c.Note, w)
			}
		}
	}
	return n
}

// post sends body to the stack's REST API with a token of role and subject.
func (st *stack) post(t *testing.T, path, role, sub, body string) (int, string) {
	t.Helper()
	tok, err := auth.Issue(st.secret, role, sub, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+st.http+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
