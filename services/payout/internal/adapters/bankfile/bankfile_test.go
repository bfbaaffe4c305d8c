package bankfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/iso20022/fakebank"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

var debtor = iso20022.Party{Name: "GPU Market client money", Account: "GB33BUKB20201555555555", Agent: "BUKBGB22"}

// day1 is 2026-12-01 10:00 in Shanghai; the cutoff is 14:00 there.
var (
	shanghai = mustLocation("Asia/Shanghai")
	day1     = time.Date(2026, 12, 1, 10, 0, 0, 0, shanghai)
)

func mustLocation(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err) // the tests' time zone: nothing runs without it
	}
	return loc
}

type fixture struct {
	r      *Rail
	clk    *clock.Manual
	mu     sync.Mutex
	notify []string
}

func newRail(t *testing.T, outbox, inbox string) *fixture {
	t.Helper()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	f := &fixture{clk: clock.NewManual(day1)}
	f.r = &Rail{Pool: pool, Clock: f.clk, Log: slog.New(slog.DiscardHandler),
		Cfg:    Config{Debtor: debtor, CutoffHour: 14, Location: shanghai, OutboxDir: outbox, InboxDir: inbox},
		Notify: func(ref string) { f.mu.Lock(); f.notify = append(f.notify, ref); f.mu.Unlock() }}
	return f
}

func bank(account string) domain.Method {
	return domain.Method{Type: domain.MethodBank, AccountName: "Provider " + account, AccountNumber: account, BankCode: "ICBKCNBJ"}
}

