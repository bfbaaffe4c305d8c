package payoutstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/iso20022/fakebank"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/backup"
	"github.com/gpubill/gpubill/services/payout"
)

// restBody calls the REST API with a body of the given content type.
// cutOne is CutBankBatch's answer where a test cuts fewer transfers than a
// file takes: its one file's id ("" : none); more is an error.
func cutOne(ids []string, built bool, err error) (string, bool, error) {
	switch {
	case err != nil || len(ids) == 0:
		return "", built, err
	case len(ids) > 1:
		return "", built, fmt.Errorf("cut %d files %v, want at most one", len(ids), ids)
	}
	return ids[0], built, nil
}

func (st *stack) restBody(t testing.TB, method, path, role, contentType string, body []byte) (int, string) {
	t.Helper()
	sub := ""
	if role == auth.RoleProvider {
		sub = "p-someone"
	}
	tok, err := auth.Issue(st.secret, role, sub, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, "http://"+st.http+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", contentType)
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

var clientAccount = iso20022.Party{Name: "GPU Market Ltd client money", Account: "GB33BUKB20201555555555", Agent: "BUKBGB22"}

// bankStack is the stack with bank payouts on the bank-file rail, its
// outbox and inbox in temporary directories, read every 100 ms.
func bankStack(t *testing.T) (*stack, *fakebank.Bank) {
	t.Helper()
	out, in := t.TempDir(), t.TempDir()
	st := newStack(t, payout.Config{BankRail: payout.BankRailFile, Bank: payout.BankConfig{Debtor: clientAccount, CutoffHour: 14,
		OutboxDir: out, InboxDir: in, Tick: 100 * time.Millisecond}})
	return st, fakebank.New(out, in, clientAccount.Account)
}

// step checks every provider's accounts and bank:client after a step.
type ledgerWant struct{ available, inTransit string }

func (st *stack) checkStep(t *testing.T, step string, want map[string]ledgerWant, paidOut decimal.Decimal) {
	t.Helper()
	for p, w := range want {
		if got := st.balance(t, "provider:"+p+":available", "CNY"); !got.Equal(decimal.RequireFromString(w.available)) {
			t.Errorf("%s: %s available %s, want %s", step, p, got, w.available)
		}
		if got := st.balance(t, "provider:"+p+":in_transit", "CNY"); !got.Equal(decimal.RequireFromString(w.inTransit)) {
			t.Errorf("%s: %s in_transit %s, want %s", step, p, got, w.inTransit)
		}
	}
	st.mu.Lock()
	deposited := st.deposits["CNY"]
	st.mu.Unlock()
	if got := st.balance(t, "bank:client", "CNY"); !got.Equal(deposited.Sub(paidOut)) {
		t.Errorf("%s: bank:client %s, want deposits %s - paid out %s", step, got, deposited, paidOut)
	}
}

// waitInboxEmpty waits until the rail has taken every file the bank dropped.
func waitInboxEmpty(t *testing.T, dir string) {
	t.Helper()
	testkit.Eventually(t, waitLong, func() bool {
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range des {
			if de.Type().IsRegular() {
				return false
			}
		}
		return true
	})
}

// Payouts through the bank-file rail end to end against a local fake
// bank, with the real ledger and Temporal: three providers are paid in one
// pain.001 (the bank reads it from the outbox), the bank answers into the
// inbox — a pain.002 accepting two and rejecting one (AC06), a camt.054
// booking the two, and days later a camt.054 returning one (no Rsn, only
// AddtlInf, beside a malformed entry of another account) after its
// workflow had ended — plus a duplicate pain.002 and a resent pain.001
// the bank refuses as a duplicate (DU01): those change nothing.
// After each step every provider account and bank:client are exact.
func TestBankFileRailEndToEnd(t *testing.T) {
	t.Parallel()
	st, bank := bankStack(t)
	ctx := context.Background()
	const cyc = "cyc-20260101"
	st.setup(t, "pb-paid", "6222000011110001")
	st.setup(t, "pb-frozen", "6222000011110002")
	st.setup(t, "pb-ret", "6222000011110003")
	for _, s := range []struct{ p, net string }{{"pb-paid", "620.00"}, {"pb-frozen", "300.00"}, {"pb-ret", "150.00"}} {
		st.settle(t, s.p, cyc, "CNY", s.net)
	}
	paidOut := decimal.Zero

	// Submitted: queued for the next cutoff, the money in transit.
	ids := map[string]string{}
	for _, p := range []string{"pb-paid", "pb-frozen", "pb-ret"} {
		po := st.waitStatus(t, p, cyc, "submitted", waitLong)
		ids[p] = po.PayoutId
		if !strings.Contains(po.StatusHistory[len(po.StatusHistory)-1].Note, "submitted to bank-file") {
			t.Errorf("%s: %s", p, po.StatusHistory[len(po.StatusHistory)-1].Note)
		}
	}
	st.checkStep(t, "submitted", map[string]ledgerWant{"pb-paid": {"0", "620.00"}, "pb-frozen": {"0", "300.00"}, "pb-ret": {"0", "150.00"}}, paidOut)

	// The cutoff: one batch, delivered to the outbox; a re-run builds nothing.
	id, built, err := cutOne(st.s.TestHooks().CutBankBatch(ctx, time.Now()))
	if err != nil || !built {
		t.Fatal(id, built, err)
	}
	if again, built, err := cutOne(st.s.TestHooks().CutBankBatch(ctx, time.Now().Add(time.Minute))); err != nil || built || again != "" {
		t.Errorf("a second cutoff with nothing queued: %q %v %v", again, built, err)
	}
	testkit.Eventually(t, waitLong, func() bool { _, err := os.Stat(filepath.Join(bank.Outbox, id+".xml")); return err == nil })
	files, err := bank.Take()
	if err != nil || len(files) != 1 {
		t.Fatalf("the bank took %d files: %v", len(files), err)
	}
	f := files[0]
	var e2e []string
	for _, pi := range f.Msg.PaymentInfos {
		for _, tr := range pi.Transfers {
			e2e = append(e2e, tr.EndToEndID)
		}
	}
	if f.Msg.MessageID != id || len(e2e) != 3 || !f.Msg.ControlSum.Equal(decimal.RequireFromString("1070.00")) {
		t.Errorf("the file: %s %v %s", f.Msg.MessageID, e2e, f.Msg.ControlSum)
	}
	// Finance sees the batch and downloads the same bytes.
	code, body := st.restBody(t, "GET", "/v1/payout-batches", auth.RoleFinance, "application/json", nil)
	if code != 200 || !strings.Contains(body, `"batch_id":"`+id+`"`) || !strings.Contains(body, `"control_sum":"1070.00"`) || !strings.Contains(body, `"transfers":3`) {
		t.Errorf("GET /v1/payout-batches: %d %s", code, body)
	}
	code, body = st.restBody(t, "GET", "/v1/payout-batches/"+id+"/file", auth.RoleFinance, "application/json", nil)
	if code != 200 || body != string(f.Raw) {
		t.Errorf("GET file: %d, %d bytes, want the %d delivered", code, len(body), len(f.Raw))
	}
	if code, _ := st.restBody(t, "GET", "/v1/payout-batches/"+id+"/file", auth.RoleProvider, "application/json", nil); code != http.StatusForbidden {
		t.Errorf("a provider downloads the batch file: %d", code)
	}
	st.checkStep(t, "batched", map[string]ledgerWant{"pb-paid": {"0", "620.00"}, "pb-frozen": {"0", "300.00"}, "pb-ret": {"0", "150.00"}}, paidOut)

	// pain.002: two accepted (in transit), one rejected AC06 (failed, money back).
	sts := bank.StatusReport(f)
	if err := bank.Drop("sts-1.xml", sts); err != nil {
		t.Fatal(err)
	}
	st.waitStatus(t, "pb-paid", cyc, "in_transit", waitLong)
	st.waitStatus(t, "pb-ret", cyc, "in_transit", waitLong)
	po := st.waitStatus(t, "pb-frozen", cyc, "failed", waitLong)
	if po.FailureCode != "account_frozen" || !strings.HasPrefix(po.FailureMessage, "AC06 blocked account: account blocked") {
		t.Errorf("pb-frozen: %s %q", po.FailureCode, po.FailureMessage)
	}
	afterStatus := map[string]ledgerWant{"pb-paid": {"0", "620.00"}, "pb-frozen": {"300.00", "0"}, "pb-ret": {"0", "150.00"}}
	st.checkStep(t, "pain.002", afterStatus, paidOut)

	// The same pain.002 again, and a resent pain.001 the bank refuses as a
	// duplicate: nothing moves.
	if err := bank.Drop("sts-1-again.xml", sts); err != nil {
		t.Fatal(err)
	}
	dup, err := bank.Resend(f.Name, f.Raw)
	if err != nil || !dup.Duplicate {
		t.Fatal(dup.Duplicate, err)
	}
	if err := bank.Drop("sts-dup.xml", bank.StatusReport(dup)); err != nil {
		t.Fatal(err)
	}
	waitInboxEmpty(t, bank.Inbox)
	for p, want := range map[string]string{"pb-paid": "in_transit", "pb-ret": "in_transit", "pb-frozen": "failed"} {
		if got := st.waitStatus(t, p, cyc, want, time.Second); len(got.StatusHistory) == 0 {
			t.Errorf("%s history empty", p)
		}
	}
	st.checkStep(t, "duplicates", afterStatus, paidOut)

	// camt.054: both accepted payments booked: paid, out of bank:client.
	if err := bank.Drop("ntf-1.xml", bank.Bookings(f)); err != nil {
		t.Fatal(err)
	}
	st.waitStatus(t, "pb-paid", cyc, "paid", waitLong)
	st.waitStatus(t, "pb-ret", cyc, "paid", waitLong)
	paidOut = paidOut.Add(decimal.RequireFromString("770.00"))
	st.checkStep(t, "camt.054 booked", map[string]ledgerWant{"pb-paid": {"0", "0"}, "pb-frozen": {"300.00", "0"}, "pb-ret": {"0", "0"}}, paidOut)

	// The return comes after pb-ret's workflow stopped watching (4 s in
	// tests): the import starts it again and it follows the rail.
	testkit.Eventually(t, waitLong, func() bool {
		d, err := st.tc.DescribeWorkflowExecution(ctx, st.s.WorkflowID(ids["pb-ret"]), "")
		return err == nil && d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	// The return gives no Rsn (optional: only AddtlInf), and the file
	// carries a malformed entry of another account: both refused the
	// whole file, the payout left paid and its provider never credited.
	ret := bank.Returns(f)
	ret = bytes.Replace(ret, []byte("<Rsn><Cd>AC04</Cd></Rsn>"), nil, 1)
	ret = bytes.Replace(ret, []byte("</Ntfctn></BkToCstmrDbtCdtNtfctn>"), []byte(`</Ntfctn><Ntfctn><Id>N-OTHER</Id><Acct><Id><IBAN>GB94BARC10201530093459</IBAN></Id></Acct>
<Ntry><Amt Ccy="CNY">1,000.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>2026-12-02</Dt></BookgDt></Ntry>
</Ntfctn></BkToCstmrDbtCdtNtfctn>`), 1)
	if err := bank.Drop("ntf-2.xml", ret); err != nil {
		t.Fatal(err)
	}
	po = st.waitStatus(t, "pb-ret", cyc, "returned", waitLong)
	if po.FailureCode != "bank_rejected" || po.FailureMessage != "no reason given: account closed after payment" {
		t.Errorf("pb-ret: %s %q", po.FailureCode, po.FailureMessage)
	}
	paidOut = paidOut.Sub(decimal.RequireFromString("150.00"))
	final := map[string]ledgerWant{"pb-paid": {"0", "0"}, "pb-frozen": {"300.00", "0"}, "pb-ret": {"150.00", "0"}}
	st.checkStep(t, "camt.054 return", final, paidOut)

	// Upload: the return again is a duplicate; an unknown EndToEndId is
	// reported, not dropped; a malformed file is a 400 naming the element.
	code, body = st.restBody(t, "POST", "/v1/bank-files?name=ntf-2.xml", auth.RoleFinance, "application/xml", ret)
	var rep struct {
		Duplicate  bool `json:"duplicate"`
		NotApplied int  `json:"not_applied"`
		Entries    []struct {
			EndToEndID string `json:"end_to_end_id"`
			Outcome    string `json:"outcome"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil || !rep.Duplicate {
		t.Errorf("upload of an imported file: %d %s %v", code, body, err)
	}
	booked, known := bank.Bookings(f), "" // a booked payment's EndToEndId (the file's order is the payout ids')
	for _, e := range e2e {
		if bytes.Contains(booked, []byte("<EndToEndId>"+e+"<")) {
			known = e
			break
		}
	}
	unknown := bytes.Replace(booked, []byte("<EndToEndId>"+known), []byte("<EndToEndId>nobody-"+known[:8]), 1)
	code, body = st.restBody(t, "POST", "/v1/bank-files", auth.RoleFinance, "text/xml", unknown)
	rep.Duplicate, rep.NotApplied, rep.Entries = false, 0, nil
	if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil || rep.Duplicate || rep.NotApplied != 1 ||
		len(rep.Entries) != 2 || !strings.Contains(body, `"outcome":"unknown_reference"`) {
		t.Errorf("upload with an unknown EndToEndId: %d %s %v", code, body, err)
	}
	// A malformed entry is reported unreadable, naming its element (the
	// file's other entries would be applied); a file malformed as a whole
	// is a 400 naming the element.
	bad := bytes.Replace(ret, []byte("<CdtDbtInd>CRDT</CdtDbtInd><Sts>"), []byte("<CdtDbtInd>UP</CdtDbtInd><Sts>"), 1)
	code, body = st.restBody(t, "POST", "/v1/bank-files", auth.RoleFinance, "application/xml", bad)
	rep.Duplicate, rep.NotApplied, rep.Entries = false, 0, nil
	if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil || rep.NotApplied != 1 || len(rep.Entries) != 2 ||
		rep.Entries[0].Outcome != "unreadable" || !strings.Contains(body, "BkToCstmrDbtCdtNtfctn/Ntfctn[0]/Ntry[0]/CdtDbtInd") {
		t.Errorf("upload with a malformed entry: %d %s %v", code, body, err)
	}
	bad = bytes.Replace(ret, []byte("<CreDtTm>"), []byte("<CreDtTm>yesterday "), 1)
	code, body = st.restBody(t, "POST", "/v1/bank-files", auth.RoleFinance, "application/xml", bad)
	if code != 400 || !strings.Contains(body, "BkToCstmrDbtCdtNtfctn/GrpHdr/CreDtTm") || strings.Contains(body, "internal") {
		t.Errorf("malformed upload: %d %s", code, body)
	}
	code, body = st.restBody(t, "POST", "/v1/bank-files", auth.RoleFinance, "application/xml", []byte("   "))
	if code != 400 || !strings.Contains(body, `"content"`) {
		t.Errorf("empty upload: %d %s", code, body)
	}
	st.checkStep(t, "uploads", final, paidOut)
	st.checkFunds(t, "CNY", paidOut)
	if n, err := st.s.TestHooks().BankSubmissions(ctx, ids["pb-paid"]); err != nil || n != 1 {
		t.Errorf("pb-paid submitted %d times: %v", n, err)
	}
}

// A restore holds the bank-file rail. The payout was queued at the
// snapshot and sent in a file after it: the bank has it, the restored
// database has it queued again. The restored stack cuts and delivers
// nothing; the bank's reports since the snapshot, copied into the inbox,
// are imported while held (the payout is paid); finance reads the hold
// and releases it (a second release answers the first; a provider may do
// neither); then no file carries the payout again.
func TestRestoreHoldsTheBankFileRail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	out, in := t.TempDir(), t.TempDir() // the bank's directories outlive the disaster
	cfg := payout.Config{BankRail: payout.BankRailFile, Bank: payout.BankConfig{Debtor: clientAccount, CutoffHour: 14,
		OutboxDir: out, InboxDir: in, Tick: 100 * time.Millisecond}}
	bank := fakebank.New(out, in, clientAccount.Account)
	const provider, cyc = "pb-restored", "cyc-20260101"
	src := newStack(t, cfg)
	src.setup(t, provider, "6222000011110001")
	src.settle(t, provider, cyc, "CNY", "620.00")
	po := src.waitStatus(t, provider, cyc, "submitted", waitLong)
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := backup.Take(ctx, src.dsn, dir, backup.Tools{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// After the snapshot: the payout goes to the bank.
	id, built, err := cutOne(src.s.TestHooks().CutBankBatch(ctx, time.Now()))
	if err != nil || !built {
		t.Fatal(id, built, err)
	}
	testkit.Eventually(t, waitLong, func() bool { _, err := os.Stat(filepath.Join(out, id+".xml")); return err == nil })
	files, err := bank.Take()
	if err != nil || len(files) != 1 {
		t.Fatalf("the bank took %d files: %v", len(files), err)
	}
	src.stopPayout()
	if err := src.tc.TerminateWorkflow(ctx, src.s.WorkflowID(po.PayoutId), "", "disaster"); err != nil {
		t.Fatal(err)
	}

	dst := testkit.NewDatabase(t)
	if res, err := backup.Restore(ctx, dst, dir, backup.Tools{}); err != nil || !res.BankFilesHeld {
		t.Fatalf("restore: %+v %v", res, err)
	}
	restored := newStackOn(t, dst, cfg)
	code, body := restored.restBody(t, "GET", "/v1/bank-files/restore-hold", auth.RoleFinance, "application/json", nil)
	if code != http.StatusOK || !strings.Contains(body, `"held":true`) || !strings.Contains(body, `"queued_transfers":1`) {
		t.Errorf("GET the hold after the restore: %d %s; want held, the payout queued again", code, body)
	}
	if _, built, err := cutOne(restored.s.TestHooks().CutBankBatch(ctx, time.Now())); err == nil || built || !strings.Contains(err.Error(), "held") {
		t.Errorf("a cut while held: built %v, %v; want refused as held", built, err)
	}

	// The bank's reports since the snapshot, copied into the inbox.
	for name, f := range map[string][]byte{"sts.xml": bank.StatusReport(files[0]), "ntf.xml": bank.Bookings(files[0])} {
		if err := bank.Drop(name, f); err != nil {
			t.Fatal(err)
		}
	}
	restored.waitStatus(t, provider, cyc, "paid", waitLong)
	restored.checkProvider(t, provider, "CNY", "0", "0")

	for _, c := range []struct{ method, path string }{{"GET", "/v1/bank-files/restore-hold"}, {"POST", "/v1/bank-files:release-restore-hold"}} {
		if code, body := restored.restBody(t, c.method, c.path, auth.RoleProvider, "application/json", []byte("{}")); code != http.StatusForbidden {
			t.Errorf("a provider's %s %s: %d %s, want 403", c.method, c.path, code, body)
		}
	}
	code, released := restored.restBody(t, "POST", "/v1/bank-files:release-restore-hold", auth.RoleFinance, "application/json", []byte("{}"))
	if code != http.StatusOK || !strings.Contains(released, `"held":false`) || !strings.Contains(released, `"released_by":"finance"`) ||
		!strings.Contains(released, `"queued_transfers":0`) {
		t.Errorf("release: %d %s", code, released)
	}
	if code, again := restored.restBody(t, "POST", "/v1/bank-files:release-restore-hold", auth.RoleFinance, "application/json", []byte("{}")); code != http.StatusOK || again != released {
		t.Errorf("a second release: %d %s; want the first's answer %s", code, again, released)
	}
	if id, built, err := cutOne(restored.s.TestHooks().CutBankBatch(ctx, time.Now())); err != nil || built || id != "" {
		t.Errorf("a cut after the release: %q built %v, %v; want nothing to send", id, built, err)
	}
	// The restored database had no batch and has none (a batch cut now
	// may even take the id of the file cut after the snapshot).
	if code, body := restored.restBody(t, "GET", "/v1/payout-batches", auth.RoleFinance, "application/json", nil); code != http.StatusOK ||
		!strings.Contains(body, `"batches":[]`) {
		t.Errorf("GET /v1/payout-batches after the release: %d %s; want none: the bank has the payout", code, body)
	}
	if files, err := bank.Take(); err != nil || len(files) != 0 {
		t.Errorf("the bank got %d more files (%v); want none: it has the payout", len(files), err)
	}
}

// A payout queued before the snapshot and sent after it in a batch lost
// with the disaster, whose only report at the bank is a group status
// (GrpSts ACCP, no payment named): through REST the restore hold lists it
// in review (not queued: a release does not send it), a provider may not
// resolve it, and finance resolves it paid at the amount the bank paid,
// once (the same call again answers the same; another resolution is a
// 409), kept with who and why. The payout is paid and the release sends
// nothing.
func TestRestoreReviewResolvedThroughREST(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	out, in := t.TempDir(), t.TempDir()
	cfg := payout.Config{BankRail: payout.BankRailFile, Bank: payout.BankConfig{Debtor: clientAccount, CutoffHour: 14,
		OutboxDir: out, InboxDir: in, Tick: 100 * time.Millisecond}}
	bank := fakebank.New(out, in, clientAccount.Account)
	const provider, cyc = "pb-review", "cyc-20260101"
	src := newStack(t, cfg)
	src.setup(t, provider, "6222000011110001")
	src.settle(t, provider, cyc, "CNY", "620.00")
	po := src.waitStatus(t, provider, cyc, "submitted", waitLong)
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := backup.Take(ctx, src.dsn, dir, backup.Tools{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	id, built, err := cutOne(src.s.TestHooks().CutBankBatch(ctx, time.Now()))
	if err != nil || !built {
		t.Fatal(id, built, err)
	}
	testkit.Eventually(t, waitLong, func() bool { _, err := os.Stat(filepath.Join(out, id+".xml")); return err == nil })
	if files, err := bank.Take(); err != nil || len(files) != 1 {
		t.Fatalf("the bank took %d files: %v", len(files), err)
	}
	src.stopPayout()
	if err := src.tc.TerminateWorkflow(ctx, src.s.WorkflowID(po.PayoutId), "", "disaster"); err != nil {
		t.Fatal(err)
	}
	dst := testkit.NewDatabase(t)
	if res, err := backup.Restore(ctx, dst, dir, backup.Tools{}); err != nil || !res.BankFilesHeld {
		t.Fatalf("restore: %+v %v", res, err)
	}
	restored := newStackOn(t, dst, cfg)

	// The bank's only report on the lost batch: accepted, as a group.
	report := `<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10"><CstmrPmtStsRpt>
<GrpHdr><MsgId>STS-GRP-1</MsgId><CreDtTm>` + time.Now().UTC().Format(time.RFC3339) + `</CreDtTm></GrpHdr>
<OrgnlGrpInfAndSts><OrgnlMsgId>` + id + `</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId><GrpSts>ACCP</GrpSts></OrgnlGrpInfAndSts>
</CstmrPmtStsRpt></Document>`
	code, body := restored.restBody(t, "POST", "/v1/bank-files?name=grp.xml", auth.RoleFinance, "application/xml", []byte(report))
	if code != http.StatusOK || !strings.Contains(body, `"outcome":"lost_batch"`) || !strings.Contains(body, `"outcome":"review"`) {
		t.Fatalf("the group report on the lost batch: %d %s; want a lost_batch entry and the payout's transfer in review", code, body)
	}
	code, body = restored.restBody(t, "GET", "/v1/bank-files/restore-hold", auth.RoleFinance, "application/json", nil)
	var hold struct {
		QueuedTransfers int `json:"queued_transfers"`
		ReviewTransfers int `json:"review_transfers"`
		InReview        []struct {
			EndToEndID      string `json:"end_to_end_id"`
			PayoutReference string `json:"payout_reference"`
			Cause           string `json:"cause"`
		} `json:"in_review"`
	}
	if err := json.Unmarshal([]byte(body), &hold); code != http.StatusOK || err != nil || hold.QueuedTransfers != 0 || hold.ReviewTransfers != 1 ||
		len(hold.InReview) != 1 || hold.InReview[0].PayoutReference != po.PayoutId || hold.InReview[0].Cause != "lost_batch" {
		t.Fatalf("GET the hold: %d %s (%v); want the payout in review, nothing queued", code, body, err)
	}
	path := "/v1/bank-transfers/" + hold.InReview[0].EndToEndID + ":resolve"
	paid := []byte(`{"resolution":"paid","amount":"620.00","currency":"CNY","reason":"client account statement 2026-12-02, line 7"}`)
	if code, body := restored.restBody(t, "POST", path, auth.RoleProvider, "application/json", paid); code != http.StatusForbidden {
		t.Errorf("a provider's resolution: %d %s, want 403", code, body)
	}
	code, resolved := restored.restBody(t, "POST", path, auth.RoleFinance, "application/json", paid)
	if code != http.StatusOK || !strings.Contains(resolved, `"resolution":"paid"`) || !strings.Contains(resolved, `"paid_amount":"620.00"`) ||
		!strings.Contains(resolved, `"state":"booked"`) || !strings.Contains(resolved, `"resolved_by":"finance"`) {
		t.Fatalf("finance's resolution paid: %d %s", code, resolved)
	}
	restored.waitStatus(t, provider, cyc, "paid", waitLong)
	restored.checkProvider(t, provider, "CNY", "0", "0")
	if code, again := restored.restBody(t, "POST", path, auth.RoleFinance, "application/json", paid); code != http.StatusOK || again != resolved {
		t.Errorf("the same resolution again: %d %s; want the first's answer %s", code, again, resolved)
	}
	if code, body := restored.restBody(t, "POST", path, auth.RoleFinance, "application/json",
		[]byte(`{"resolution":"requeue","reason":"changed my mind"}`)); code != http.StatusConflict {
		t.Errorf("another resolution after it: %d %s, want 409", code, body)
	}
	if code, body := restored.restBody(t, "POST", "/v1/bank-files:release-restore-hold", auth.RoleFinance, "application/json", []byte("{}")); code != http.StatusOK {
		t.Fatalf("release: %d %s", code, body)
	}
	if id, built, err := cutOne(restored.s.TestHooks().CutBankBatch(ctx, time.Now())); err != nil || built || id != "" {
		t.Errorf("a cut after the release: %q built %v, %v; want nothing to send (the bank paid the payout)", id, built, err)
	}
}