func (f *fixture) submit(t *testing.T, ref, cur, amt string, m domain.Method) app.RailStatus {
	t.Helper()
	st, err := f.r.Submit(context.Background(), app.Transfer{Reference: ref, ProviderID: "p-" + ref, Currency: cur, Amount: decimal.RequireFromString(amt), Method: m})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (f *fixture) state(t *testing.T, ref string) app.RailStatus {
	t.Helper()
	st, err := f.r.Query(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// cutOne is Cut's answer where a test cuts fewer transfers than a file
// takes: its one file's id ("" : none); more is an error.
func cutOne(ids []string, built bool, err error) (string, bool, error) {
	switch {
	case err != nil || len(ids) == 0:
		return "", built, err
	case len(ids) > 1:
		return "", built, fmt.Errorf("cut %d files %v, want at most one", len(ids), ids)
	}
	return ids[0], built, nil
}

func e2es(p iso20022.Pain001) []string {
	var out []string
	for _, pi := range p.PaymentInfos {
		for _, t := range pi.Transfers {
			out = append(out, t.EndToEndID)
		}
	}
	return out
}

// A batch is built once per cutoff from what was queued before it: a
// second cut answers the same batch, a transfer queued after the cutoff
// goes into the next one, no transfer is in two files, and two workers
// cutting at once build one batch.
func TestCutOncePerCutoff(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-a", "CNY", "620.00", bank("6222000011110001"))
	f.submit(t, "po-b", "CNY", "300.50", bank("6222000011110005"))
	f.submit(t, "po-c", "USD", "40.00", bank("DE89370400440532013000"))
	if st := f.state(t, "po-a"); st.State != app.RailAccepted || st.Rail != Name || st.ExpectedArrival.Format(time.DateOnly) != "2026-12-01" {
		t.Errorf("queued: %+v", st)
	}
	cut1 := f.r.LastCutoff(day1.Add(5 * time.Hour)) // 15:00 → today's 14:00
	if want := time.Date(2026, 12, 1, 14, 0, 0, 0, shanghai); !cut1.Equal(want) {
		t.Fatalf("cutoff %s, want %s", cut1, want)
	}
	f.clk.Set(day1.Add(4*time.Hour + 30*time.Minute)) // 14:30: after the cutoff
	f.submit(t, "po-late", "CNY", "100.00", bank("6222000011110006"))

	// Two workers at once: one batch.
	var wg sync.WaitGroup
	ids := make([]string, 2)
	built := make([]bool, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if ids[i], built[i], err = cutOne(f.r.Cut(ctx, cut1)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ids[0] != "pb-20261201-1400" || ids[1] != ids[0] || built[0] == built[1] {
		t.Fatalf("two cuts: %v built %v", ids, built)
	}
	file1, err := f.r.BatchFile(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	p1, err := iso20022.ParsePain001(file1)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e2es(p1), ","); got != "po-a,po-b,po-c" || len(p1.PaymentInfos) != 2 || !p1.ControlSum.Equal(decimal.RequireFromString("960.50")) {
		t.Errorf("batch 1: %s, %d PmtInf, control sum %s", got, len(p1.PaymentInfos), p1.ControlSum)
	}
	b, err := f.r.GetBatch(ctx, ids[0])
	if err != nil || b.Transfers != 3 || len(b.Totals) != 2 || b.Totals[0].Currency != "CNY" || !b.Totals[0].Amount.Equal(decimal.RequireFromString("920.50")) ||
		b.ExecutionDate.Format(time.DateOnly) != "2026-12-01" || b.DeliveredAt != nil {
		t.Errorf("batch 1 row %+v %v", b, err)
	}
	// The same cutoff again: the same batch, nothing new.
	if id, again, err := cutOne(f.r.Cut(ctx, cut1)); err != nil || again || id != ids[0] {
		t.Errorf("re-cut: %s %v %v", id, again, err)
	}
	if st := f.state(t, "po-late"); st.ExpectedArrival.Format(time.DateOnly) != "2026-12-02" {
		t.Errorf("late transfer expected %s", st.ExpectedArrival)
	}
	// The next day's cutoff takes the late one only.
	cut2 := cut1.AddDate(0, 0, 1)
	id2, built2, err := cutOne(f.r.Cut(ctx, cut2))
	if err != nil || !built2 {
		t.Fatal(id2, built2, err)
	}
	file2, err := f.r.BatchFile(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := iso20022.ParsePain001(file2)
	if err != nil || strings.Join(e2es(p2), ",") != "po-late" {
		t.Errorf("batch 2: %v %v", e2es(p2), err)
	}
	// Nothing queued: no batch.
	if id3, built3, err := cutOne(f.r.Cut(ctx, cut2.AddDate(0, 0, 1))); err != nil || built3 || id3 != "" {
		t.Errorf("empty cut: %q %v %v", id3, built3, err)
	}
	list, err := f.r.ListBatches(ctx, "", 10)
	if err != nil || len(list) != 2 || list[0].ID != id2 || list[1].ID != ids[0] {
		t.Errorf("list %+v %v", list, err)
	}
}

// Submission is idempotent by reference; what the rail can never carry
// fails at once, definitely, and a query says the same.
func TestSubmitIdempotentAndRefusals(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-1", "CNY", "100.00", bank("6222000011110001"))
	f.submit(t, "po-1", "CNY", "100.00", bank("6222000011110001"))
	if n, err := f.r.Submissions(ctx, "po-1"); err != nil || n != 2 {
		t.Errorf("submissions %d %v", n, err)
	}
	if _, err := f.r.Query(ctx, "po-never"); !errors.Is(err, app.ErrUnknownReference) {
		t.Errorf("unknown reference: %v", err)
	}
	for _, tc := range []struct {
		ref, cur, amt string
		m             domain.Method
		wantCode      string
	}{
		{"po-alipay", "CNY", "100.00", domain.Method{Type: domain.MethodAlipay, AlipayID: "13800000000"}, domain.FailUnsupported},
		{"po-usdc", "USDC", "100.00", bank("6222000011110001"), domain.FailUnsupported},
		{"po-fine", "CNY", "100.001", bank("6222000011110001"), domain.FailInvalidAmount},
		// 10^16 yuan writes 19 digits (10000000000000000.00): over ISO 20022's 18.
		{"po-huge", "CNY", "10000000000000000", bank("6222000011110001"), domain.FailInvalidAmount},
	} {
		st := f.submit(t, tc.ref, tc.cur, tc.amt, tc.m)
		if st.State != app.RailFailed || st.FailureCode != tc.wantCode || st.Message == "" {
			t.Errorf("%s: %+v, want failed %s", tc.ref, st, tc.wantCode)
		}
	}
	// A long payout id travels compacted, within ISO's 35 characters.
	for _, tc := range []struct{ give, want string }{
		{"po_01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e0f", "01936f4e8a2b7c3d9e4f5a6b7c8d9e0f"},
		{"po_01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e0f-2", "01936f4e8a2b7c3d9e4f5a6b7c8d9e0f-2"},
		{"po-short", "po-short"},
	} {
		if got, err := EndToEndID(tc.give); err != nil || got != tc.want {
			t.Errorf("EndToEndID(%s) = %s %v, want %s", tc.give, got, err, tc.want)
		}
	}
}

// The batch goes to the outbox in one piece: the bytes finance downloads,
// no temporary file left, marked delivered once.
func TestDeliverAtomically(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	f := newRail(t, out, "")
	ctx := context.Background()
	f.submit(t, "po-a", "CNY", "620.00", bank("6222000011110001"))
	id, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	want, err := f.r.BatchFile(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(out, id+".xml"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("delivered file differs from the batch: %v", err)
	}
	des, err := os.ReadDir(out)
	if err != nil || len(des) != 1 {
		t.Errorf("outbox holds %d entries (%v), want the one file", len(des), err)
	}
	if st, err := os.Stat(filepath.Join(out, id+".xml")); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("batch file mode %v %v, want 0640 (the SFTP client's group reads it)", st.Mode(), err)
	}
	b, err := f.r.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if b.DeliveredAt == nil || b.DeliveredPath != filepath.Join(out, id+".xml") {
		t.Errorf("batch not marked delivered: %+v", b)
	}
	// Marked: not written again (the bank's client may have taken and removed it).
	if err := os.Remove(filepath.Join(out, id+".xml")); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	if des, err := os.ReadDir(out); err != nil || len(des) != 0 {
		t.Errorf("a delivered batch was written again (%v)", err)
	}
}

func outcomes(rep app.BankFileImport) map[string]string {
	m := map[string]string{}
	for _, e := range rep.Entries {
		m[e.EndToEndID] = e.Outcome
	}
	return m
}

// The bank's answers move each transfer by its EndToEndId, once: a
// pain.002 accepts or rejects (with the ISO reason mapped), a camt.054
// books or returns; the same file twice changes nothing, an unknown
// EndToEndId is reported, a refusal of a duplicate file leaves the
// original's payments alone, a malformed file names its element.
func TestImportMovesTransfersOnce(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	accounts := map[string]string{"po-paid": "6222000011110001", "po-frozen": "6222000011110002", "po-closed": "6222000011110004", "po-ret": "6222000011110003"}
	for ref, acct := range accounts {
		f.submit(t, ref, "CNY", "150.00", bank(acct))
	}
	id, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	fb := fakebank.New(f.r.Cfg.OutboxDir, f.r.Cfg.InboxDir, debtor.Account)
	files, err := fb.Take()
	if err != nil || len(files) != 1 || files[0].Msg.MessageID != id {
		t.Fatalf("bank took %d files: %v", len(files), err)
	}
	sts := fb.StatusReport(files[0])
	rep, err := f.r.Import(ctx, app.SourceUpload, "sts.xml", sts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"po-paid": app.EntryApplied, "po-frozen": app.EntryApplied, "po-closed": app.EntryApplied, "po-ret": app.EntryApplied}
	for ref, w := range want {
		if outcomes(rep)[ref] != w {
			t.Errorf("pain.002 %s: %s, want %s (%+v)", ref, outcomes(rep)[ref], w, rep.Entries)
		}
	}
	for _, tc := range []struct{ ref, state, code, iso string }{
		{"po-paid", app.RailInTransit, "", ""},
		{"po-frozen", app.RailFailed, domain.FailAccountFrozen, "AC06"},
		{"po-closed", app.RailFailed, domain.FailAccountClosed, "AC04"},
	} {
		st := f.state(t, tc.ref)
		if st.State != tc.state || st.FailureCode != tc.code || !strings.HasPrefix(st.Message, tc.iso) {
			t.Errorf("%s after pain.002: %+v, want %s %s", tc.ref, st, tc.state, tc.code)
		}
	}
	if len(f.notify) != 4 {
		t.Errorf("notified %v, want the 4 moved", f.notify)
	}
	// The same file again: nothing changes, the first report answers.
	f.notify = nil
	again, err := f.r.Import(ctx, app.SourceUpload, "sts-again.xml", sts)
	if err != nil || !again.Duplicate || again.FileID != rep.FileID || len(again.Entries) != len(rep.Entries) || len(f.notify) != 0 {
		t.Errorf("re-import: dup %v id %s/%s entries %d notified %v err %v", again.Duplicate, again.FileID, rep.FileID, len(again.Entries), f.notify, err)
	}
	// The bank refuses a resent copy of the batch (DU01): the original's payments stand.
	dup, err := fb.Resend(files[0].Name, files[0].Raw)
	if err != nil || !dup.Duplicate {
		t.Fatal(dup.Duplicate, err)
	}
	rej, err := f.r.Import(ctx, app.SourceUpload, "dup.xml", fb.StatusReport(dup))
	if err != nil || len(rej.Entries) != 1 || rej.Entries[0].Outcome != app.EntryIgnored || f.state(t, "po-paid").State != app.RailInTransit {
		t.Errorf("duplicate refusal: %+v %v, po-paid %s", rej.Entries, err, f.state(t, "po-paid").State)
	}
	// Booked: paid; returned later: returned with the reason.
	if _, err := f.r.Import(ctx, app.SourceUpload, "book.xml", fb.Bookings(files[0])); err != nil {
		t.Fatal(err)
	}
	if st := f.state(t, "po-paid"); st.State != app.RailPaid {
		t.Errorf("po-paid after camt.054: %+v", st)
	}
	if _, err := f.r.Import(ctx, app.SourceUpload, "ret.xml", fb.Returns(files[0])); err != nil {
		t.Fatal(err)
	}
	if st := f.state(t, "po-ret"); st.State != app.RailReturned || st.FailureCode != domain.FailAccountClosed {
		t.Errorf("po-ret after the return: %+v", st)
	}
	// A rejection after booking contradicts what is known: reported, not
	// applied; a rejected payment-information group the batch never had is
	// reported and moves nothing.
	late := strings.Replace(string(sts), "<OrgnlEndToEndId>po-paid</OrgnlEndToEndId><TxSts>ACCP</TxSts>",
		"<OrgnlEndToEndId>po-paid</OrgnlEndToEndId><TxSts>RJCT</TxSts><StsRsnInf><Rsn><Cd>AC01</Cd></Rsn></StsRsnInf>", 1)
	late = strings.Replace(late, "<OrgnlPmtInfAndSts>", "<OrgnlPmtInfAndSts><OrgnlPmtInfId>x</OrgnlPmtInfId><PmtInfSts>RJCT</PmtInfSts></OrgnlPmtInfAndSts><OrgnlPmtInfAndSts>", 1)
	late = strings.Replace(late, "STS-", "STS2-", 1)
	unk := strings.Replace(late, "<OrgnlEndToEndId>po-closed</OrgnlEndToEndId>", "<OrgnlEndToEndId>po-nobody</OrgnlEndToEndId>", 1)
	r2, err := f.r.Import(ctx, app.SourceUpload, "late.xml", []byte(unk))
	if err != nil {
		t.Fatal(err)
	}
	if o := outcomes(r2); o["po-paid"] != app.EntryConflict || o["po-nobody"] != app.EntryUnknownReference || o["po-frozen"] != app.EntryUnchanged || o[""] != app.EntryUnknownReference {
		t.Errorf("late report outcomes %v", o)
	}
	if st := f.state(t, "po-paid"); st.State != app.RailPaid {
		t.Errorf("po-paid after a late rejection: %+v", st)
	}
	// Malformed: the element is named, nothing is recorded.
	bad := strings.Replace(string(sts), "<TxSts>ACCP</TxSts>", "<TxSts>YES</TxSts>", 1)
	_, err = f.r.Import(ctx, app.SourceUpload, "bad.xml", []byte(bad))
	var me *iso20022.MalformedError
	if !errors.As(err, &me) || !strings.HasSuffix(me.Element, "/TxSts") {
		t.Errorf("malformed: %v", err)
	}
}

// The inbox is read in name order; imported files move to processed/,
// malformed ones to rejected/ with the reason beside them.
func TestScanInbox(t *testing.T) {
	t.Parallel()
	in := t.TempDir()
	f := newRail(t, t.TempDir(), in)
	ctx := context.Background()
	f.submit(t, "po-a", "CNY", "150.00", bank("6222000011110001"))
	if _, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour)))); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	fb := fakebank.New(f.r.Cfg.OutboxDir, in, debtor.Account)
	files, err := fb.Take()
	if err != nil {
		t.Fatal(err)
	}
	if err := fb.Drop("01-status.xml", fb.StatusReport(files[0])); err != nil {
		t.Fatal(err)
	}
	if err := fb.Drop("02-garbage.xml", []byte("<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.054.001.08\"><BkToCstmrDbtCdtNtfctn/></Document>")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, ".03-partial.xml"), []byte("<half"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := f.r.ScanInbox(ctx); err != nil {
		t.Fatal(err)
	}
	if st := f.state(t, "po-a"); st.State != app.RailInTransit {
		t.Errorf("po-a after the inbox: %+v", st)
	}
	for _, p := range []string{"processed/01-status.xml", "rejected/02-garbage.xml", "rejected/02-garbage.xml.error", ".03-partial.xml"} {
		if _, err := os.Stat(filepath.Join(in, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	why, err := os.ReadFile(filepath.Join(in, "rejected/02-garbage.xml.error"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(why), "GrpHdr/MsgId") {
		t.Errorf("rejection reason %q does not name the element", why)
	}
	for _, p := range []string{"01-status.xml", "02-garbage.xml"} {
		if _, err := os.Stat(filepath.Join(in, p)); err == nil {
			t.Errorf("%s left in the inbox", p)
		}
	}
}

// inboxWithBooked is a rail with po-ret (an account the fake bank
// returns from) booked, paid, and the bank's camt.054 returning it.
func inboxWithBooked(t *testing.T) (*fixture, *fakebank.Bank, []byte) {
	t.Helper()
	in := t.TempDir()
	f := newRail(t, t.TempDir(), in)
	ctx := context.Background()
	f.submit(t, "po-ret", "CNY", "150.00", bank("6222000011110003"))
	if _, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour)))); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	fb := fakebank.New(f.r.Cfg.OutboxDir, in, debtor.Account)
	files, err := fb.Take()
	if err != nil || len(files) != 1 {
		t.Fatalf("bank took %d files: %v", len(files), err)
	}
	for _, step := range [][]byte{fb.StatusReport(files[0]), fb.Bookings(files[0])} {
		if _, err := f.r.Import(ctx, app.SourceUpload, "f.xml", step); err != nil {
			t.Fatal(err)
		}
	}
	if st := f.state(t, "po-ret"); st.State != app.RailPaid {
		t.Fatalf("po-ret booked: %+v", st)
	}
	f.notify = nil
	return f, fb, fb.Returns(files[0])
}

// scanReturned drops file into the inbox, scans it and checks it was
// imported (processed/) and po-ret returned with failure code and a
// message holding msg, its payout notified (its workflow puts the net
// back in the provider's available).
func (f *fixture) scanReturned(t *testing.T, fb *fakebank.Bank, file []byte, code, msg string) {
	t.Helper()
	if err := fb.Drop("ret.xml", file); err != nil {
		t.Fatal(err)
	}
	if err := f.r.ScanInbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(fb.Inbox, "processed/ret.xml")); err != nil {
		why, rerr := os.ReadFile(filepath.Join(fb.Inbox, "rejected/ret.xml.error"))
		t.Errorf("ret.xml not imported: %v (rejected: %s %v)", err, why, rerr)
	}
	if st := f.state(t, "po-ret"); st.State != app.RailReturned || st.FailureCode != code || !strings.Contains(st.Message, msg) {
		t.Errorf("po-ret after the return: %+v, want returned %s %q", st, code, msg)
	}
	if !slices.Equal(f.notify, []string{"po-ret"}) {
		t.Errorf("notified %v, want po-ret", f.notify)
	}
}

// A return without Rsn (optional in RtrInf: the bank gave only AddtlInf)
// returns the paid payout as bank_rejected with the bank's text. It sent
// the file to rejected/ ("a return needs its reason"): the payout stayed
// paid, the provider never credited, and nothing alerted (a booked
// transfer is not unsettled).
func TestScanInboxReturnWithoutReason(t *testing.T) {
	t.Parallel()
	f, fb, ret := inboxWithBooked(t)
	noRsn := strings.Replace(string(ret), "<Rsn><Cd>AC04</Cd></Rsn>", "", 1)
	if noRsn == string(ret) {
		t.Fatal("the fake bank's return has no Rsn to take out")
	}
	f.scanReturned(t, fb, []byte(noRsn), domain.FailBankRejected, "no reason given: account closed after payment")
}

// A malformed entry beside a valid return is reported, the return
// applied: another account's is ignored, the client account's is
// recorded unreadable (counted not applied, for finance). One such entry
// sent the whole file to rejected/ with a WARN line: the return never
// applied.
func TestScanInboxAppliesAFileBesideAMalformedEntry(t *testing.T) {
	t.Parallel()
	f, fb, ret := inboxWithBooked(t)
	own := `<Ntry><Amt Ccy="CNY">9.00</Amt><CdtDbtInd>CRDT</CdtDbtInd><Sts><Cd>DONE</Cd></Sts></Ntry>
</Ntfctn><Ntfctn><Id>N-OTHER</Id><Acct><Id><IBAN>GB94BARC10201530093459</IBAN></Id></Acct>
<Ntry><Amt Ccy="CNY">1,000.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>2026-12-02</Dt></BookgDt></Ntry>
</Ntfctn></BkToCstmrDbtCdtNtfctn>`
	file := strings.Replace(string(ret), "</Ntfctn></BkToCstmrDbtCdtNtfctn>", own, 1)
	f.scanReturned(t, fb, []byte(file), domain.FailAccountClosed, "AC04 closed account number: account closed after payment")
	var got []string
	rows, err := f.r.Pool.Query(context.Background(), `select element || ' ' || outcome || ' ' || note from payout.bank_file_entries e
		join payout.bank_files f using (file_id) where f.name = 'ret.xml' order by seq`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`^BkToCstmrDbtCdtNtfctn/Ntfctn\[0\]/Ntry\[0\]/NtryDtls\[0\]/TxDtls\[0\] applied `),
		regexp.MustCompile(`^BkToCstmrDbtCdtNtfctn/Ntfctn\[0\]/Ntry\[1\]/Sts unreadable .*"DONE"`),
		regexp.MustCompile(`^BkToCstmrDbtCdtNtfctn/Ntfctn\[1\]/Ntry\[0\]/Amt ignored not the client account .*"1,000.00"`),
	}
	if len(got) != len(want) {
		t.Fatalf("entries %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !w.MatchString(got[i]) {
			t.Errorf("entry %d: %q, want %s", i, got[i], w)
		}
	}
	if !app.EntryNotApplied(app.EntryUnreadable) {
		t.Error("an unreadable entry of the client account is not counted not applied")
	}
}

// inboxWithReport is a rail with po-a batched and delivered, and the
// bank's status report accepting it.
func inboxWithReport(t *testing.T) (*fixture, *fakebank.Bank, []byte) {
	t.Helper()
	in := t.TempDir()
	f := newRail(t, t.TempDir(), in)
	ctx := context.Background()
	f.submit(t, "po-a", "CNY", "150.00", bank("6222000011110001"))
	if _, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour)))); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	fb := fakebank.New(f.r.Cfg.OutboxDir, in, debtor.Account)
	files, err := fb.Take()
	if err != nil {
		t.Fatal(err)
	}
	return f, fb, fb.StatusReport(files[0])
}

// A file whose name is not UTF-8 (a GBK name from a Chinese bank's SFTP
// client) is imported under a readable UTF-8 form of its name. Its name
// failed the insert (PostgreSQL: invalid byte sequence, 22021), which
// stopped the pass on every tick at that file: no bank file sorted after
// it was ever imported.
func TestScanInboxNameNotUTF8(t *testing.T) {
	t.Parallel()
	f, fb, report := inboxWithReport(t)
	in := f.r.Cfg.InboxDir
	gbk := "01-\xbb\xd8\xb5\xa5.xml" // 01-回单.xml in GBK
	if err := os.WriteFile(filepath.Join(in, gbk), report, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := fb.Drop("02-status.xml", report); err != nil {
		t.Fatal(err)
	}
	if err := f.r.ScanInbox(context.Background()); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if st := f.state(t, "po-a"); st.State != app.RailInTransit {
		t.Errorf("po-a after the inbox: %+v", st)
	}
	for _, p := range []string{"processed/" + gbk, "processed/02-status.xml"} {
		if _, err := os.Stat(filepath.Join(in, p)); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	var name string
	if err := f.r.Pool.QueryRow(context.Background(), `select name from payout.bank_files`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if want := `01-\xbb\xd8\xb5\xa5.xml`; name != want {
		t.Errorf("stored name %q, want %q", name, want)
	}
}

// A file that fails for its own reason (unreadable: EACCES) is left in
// place, counted and skipped: the files after it are imported in the same
// pass. It stopped the pass, on every tick.
func TestScanInboxSkipsAFileThatFails(t *testing.T) {
	f, fb, report := inboxWithReport(t)
	in := f.r.Cfg.InboxDir
	t.Cleanup(func() { readInboxFile = readLimited })
	readInboxFile = func(path string) ([]byte, error) {
		if filepath.Base(path) == "01-locked.xml" {
			return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EACCES}
		}
		return readLimited(path)
	}
	if err := fb.Drop("01-locked.xml", report); err != nil {
		t.Fatal(err)
	}
	if err := fb.Drop("02-status.xml", report); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(inboxFilesFailed)
	for range 2 {
		if err := f.r.ScanInbox(context.Background()); err != nil {
			t.Fatalf("scan: %v", err)
		}
	}
	if st := f.state(t, "po-a"); st.State != app.RailInTransit {
		t.Errorf("po-a after the inbox: %+v", st)
	}
	for _, p := range []string{"01-locked.xml", "processed/02-status.xml"} {
		if _, err := os.Stat(filepath.Join(in, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if n := testutil.ToFloat64(inboxFilesFailed) - before; n != 2 {
		t.Errorf("gpubill_bank_inbox_files_failed_total rose by %v over two passes, want 2", n)
	}
}

// A file refused whole (malformed where no entry can be read without it:
// its header, not XML) goes to rejected/ and is counted: with a WARN line
// only, nothing watched for it (gpubill_bank_inbox_files_failed_total
// counts the files left in the inbox), and a booked transfer its return
// would have moved is outside the unsettled-age alert. Not parallel: the
// counter is the process's.
func TestScanInboxCountsARejectedFile(t *testing.T) {
	in := t.TempDir()
	f := newRail(t, "", in)
	if err := os.WriteFile(filepath.Join(in, "01-truncated.xml"), []byte(`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.054.001.08"><BkToCstmrDbtCdtNtfctn>`), 0o640); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(inboxFilesRejected)
	for range 2 {
		if err := f.r.ScanInbox(context.Background()); err != nil {
			t.Fatalf("scan: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(in, "rejected/01-truncated.xml")); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(inboxFilesRejected) - before; n != 1 {
		t.Errorf("gpubill_bank_inbox_files_rejected_total rose by %v, want 1 (the file, once)", n)
	}
}

// A bank that refuses a whole file (group status RJCT) or one PmtInf
// fails every payment of it it has not answered one by one; a later
// acceptance of the group does not revive them.
func TestImportGroupAndPaymentInfoStatuses(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-c1", "CNY", "100.00", bank("6222000011110001"))
	f.submit(t, "po-c2", "CNY", "200.00", bank("6222000011110005"))
	f.submit(t, "po-u1", "USD", "30.00", bank("6222000011110006"))
	id, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	report := func(msg, grp, rest string) []byte {
		return []byte(`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10"><CstmrPmtStsRpt>
<GrpHdr><MsgId>` + msg + `</MsgId><CreDtTm>2026-12-01T16:00:00+08:00</CreDtTm></GrpHdr>
<OrgnlGrpInfAndSts><OrgnlMsgId>` + id + `</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId>` + grp + `</OrgnlGrpInfAndSts>` + rest + `
</CstmrPmtStsRpt></Document>`)
	}
	// The USD PmtInf refused (AM03, currency not allowed); po-c1 accepted on its own.
	cnyPmt, usdPmt := id+"-CNY-20261201", id+"-USD-20261201"
	rep, err := f.r.Import(ctx, app.SourceUpload, "pmtinf.xml", report("S-1", "<GrpSts>PART</GrpSts>",
		`<OrgnlPmtInfAndSts><OrgnlPmtInfId>`+usdPmt+`</OrgnlPmtInfId><PmtInfSts>RJCT</PmtInfSts><StsRsnInf><Rsn><Cd>AM03</Cd></Rsn></StsRsnInf></OrgnlPmtInfAndSts>
<OrgnlPmtInfAndSts><OrgnlPmtInfId>`+cnyPmt+`</OrgnlPmtInfId><TxInfAndSts><OrgnlEndToEndId>po-c1</OrgnlEndToEndId><TxSts>ACCP</TxSts></TxInfAndSts></OrgnlPmtInfAndSts>`))
	if err != nil {
		t.Fatal(err)
	}
	if o := outcomes(rep); o["po-u1"] != app.EntryApplied || o["po-c1"] != app.EntryApplied || o["po-c2"] != "" {
		t.Errorf("PmtInf-level report: %v", o)
	}
	if st := f.state(t, "po-u1"); st.State != app.RailFailed || st.FailureCode != domain.FailInvalidAmount || !strings.HasPrefix(st.Message, "AM03") {
		t.Errorf("po-u1: %+v", st)
	}
	// The whole file refused (FF01): the payment not yet answered fails; the accepted one stands.
	rep, err = f.r.Import(ctx, app.SourceUpload, "grp.xml", report("S-2",
		"<GrpSts>RJCT</GrpSts><StsRsnInf><Rsn><Cd>FF01</Cd></Rsn><AddtlInf>invalid file format</AddtlInf></StsRsnInf>", ""))
	if err != nil {
		t.Fatal(err)
	}
	if o := outcomes(rep); o["po-c2"] != app.EntryApplied || o["po-c1"] != app.EntryUnchanged || o["po-u1"] != app.EntryUnchanged {
		t.Errorf("group rejection: %v", o)
	}
	if st := f.state(t, "po-c2"); st.State != app.RailFailed || st.FailureCode != domain.FailBankRejected || !strings.Contains(st.Message, "FF01") {
		t.Errorf("po-c2: %+v", st)
	}
	if st := f.state(t, "po-c1"); st.State != app.RailInTransit {
		t.Errorf("po-c1 after the group rejection: %+v", st)
	}
	// A group acceptance afterwards changes none of them.
	rep, err = f.r.Import(ctx, app.SourceUpload, "acc.xml", report("S-3", "<GrpSts>ACCP</GrpSts>", ""))
	if err != nil {
		t.Fatal(err)
	}
	for ref, o := range outcomes(rep) {
		if o != app.EntryUnchanged && o != app.EntryConflict {
			t.Errorf("group acceptance after the fact: %s %s", ref, o)
		}
	}
	if st := f.state(t, "po-c2"); st.State != app.RailFailed {
		t.Errorf("po-c2 revived: %+v", st)
	}
	// A report on a batch that does not exist is reported, not dropped.
	rep, err = f.r.Import(ctx, app.SourceUpload, "none.xml", bytes.Replace(report("S-4", "<GrpSts>ACCP</GrpSts>", ""), []byte(id), []byte("pb-19990101-0000"), 1))
	if err != nil || len(rep.Entries) != 1 || rep.Entries[0].Outcome != app.EntryUnknownReference {
		t.Errorf("unknown batch: %+v %v", rep.Entries, err)
	}
}

// A transfer a pain.001 cannot carry (a creditor name with a control
// character, stored before methods refused one) fails alone at the cutoff
// (invalid_account): it failed the whole batch, every cutoff, every
// provider's bank payout with it.
func TestCutLeavesOutATransferTheFileCannotCarry(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	bad := bank("6222000011110009")
	bad.AccountName = "Li\x01Wei"
	f.submit(t, "po-bad", "CNY", "100.00", bad)
	f.submit(t, "po-ok", "CNY", "200.00", bank("6222000011110001"))
	id, built, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour))))
	if err != nil || !built {
		t.Fatalf("cut: %q built %v, %v; want the batch built without po-bad", id, built, err)
	}
	if st := f.state(t, "po-bad"); st.State != app.RailFailed || st.FailureCode != domain.FailInvalidAccount {
		t.Errorf("po-bad: %+v; want failed, invalid_account", st)
	}
	if st := f.state(t, "po-ok"); st.State != app.RailAccepted {
		t.Errorf("po-ok: %+v; want batched (accepted)", st)
	}
}

// A bank refusing a copy of what it already has (the same file delivered
// again after a crash) may say so per payment or per payment information,
// not only for the whole file: the original's payments stand. Taken as the
// payment's failure, it moved the money back to available while the
// original still paid.
func TestImportDuplicateRejectionsAtEveryLevel(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-c1", "CNY", "100.00", bank("6222000011110001"))
	f.submit(t, "po-u1", "USD", "30.00", bank("6222000011110006"))
	id, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	cnyPmt, usdPmt := id+"-CNY-20261201", id+"-USD-20261201"
	rep, err := f.r.Import(ctx, app.SourceUpload, "dup.xml", []byte(`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10"><CstmrPmtStsRpt>
<GrpHdr><MsgId>S-D</MsgId><CreDtTm>2026-12-01T16:00:00+08:00</CreDtTm></GrpHdr>
<OrgnlGrpInfAndSts><OrgnlMsgId>`+id+`</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId><GrpSts>PART</GrpSts></OrgnlGrpInfAndSts>
<OrgnlPmtInfAndSts><OrgnlPmtInfId>`+cnyPmt+`</OrgnlPmtInfId><TxInfAndSts><OrgnlEndToEndId>po-c1</OrgnlEndToEndId><TxSts>RJCT</TxSts><StsRsnInf><Rsn><Cd>DU05</Cd></Rsn></StsRsnInf></TxInfAndSts></OrgnlPmtInfAndSts>
<OrgnlPmtInfAndSts><OrgnlPmtInfId>`+usdPmt+`</OrgnlPmtInfId><PmtInfSts>RJCT</PmtInfSts><StsRsnInf><Rsn><Cd>DU02</Cd></Rsn></StsRsnInf></OrgnlPmtInfAndSts>
</CstmrPmtStsRpt></Document>`))
	if err != nil {
		t.Fatal(err)
	}
	ignored := 0
	for _, e := range rep.Entries {
		if e.Outcome == app.EntryIgnored {
			ignored++
		}
	}
	if o := outcomes(rep); o["po-c1"] != app.EntryIgnored || o["po-u1"] != "" || ignored != 2 {
		t.Errorf("duplicate rejections: %v (%d ignored); want both entries ignored, nothing applied", o, ignored)
	}
	for _, ref := range []string{"po-c1", "po-u1"} {
		if st := f.state(t, ref); st.State == app.RailFailed {
			t.Errorf("%s failed by a duplicate's rejection: %+v", ref, st)
		}
	}
}

// DUPL ("a duplicate of another payment") rejects a copy too: a payment
// accepted by the bank (ACSC) and then rejected DUPL in the status report
// of a resent copy of its file failed, its money back in available while
// the bank paid it, and a retry paid it again.
func TestImportDUPLRejectsOnlyTheCopy(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-c1", "CNY", "5000.00", bank("6222000011110001"))
	id, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	pmt := id + "-CNY-20261201"
	report := func(msgID, sts, reason string) []byte {
		rsn := ""
		if reason != "" {
			rsn = `<StsRsnInf><Rsn><Cd>` + reason + `</Cd></Rsn></StsRsnInf>`
		}
		return []byte(`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10"><CstmrPmtStsRpt>
<GrpHdr><MsgId>` + msgID + `</MsgId><CreDtTm>2026-12-01T16:00:00+08:00</CreDtTm></GrpHdr>
<OrgnlGrpInfAndSts><OrgnlMsgId>` + id + `</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId></OrgnlGrpInfAndSts>
<OrgnlPmtInfAndSts><OrgnlPmtInfId>` + pmt + `</OrgnlPmtInfId><TxInfAndSts><OrgnlEndToEndId>po-c1</OrgnlEndToEndId><TxSts>` + sts + `</TxSts>` + rsn + `</TxInfAndSts></OrgnlPmtInfAndSts>
</CstmrPmtStsRpt></Document>`)
	}
	if _, err := f.r.Import(ctx, app.SourceUpload, "sts.xml", report("S-1", "ACSC", "")); err != nil {
		t.Fatal(err)
	}
	rep, err := f.r.Import(ctx, app.SourceUpload, "dup.xml", report("S-2", "RJCT", "DUPL"))
	if err != nil {
		t.Fatal(err)
	}
	if o := outcomes(rep); o["po-c1"] != app.EntryIgnored {
		t.Errorf("a DUPL rejection of the copy: %v; want ignored", o)
	}
	if st := f.state(t, "po-c1"); st.State == app.RailFailed {
		t.Errorf("po-c1 failed by a copy's DUPL rejection: %+v", st)
	}
}

// A booked reversal of a paid payout's debit (the bank took the payment
// back) is reported as not applied, naming the payout: it was ignored, no
// warning and no count, the payout paid while its money was back in the
// client account. RvslInd is an xs:boolean, so "1" is a reversal as
// "true" is (it was read as none).
func TestImportReportsAReversalOfAPaidPayout(t *testing.T) {
	t.Parallel()
	for _, ind := range []string{"true", "1"} {
		t.Run(ind, func(t *testing.T) {
			t.Parallel()
			importReversal(t, ind)
		})
	}
}

func importReversal(t *testing.T, ind string) {
	t.Helper()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-r1", "CNY", "800.00", bank("6222000011110001"))
	if _, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour)))); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	fb := fakebank.New(f.r.Cfg.OutboxDir, f.r.Cfg.InboxDir, debtor.Account)
	files, err := fb.Take()
	if err != nil || len(files) != 1 {
		t.Fatalf("bank took %d files: %v", len(files), err)
	}
	for _, step := range [][]byte{fb.StatusReport(files[0]), fb.Bookings(files[0])} {
		if _, err := f.r.Import(ctx, app.SourceUpload, "f.xml", step); err != nil {
			t.Fatal(err)
		}
	}
	if st := f.state(t, "po-r1"); st.State != app.RailPaid {
		t.Fatalf("po-r1 booked: %+v", st)
	}
	booked := string(fb.Bookings(files[0]))
	reversal := strings.Replace(strings.ReplaceAll(booked, "<CdtDbtInd>DBIT</CdtDbtInd>", "<CdtDbtInd>CRDT</CdtDbtInd>"),
		"<Sts><Cd>BOOK</Cd></Sts>", "<RvslInd>"+ind+"</RvslInd><Sts><Cd>BOOK</Cd></Sts>", 1)
	rep, err := f.r.Import(ctx, app.SourceUpload, "rvsl.xml", []byte(reversal))
	if err != nil {
		t.Fatal(err)
	}
	if o := outcomes(rep)["po-r1"]; o != app.EntryConflict {
		t.Errorf("a booked reversal of po-r1's debit: outcome %q (%+v); want %s, naming it", o, rep.Entries, app.EntryConflict)
	}
}

// Run builds the batch of a cutoff once it has passed (by the injected
// clock), delivers it and reads the inbox, without anyone calling Cut.
func TestRunCutsAtTheCutoff(t *testing.T) {
	t.Parallel()
	out, in := t.TempDir(), t.TempDir()
	f := newRail(t, out, in)
	f.r.Cfg.Tick = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	f.submit(t, "po-run", "CNY", "150.00", bank("6222000011110001"))
	go func() { done <- f.r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("rail: %v", err)
		}
	})
	// Before the cutoff (10:00 < 14:00 Shanghai): yesterday's cutoff has
	// nothing queued before it, so nothing is built.
	time.Sleep(100 * time.Millisecond) // several ticks
	if bs, err := f.r.ListBatches(context.Background(), "", 10); err != nil || len(bs) != 0 {
		t.Fatalf("before the cutoff: %d batches %v", len(bs), err)
	}
	f.clk.Set(day1.Add(4*time.Hour + time.Minute)) // 14:01
	id := f.r.BatchID(time.Date(2026, 12, 1, 14, 0, 0, 0, shanghai))
	testkit.Eventually(t, 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(out, id+".xml"))
		return err == nil
	}, "batch %s delivered by Run", id)
	fb := fakebank.New(out, in, debtor.Account)
	files, err := fb.Take()
	if err != nil || len(files) != 1 {
		t.Fatalf("bank took %d files: %v", len(files), err)
	}
	if err := fb.Drop("sts.xml", fb.StatusReport(files[0])); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return f.state(t, "po-run").State == app.RailInTransit }, "po-run in transit")
	if bs, err := f.r.ListBatches(context.Background(), "", 10); err != nil || len(bs) != 1 {
		t.Errorf("%d batches after many ticks (%v), want 1", len(bs), err)
	}
}

// A batch file is reported written only once its rename is durable: a
// directory sync that fails (an I/O error) fails the write, so the batch is
// not marked delivered and the next Deliver writes it again. No temporary
// file is left behind either way.
func TestWriteAtomicFailsWhenTheRenameIsNotDurable(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { syncDir = fsyncDir })
	syncDir = func(string) error { return syscall.EIO }
	if _, err := writeAtomic(dir, "b-1.xml", []byte("<x/>")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write with a failing directory sync: %v; want EIO", err)
	}
	syncDir = fsyncDir
	path, err := writeAtomic(dir, "b-2.xml", []byte("<x/>"))
	if err != nil || filepath.Base(path) != "b-2.xml" {
		t.Fatalf("write: %q, %v", path, err)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left in the outbox", e.Name())
		}
	}
}

func TestParseCutoff(t *testing.T) {
	for give, want := range map[string][2]int{"14:00": {14, 0}, " 09:05 ": {9, 5}, "23:59": {23, 59}, "00:00": {0, 0}} {
		h, m, err := ParseCutoff(give)
		if err != nil || h != want[0] || m != want[1] {
			t.Errorf("ParseCutoff(%q) = %d, %d, %v; want %v", give, h, m, err, want)
		}
	}
	for _, give := range []string{"24:00", "9:00", "12:60", "", "12-00"} {
		if _, _, err := ParseCutoff(give); err == nil {
			t.Errorf("ParseCutoff(%q) accepted", give)
		}
	}
}

// Two files naming the same payments in other orders, imported side by
// side (a camt.054 uploaded while the inbox scan imports the pain.002)
// each locked its transfers in its own order and deadlocked: one import
// answered a 500. Imports now run one at a time.
func TestImportsSideBySide(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	for i := range 150 {
		f.submit(t, fmt.Sprintf("po-%03d", i), "CNY", "150.00", bank(fmt.Sprintf("62220000111%05d", i*10+1)))
	}
	if _, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour)))); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	fb := fakebank.New(f.r.Cfg.OutboxDir, f.r.Cfg.InboxDir, debtor.Account)
	files, err := fb.Take()
	if err != nil || len(files) != 1 {
		t.Fatalf("bank took %d files: %v", len(files), err)
	}
	sts := fb.StatusReport(files[0])
	// The bookings in the reverse order of the status report's payments.
	book := string(fb.Bookings(files[0]))
	ntry := regexp.MustCompile(`(?s)<Ntry>.*?</Ntry>`)
	entries := ntry.FindAllString(book, -1)
	if len(entries) != 150 {
		t.Fatalf("%d booked entries, want 150", len(entries))
	}
	slices.Reverse(entries)
	first, last := strings.Index(book, "<Ntry>"), strings.LastIndex(book, "</Ntry>")+len("</Ntry>")
	reversed := book[:first] + strings.Join(entries, "\n") + book[last:]
	errs := make(chan error, 2)
	go func() { _, err := f.r.Import(ctx, app.SourceInbox, "sts.xml", sts); errs <- err }()
	go func() { _, err := f.r.Import(ctx, app.SourceUpload, "book.xml", []byte(reversed)); errs <- err }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("import side by side: %v", err)
		}
	}
}

// A cutoff cut after its day (the service was down over it) asks the bank
// to pay today: it asked for the day already past.
func TestLateCutAsksForToday(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-late", "CNY", "150.00", bank("6222000011110001"))
	f.clk.Set(day1.Add(23 * time.Hour)) // 2 Dec 09:00 in Shanghai, before that day's cutoff
	if _, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now()))); err != nil {
		t.Fatal(err)
	}
	var exec time.Time
	if err := f.r.Pool.QueryRow(ctx, `select execution_date from payout.bank_batches`).Scan(&exec); err != nil {
		t.Fatal(err)
	}
	if got := exec.Format(time.DateOnly); got != "2026-12-02" {
		t.Fatalf("the 1 Dec cutoff cut on 2 Dec asks for %s, want 2026-12-02", got)
	}
}

// restoreToBeforeTheCut brings the rail's book back to a recovery point
// before every batch was cut, as a restore does: the transfers queued
// again, in no batch, and no batch.
func (f *fixture) restoreToBeforeTheCut(t *testing.T) {
	t.Helper()
	if _, err := f.r.Pool.Exec(context.Background(), `update payout.bank_transfers set state = 'queued', batch_id = null, pmt_inf_id = '', updated_at = queued_at;
		delete from payout.bank_batches`); err != nil {
		t.Fatal(err)
	}
}

// After a restore to a point before a batch was cut, its transfers are
// queued again while the bank has the file (cut and delivered after the
// point). The bank's reports on it, copied back into the inbox while the
// rail is held, move them out of the queue: the bank saw them, so they
// were sent. Left queued (a
// conflict: "the bank cannot know a transfer not yet in a file"), the next
// file paid them again. A transfer queued after the lost file's cutoff
// still goes into the next one.
func TestImportMovesATransferQueuedAgainAfterARestore(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-paid", "CNY", "620.00", bank("6222000011110001"))
	f.submit(t, "po-frozen", "CNY", "300.00", bank("6222000011110002"))
	f.clk.Set(day1.Add(4*time.Hour + 30*time.Minute)) // 14:30: after the cutoff
	f.submit(t, "po-next", "CNY", "50.00", bank("6222000011110005"))
	if _, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now()))); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	fb := fakebank.New(f.r.Cfg.OutboxDir, f.r.Cfg.InboxDir, debtor.Account)
	files, err := fb.Take()
	if err != nil || len(files) != 1 || strings.Join(e2es(files[0].Msg), ",") != "po-frozen,po-paid" {
		t.Fatalf("the bank took %d files (%v): %v", len(files), files, err)
	}
	f.restoreToBeforeTheCut(t)
	f.restore(t, f.clk.Now())

	rep, err := f.r.Import(ctx, app.SourceInbox, "sts.xml", fb.StatusReport(files[0]))
	if err != nil {
		t.Fatal(err)
	}
	if o := outcomes(rep); o["po-paid"] != app.EntryApplied || o["po-frozen"] != app.EntryApplied {
		t.Errorf("pain.002 on transfers queued again: %v (%+v); want both applied", o, rep.Entries)
	}
	if st := f.state(t, "po-frozen"); st.State != app.RailFailed || st.FailureCode != domain.FailAccountFrozen {
		t.Errorf("po-frozen after its rejection: %+v", st)
	}
	rep, err = f.r.Import(ctx, app.SourceInbox, "book.xml", fb.Bookings(files[0]))
	if err != nil {
		t.Fatal(err)
	}
	if o := outcomes(rep); o["po-paid"] != app.EntryApplied {
		t.Errorf("camt.054 booking of a transfer accepted after a restore: %v (%+v)", o, rep.Entries)
	}
	if st := f.state(t, "po-paid"); st.State != app.RailPaid {
		t.Errorf("po-paid after its booking: %+v", st)
	}
	if !slices.Contains(f.notify, "po-paid") || !slices.Contains(f.notify, "po-frozen") {
		t.Errorf("notified %v, want po-paid and po-frozen", f.notify)
	}

	// Released, the next cutoff sends only what the bank never had.
	if _, err := f.r.ReleaseRestoreHold(ctx, "finance:alice"); err != nil {
		t.Fatal(err)
	}
	id, built, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.AddDate(0, 0, 1).Add(5*time.Hour))))
	if err != nil || !built {
		t.Fatal(id, built, err)
	}
	file, err := f.r.BatchFile(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := iso20022.ParsePain001(file)
	if err != nil || strings.Join(e2es(p), ",") != "po-next" {
		t.Errorf("the next batch carries %v (%v); want po-next only, the bank has the others", e2es(p), err)
	}
}

// restore opens the rail's restore hold as gpubill restore does, in a
// transaction of its own.
func (f *fixture) restore(t *testing.T, at time.Time) {
	t.Helper()
	if err := pgx.BeginFunc(context.Background(), f.r.Pool, func(tx pgx.Tx) error { return HoldAfterRestore(context.Background(), tx, at) }); err != nil {
		t.Fatal(err)
	}
}

// counts is what the rail holds: transfers queued, batches, batches undelivered.
func (f *fixture) counts(t *testing.T) string {
	t.Helper()
	var queued, batches, undelivered int
	if err := f.r.Pool.QueryRow(context.Background(), `select (select count(*) from payout.bank_transfers where state = 'queued'),
		(select count(*) from payout.bank_batches), (select count(*) from payout.bank_batches where delivered_at is null)`).
		Scan(&queued, &batches, &undelivered); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("queued %d, batches %d, undelivered %d", queued, batches, undelivered)
}

// After a restore the rail cuts and delivers nothing until finance
// releases it: day 1's batch was cut before the recovery point and
// delivered after it (undelivered again), po-c and po-d were queued before
// it and sent in day 2's file (queued again). Unheld, day 2's cutoff put
// them into a file again (paid twice) and day 1's file was written again.
// Released, day 1's file is delivered and the transfers go into the first
// cutoff after the restore, not day 2's: the bank may hold a batch of that
// id, cut after the point, and refuse another as a duplicate.
func TestRestoreHoldStopsCutAndDeliverUntilReleased(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	f := newRail(t, out, "")
	ctx := context.Background()
	f.submit(t, "po-a", "CNY", "620.00", bank("6222000011110001"))
	f.submit(t, "po-b", "CNY", "300.00", bank("6222000011110005"))
	f.clk.Set(day1.Add(4*time.Hour + 30*time.Minute)) // 14:30
	day1Batch, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now())))
	if err != nil {
		t.Fatal(err)
	}
	f.clk.Set(day1.Add(5 * time.Hour)) // 15:00
	f.submit(t, "po-c", "CNY", "50.00", bank("6222000011110006"))
	f.submit(t, "po-d", "CNY", "70.00", bank("6222000011110007"))
	if _, err := f.r.ReleaseRestoreHold(ctx, "finance:alice"); !errors.Is(err, apperr.ErrPrecondition) {
		t.Errorf("a release with no hold: %v, want ErrPrecondition", err)
	}

	restoredAt := day1.AddDate(0, 0, 1).Add(5 * time.Hour) // day 2, 15:00: after day 2's cutoff
	f.restore(t, restoredAt)
	restoredAt = restoredAt.Add(time.Hour)
	f.restore(t, restoredAt) // after-recovery run again: the open hold is held since the later
	f.clk.Set(restoredAt.Add(time.Hour))
	before := f.counts(t)
	if want := "queued 2, batches 1, undelivered 1"; before != want {
		t.Fatalf("before the cut: %s, want %s", before, want)
	}
	id, built, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now())))
	if !errors.Is(err, ErrHeld) || built || id != "" {
		t.Errorf("Cut while held: %q built %v, %v; want ErrHeld", id, built, err)
	}
	if err := f.r.Deliver(ctx); !errors.Is(err, ErrHeld) {
		t.Errorf("Deliver while held: %v, want ErrHeld", err)
	}
	if got := f.counts(t); got != before {
		t.Errorf("while held: %s, want %s (nothing cut, delivered or lost)", got, before)
	}
	if des, err := os.ReadDir(out); err != nil || len(des) != 0 {
		t.Errorf("the outbox holds %d files while held (%v)", len(des), err)
	}
	h, err := f.r.RestoreHold(ctx)
	if err != nil || !h.Held() || !h.HeldSince.Equal(restoredAt) || h.QueuedTransfers != 2 || h.UndeliveredBatches != 1 {
		t.Errorf("the hold: %+v %v; want held since %s, 2 queued, 1 undelivered", h, err, restoredAt)
	}

	f.clk.Set(restoredAt.Add(3 * time.Hour))
	rel, err := f.r.ReleaseRestoreHold(ctx, "finance:alice")
	if err != nil || rel.Held() || rel.ReleasedAt == nil || !rel.ReleasedAt.Equal(f.clk.Now()) || rel.ReleasedBy != "finance:alice" || !rel.HeldSince.Equal(restoredAt) {
		t.Fatalf("release: %+v %v", rel, err)
	}
	f.clk.Set(restoredAt.Add(4 * time.Hour))
	if again, err := f.r.ReleaseRestoreHold(ctx, "finance:bob"); err != nil || !again.ReleasedAt.Equal(*rel.ReleasedAt) || again.ReleasedBy != "finance:alice" {
		t.Errorf("a second release: %+v %v; want the first release's answer", again, err)
	}

	// Day 2's cutoff is before the restore: not cut (its id may be at the bank).
	if id, built, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now()))); err != nil || built || id != "" {
		t.Errorf("a cutoff before the restore, released: %q built %v, %v; want no batch", id, built, err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, day1Batch+".xml")); err != nil {
		t.Errorf("day 1's batch not delivered once released: %v", err)
	}
	f.clk.Set(restoredAt.AddDate(0, 0, 1)) // day 3, 16:00
	id, built, err = cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now())))
	if err != nil || !built {
		t.Fatal(id, built, err)
	}
	file, err := f.r.BatchFile(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := iso20022.ParsePain001(file)
	if err != nil || strings.Join(e2es(p), ",") != "po-c,po-d" || id != "pb-20261203-1400" {
		t.Errorf("the first cut after the release: %s %v %v; want pb-20261203-1400 with po-c, po-d", id, e2es(p), err)
	}
	if got, want := f.counts(t), "queued 0, batches 2, undelivered 1"; got != want {
		t.Errorf("after the release: %s, want %s", got, want)
	}
}

// A snapshot taken while a hold was open (held since r1) and restored at
// r2: the hold is held since r2. Kept at r1, a cutoff between r1 and r2 —
// cut and sent before the second disaster, lost with it — was cut again
// under the same batch id once released, and the bank refused it as a
// duplicate, its transfers left batched.
func TestRestoreOfASnapshotTakenWhileHeldMovesTheHold(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	r1 := day1.Add(2 * time.Hour) // day 1, 12:00: the first restore, its hold open in the snapshot
	f.restore(t, r1)
	r2 := day1.AddDate(0, 0, 1).Add(6 * time.Hour) // day 2, 16:00: after day 2's cutoff
	f.restore(t, r2)
	f.clk.Set(r2)
	f.submit(t, "po-a", "CNY", "620.00", bank("6222000011110001"))
	if _, err := f.r.Pool.Exec(ctx, `update payout.bank_transfers set queued_at = $1`, day1.AddDate(0, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if h, err := f.r.RestoreHold(ctx); err != nil || !h.HeldSince.Equal(r2) {
		t.Errorf("the hold after the second restore: %+v %v; want held since %s", h, err, r2)
	}
	if _, err := f.r.ReleaseRestoreHold(ctx, "finance:alice"); err != nil {
		t.Fatal(err)
	}
	cutoff := f.r.LastCutoff(r2) // day 2, 14:00
	if id, built, err := cutOne(f.r.Cut(ctx, cutoff)); err != nil || built {
		t.Errorf("cutoff %s, before the restore at %s, cut as %s (built %v, %v): a batch of that id may be at the bank",
			cutoff.In(shanghai), r2.In(shanghai), id, built, err)
	}
}

// A snapshot taken before the hold's migration has no hold table: the
// restore makes it from the migration to open the hold, and the
// migration, run at the service's start, finds it made.
func TestRestoreHoldOfASnapshotBeforeTheHold(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	// The schema as of the snapshot: every migration from the hold's on
	// undone (goose refuses to apply 17 below a later one applied).
	db := stdlib.OpenDBFromPool(f.r.Pool)
	defer db.Close()
	store, err := database.NewStore(database.DialectPostgres, "payout.goose_db_version")
	if err != nil {
		t.Fatal(err)
	}
	mig, err := goose.NewProvider("", db, migrations.For("payout"), goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mig.DownTo(ctx, 16); err != nil {
		t.Fatal(err)
	}
	f.restore(t, day1)
	if err := pg.Migrate(ctx, f.r.Pool, "payout", migrations.For("payout")); err != nil {
		t.Fatalf("the migration after a restore made its table: %v", err)
	}
	f.submit(t, "po-a", "CNY", "620.00", bank("6222000011110001"))
	if _, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour)))); !errors.Is(err, ErrHeld) {
		t.Errorf("Cut after the restore of an older snapshot: %v, want ErrHeld", err)
	}
}

// Two payout replicas read one inbox directory (a shared volume): while
// one reads, the other's pass does nothing, so a file is imported and
// moved once. Without a lock both read the same file: one moved it to
// processed/ while the other was reading it (a failure counted, a WARN
// logged, every tick of two replicas). The second replica here scans
// while the first is inside its read of the file. Not parallel: the
// counter and the read hook are the process's.
func TestScanInboxOneReplicaAtATime(t *testing.T) {
	f, fb, report := inboxWithReport(t)
	in := f.r.Cfg.InboxDir
	other, err := pgxpool.New(context.Background(), f.r.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	replica2 := &Rail{Pool: other, Clock: f.clk, Log: f.r.Log, Cfg: f.r.Cfg}
	var otherErr error
	otherRan := false
	t.Cleanup(func() { readInboxFile = readLimited })
	readInboxFile = func(path string) ([]byte, error) {
		if !otherRan {
			otherRan = true
			otherErr = replica2.ScanInbox(context.Background())
		}
		return readLimited(path)
	}
	if err := fb.Drop("01-status.xml", report); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(inboxFilesFailed)
	if err := f.r.ScanInbox(context.Background()); err != nil {
		t.Fatalf("first replica's scan: %v", err)
	}
	if !otherRan || otherErr != nil {
		t.Fatalf("second replica's scan during the first's: ran %v, %v", otherRan, otherErr)
	}
	if n := testutil.ToFloat64(inboxFilesFailed) - before; n != 0 {
		t.Errorf("gpubill_bank_inbox_files_failed_total rose by %v with two replicas, want 0", n)
	}
	des, err := os.ReadDir(filepath.Join(in, "processed"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	if !slices.Equal(names, []string{"01-status.xml"}) {
		t.Errorf("processed/ holds %v, want [01-status.xml] (the file moved once)", names)
	}
	if st := f.state(t, "po-a"); st.State != app.RailInTransit {
		t.Errorf("po-a after the inbox: %+v", st)
	}
	// The first pass over, the lock is free: the other replica reads
	// the next file.
	readInboxFile = readLimited
	if err := fb.Drop("02-status.xml", report); err != nil {
		t.Fatal(err)
	}
	if err := replica2.ScanInbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(in, "processed/02-status.xml")); err != nil {
		t.Errorf("the second replica's own pass: %v", err)
	}
}
