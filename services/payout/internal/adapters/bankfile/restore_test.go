package bankfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/iso20022/fakebank"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// bookState is a transfer's state in the rail's own book (Query answers
// queued and batched alike).
func (f *fixture) bookState(t *testing.T, ref string) string {
	t.Helper()
	var s string
	if err := f.r.Pool.QueryRow(context.Background(), `select state from payout.bank_transfers where reference = $1`, ref).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// sendDay1 cuts day 1's batch of what is queued, delivers it and has the
// fake bank take it.
func (f *fixture) sendDay1(t *testing.T) (*fakebank.Bank, fakebank.File) {
	t.Helper()
	ctx := context.Background()
	f.clk.Set(day1.Add(4*time.Hour + 30*time.Minute)) // 14:30: after the cutoff
	if _, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now()))); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	fb := fakebank.New(f.r.Cfg.OutboxDir, f.r.Cfg.InboxDir, debtor.Account)
	files, err := fb.Take()
	if err != nil || len(files) != 1 {
		t.Fatalf("the bank took %v: %v", files, err)
	}
	return fb, files[0]
}

// releaseAndCut releases the hold and cuts the first cutoff after now: the
// EndToEndIds it sends ("" : no batch).
func (f *fixture) releaseAndCut(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	if _, err := f.r.ReleaseRestoreHold(ctx, "finance:alice"); err != nil {
		t.Fatal(err)
	}
	id, built, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now().AddDate(0, 0, 1))))
	if err != nil {
		t.Fatal(err)
	}
	if !built {
		return ""
	}
	file, err := f.r.BatchFile(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := iso20022.ParsePain001(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(e2es(p), ",")
}

// The bank's only report on a transfer queued again (its file cut after
// the recovery point) is a pain.002 status that asks no state: received
// (RCVD), technically accepted (ACTC) or pending (PDNG). The bank has the
// transfer, so it leaves the queue (batched; the unsettled-age alert
// watches it until booked). Taken as "acknowledged; no change", it stayed
// queued and the release sent it again.
func TestImportStatusWithoutStateMovesATransferQueuedAgain(t *testing.T) {
	t.Parallel()
	for _, sts := range []string{"RCVD", "ACTC", "PDNG"} {
		t.Run(sts, func(t *testing.T) {
			t.Parallel()
			f := newRail(t, t.TempDir(), t.TempDir())
			ctx := context.Background()
			f.submit(t, "po-sent", "CNY", "620.00", bank("6222000011110001"))
			fb, file := f.sendDay1(t)
			f.submit(t, "po-next", "CNY", "50.00", bank("6222000011110005"))
			f.restoreToBeforeTheCut(t)
			f.restore(t, f.clk.Now())

			report := bytes.ReplaceAll(fb.StatusReport(file), []byte("<TxSts>ACCP</TxSts>"), []byte("<TxSts>"+sts+"</TxSts>"))
			rep, err := f.r.Import(ctx, app.SourceInbox, "sts.xml", report)
			if err != nil {
				t.Fatal(err)
			}
			if o := outcomes(rep); o["po-sent"] != app.EntryApplied {
				t.Errorf("%s on a transfer queued again: %v (%+v), want applied", sts, o, rep.Entries)
			}
			if got := f.bookState(t, "po-sent"); got != stateBatched {
				t.Errorf("po-sent after %s: %s, want batched", sts, got)
			}
			if got := f.releaseAndCut(t); got != "po-next" {
				t.Errorf("the first batch after the release sends %q, want po-next only (the bank has po-sent)", got)
			}
		})
	}
}

// The payout made after the recovery point is made again only once its
// workflow runs; the bank's reports copied into the inbox are imported at
// once, before its transfer exists (unknown_reference), and an import of
// the same file again is a duplicate. The transfer, when queued, takes
// what those reports said: the bank booked it, so it is paid, not sent in
// the next file again.
func TestReportImportedBeforeItsTransferAppliesWhenQueued(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-late", "CNY", "620.00", bank("6222000011110001"))
	fb, file := f.sendDay1(t)
	// Restored to a point before the payout existed: its transfer is gone.
	if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_transfers; delete from payout.bank_batches`); err != nil {
		t.Fatal(err)
	}
	f.restore(t, f.clk.Now())
	reports := [][]byte{fb.StatusReport(file), fb.Bookings(file)}
	for _, b := range reports {
		rep, err := f.r.Import(ctx, app.SourceInbox, "r.xml", b)
		if err != nil {
			t.Fatal(err)
		}
		if o := outcomes(rep); o["po-late"] != app.EntryUnknownReference {
			t.Fatalf("a report before its transfer: %v, want unknown_reference", o)
		}
	}

	st := f.submit(t, "po-late", "CNY", "620.00", bank("6222000011110001")) // the payout made again
	if st.State != app.RailPaid {
		t.Errorf("the transfer queued after the bank's booking was imported: %+v, want paid", st)
	}
	for _, b := range reports {
		rep, err := f.r.Import(ctx, app.SourceInbox, "r.xml", b)
		if err != nil {
			t.Fatal(err)
		}
		if o := outcomes(rep); !rep.Duplicate || o["po-late"] != app.EntryApplied || rep.Entries[0].PayoutRef != "po-late" {
			t.Errorf("the same report again: duplicate %v, %+v; want its entry applied to po-late when the transfer was queued", rep.Duplicate, rep.Entries)
		}
	}
	if got := f.releaseAndCut(t); got != "" {
		t.Errorf("the first batch after the release sends %q: the bank booked po-late before the restore", got)
	}
}

// The variant with a retry: attempt 1 was sent before the point and
// rejected after it; attempt 2 was sent and booked after it. Restored,
// attempt 1 is batched and attempt 2 unknown; the reports reject attempt 1
// (the payout retries) and name attempt 2 before it exists. Queued, attempt
// 2 is booked at once, not sent again.
func TestReportImportedBeforeTheRetryAppliesWhenQueued(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-v", "CNY", "620.00", bank("6222000011110002")) // blocked: RJCT AC06
	fb, first := f.sendDay1(t)                                     // the recovery point is after this cut
	rejection := fb.StatusReport(first)
	f.submit(t, "po-v-2", "CNY", "620.00", bank("6222000011110001"))
	f.clk.Set(day1.AddDate(0, 0, 1).Add(4*time.Hour + 30*time.Minute)) // day 2, 14:30
	day2, _, err := cutOne(f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now())))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	files, err := fb.Take()
	if err != nil || len(files) != 1 {
		t.Fatal(files, err)
	}
	if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_transfers where reference = 'po-v-2'`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_batches where batch_id = $1`, day2); err != nil {
		t.Fatal(err)
	}
	f.restore(t, f.clk.Now())
	for _, b := range [][]byte{rejection, fb.StatusReport(files[0]), fb.Bookings(files[0])} {
		if _, err := f.r.Import(ctx, app.SourceInbox, "r.xml", b); err != nil {
			t.Fatal(err)
		}
	}
	if st := f.state(t, "po-v"); st.State != app.RailFailed {
		t.Fatalf("attempt 1 after its rejection: %+v", st)
	}
	if st := f.submit(t, "po-v-2", "CNY", "620.00", bank("6222000011110001")); st.State != app.RailPaid {
		t.Errorf("attempt 2 queued after the bank's booking of it was imported: %+v, want paid", st)
	}
	if got := f.releaseAndCut(t); got != "" {
		t.Errorf("the first batch after the release sends %q: the bank booked po-v-2 before the restore", got)
	}
}

// A transfer queued by a process that did not read the earlier reports (a
// version before this one, during a rolling upgrade) while one names it
// unapplied: the release is refused, naming it, until the report is
// imported again (its entry is then applied, the answer a duplicate).
func TestReleaseRefusedWhileAReportNamingAQueuedTransferIsUnapplied(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-late", "CNY", "620.00", bank("6222000011110001"))
	fb, file := f.sendDay1(t)
	if _, err := f.r.Pool.Exec(ctx, `create table queued_late as select * from payout.bank_transfers;
		delete from payout.bank_transfers; delete from payout.bank_batches`); err != nil {
		t.Fatal(err)
	}
	f.restore(t, f.clk.Now())
	booking := fb.Bookings(file)
	if _, err := f.r.Import(ctx, app.SourceInbox, "book.xml", booking); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Pool.Exec(ctx, `update queued_late set state = 'queued', batch_id = null, pmt_inf_id = '';
		insert into payout.bank_transfers select * from queued_late`); err != nil {
		t.Fatal(err)
	}

	_, err := f.r.ReleaseRestoreHold(ctx, "finance:alice")
	if !errors.Is(err, apperr.ErrPrecondition) || !strings.Contains(err.Error(), "po-late") {
		t.Errorf("release while po-late is queued and a booking of it is unapplied: %v; want ErrPrecondition naming po-late", err)
	}
	if h, err := f.r.RestoreHold(ctx); err != nil || !h.Held() {
		t.Errorf("the hold after a refused release: %+v %v; want held", h, err)
	}
	rep, err := f.r.Import(ctx, app.SourceInbox, "book.xml", booking)
	if err != nil || !rep.Duplicate || outcomes(rep)["po-late"] != app.EntryApplied {
		t.Fatalf("the booking imported again: %+v %v; want a duplicate with its entry applied", rep, err)
	}
	if got := f.bookState(t, "po-late"); got != stateBooked {
		t.Errorf("po-late after its booking was imported again: %s, want booked", got)
	}
	if got := f.releaseAndCut(t); got != "" {
		t.Errorf("the first batch after the release sends %q: the bank booked po-late", got)
	}
}

// A transfer queued while the bank's report on it is being imported: the
// import does not see the transfer (not committed yet) and Submit does not
// see the entry (not committed yet), unless Submit waits for the import.
// Each transfer ends booked whichever commits first.
func TestReportImportedWhileItsTransferIsQueued(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	const transfers = 40
	refs := make([]string, transfers)
	for i := range refs {
		refs[i] = fmt.Sprintf("po-%02d", i)
		f.submit(t, refs[i], "CNY", "620.00", bank("6222000011110001"))
	}
	fb, file := f.sendDay1(t)
	if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_transfers; delete from payout.bank_batches`); err != nil {
		t.Fatal(err)
	}
	f.restore(t, f.clk.Now())
	var wg sync.WaitGroup
	errs := make(chan error, transfers+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := f.r.Import(ctx, app.SourceInbox, "book.xml", fb.Bookings(file))
		errs <- err
	}()
	for _, ref := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.r.Submit(ctx, app.Transfer{Reference: ref, ProviderID: "p-" + ref, Currency: "CNY",
				Amount: decimal.RequireFromString("620.00"), Method: bank("6222000011110001")})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var queued []string
	rows, err := f.r.Pool.Query(ctx, `select reference from payout.bank_transfers where state <> 'booked' order by reference`)
	if err != nil {
		t.Fatal(err)
	}
	if queued, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(queued) > 0 {
		t.Errorf("transfers the bank booked left unbooked (%d of %d): %v", len(queued), transfers, queued)
	}
}

// A payout made again after a restore with another net (usage after the
// point not sent again) queues its transfer under the EndToEndId the bank
// was sent in a file after the point, at the old net. The bank's booking
// of it is an amount_mismatch, not applied: the transfer stayed queued,
// and the release sent it again (paid twice, the second time at the new
// net). It leaves the queue for finance's review, whether the booking is
// imported after the transfer is queued or before (kept and read again).
func TestAmountMismatchOfAQueuedTransferGoesToReview(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"queued-then-imported", "imported-then-queued"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			f := newRail(t, t.TempDir(), t.TempDir())
			ctx := context.Background()
			f.submit(t, "po-late", "CNY", "620.00", bank("6222000011110001"))
			fb, file := f.sendDay1(t)
			// Restored to a point before the payout existed: its transfer is gone.
			if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_transfers; delete from payout.bank_batches`); err != nil {
				t.Fatal(err)
			}
			f.restore(t, f.clk.Now())
			booking := fb.Bookings(file)
			if order == "queued-then-imported" {
				f.submit(t, "po-late", "CNY", "580.00", bank("6222000011110001")) // made again, another net
			}
			rep, err := f.r.Import(ctx, app.SourceInbox, "book.xml", booking)
			if err != nil {
				t.Fatal(err)
			}
			if order == "imported-then-queued" {
				f.submit(t, "po-late", "CNY", "580.00", bank("6222000011110001"))
				if rep, err = f.r.Import(ctx, app.SourceInbox, "book.xml", booking); err != nil {
					t.Fatal(err)
				}
			}
			if o := outcomes(rep); o["po-late"] != app.EntryAmountMismatch {
				t.Errorf("the bank's booking of 620.00 on a transfer of 580.00: %v (%+v), want amount_mismatch", o, rep.Entries)
			}
			if got := f.bookState(t, "po-late"); got != stateReview {
				t.Errorf("po-late after the bank's booking at another amount: %s, want %s", got, stateReview)
			}
			if st := f.state(t, "po-late"); st.State != app.RailAccepted {
				t.Errorf("po-late's payout in review: %+v, want accepted (it stays submitted)", st)
			}
			if got := f.releaseAndCut(t); got != "" {
				t.Errorf("the first batch after the release sends %q: the bank booked po-late before the restore", got)
			}
		})
	}
}

// The only report the bank sent after the point on a transfer queued again
// is a rejection of a duplicate (its file was delivered twice): the bank
// has the payment, the copy was refused. Ignored, the transfer stayed
// queued and the release sent it again; imported before the transfer was
// queued it was not even kept to be read again.
func TestDuplicateRejectionOfAQueuedTransferGoesToReview(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"DU05", "AM05", "DUPL"} {
		for _, order := range []string{"queued-then-imported", "imported-then-queued"} {
			t.Run(code+"/"+order, func(t *testing.T) {
				t.Parallel()
				f := newRail(t, t.TempDir(), t.TempDir())
				ctx := context.Background()
				f.submit(t, "po-sent", "CNY", "620.00", bank("6222000011110001"))
				fb, file := f.sendDay1(t)
				if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_transfers; delete from payout.bank_batches`); err != nil {
					t.Fatal(err)
				}
				f.restore(t, f.clk.Now())
				dup := bytes.ReplaceAll(fb.StatusReport(file), []byte("<TxSts>ACCP</TxSts>"),
					[]byte("<TxSts>RJCT</TxSts><StsRsnInf><Rsn><Cd>"+code+"</Cd></Rsn></StsRsnInf>"))
				if order == "queued-then-imported" {
					f.submit(t, "po-sent", "CNY", "620.00", bank("6222000011110001"))
				}
				if _, err := f.r.Import(ctx, app.SourceInbox, "dup.xml", dup); err != nil {
					t.Fatal(err)
				}
				if order == "imported-then-queued" {
					f.submit(t, "po-sent", "CNY", "620.00", bank("6222000011110001"))
				}
				if got := f.bookState(t, "po-sent"); got != stateReview {
					t.Errorf("po-sent after the bank refused a duplicate of it (%s): %s, want %s", code, got, stateReview)
				}
				if st := f.state(t, "po-sent"); st.State != app.RailAccepted {
					t.Errorf("po-sent's payout: %+v, want accepted (not failed: the original stands)", st)
				}
				if got := f.releaseAndCut(t); got != "" {
					t.Errorf("the first batch after the release sends %q: the bank has po-sent", got)
				}
			})
		}
	}
}

// A transfer in review is the bank's: a report that settles it (its
// booking) applies as to a batched one and closes the review; a status
// short of that (accepted) leaves it with finance.
func TestBankReportSettlesATransferInReview(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-sent", "CNY", "620.00", bank("6222000011110001"))
	fb, file := f.sendDay1(t)
	f.restoreToBeforeTheCut(t)
	f.restore(t, f.clk.Now())
	sts := fb.StatusReport(file)
	dup := bytes.ReplaceAll(sts, []byte("<TxSts>ACCP</TxSts>"), []byte("<TxSts>RJCT</TxSts><StsRsnInf><Rsn><Cd>DU05</Cd></Rsn></StsRsnInf>"))
	if _, err := f.r.Import(ctx, app.SourceInbox, "dup.xml", dup); err != nil {
		t.Fatal(err)
	}
	if got := f.bookState(t, "po-sent"); got != stateReview {
		t.Fatalf("po-sent after the bank refused a copy of it: %s, want %s", got, stateReview)
	}
	rep, err := f.r.Import(ctx, app.SourceInbox, "sts.xml", sts)
	if err != nil {
		t.Fatal(err)
	}
	if o := outcomes(rep); o["po-sent"] != app.EntryUnchanged || f.bookState(t, "po-sent") != stateReview {
		t.Errorf("the original's acceptance on a transfer in review: %v, %s; want unchanged, still in review", o, f.bookState(t, "po-sent"))
	}
	rep, err = f.r.Import(ctx, app.SourceInbox, "book.xml", fb.Bookings(file))
	if err != nil {
		t.Fatal(err)
	}
	if o := outcomes(rep); o["po-sent"] != app.EntryApplied || f.bookState(t, "po-sent") != stateBooked {
		t.Errorf("the original's booking on a transfer in review: %v, %s; want applied, booked", o, f.bookState(t, "po-sent"))
	}
	if st := f.state(t, "po-sent"); st.State != app.RailPaid {
		t.Errorf("po-sent booked: %+v, want paid", st)
	}
	var resolution, by string
	if err := f.r.Pool.QueryRow(ctx, `select resolution, resolved_by from payout.bank_transfer_reviews where reference = 'po-sent'`).Scan(&resolution, &by); err != nil ||
		resolution != app.BankResolvedByBank || by != "bank" {
		t.Errorf("po-sent's review after the booking: %q by %q (%v); want resolved by the bank", resolution, by, err)
	}
}

// statusOfBatch is a pain.002 on batch id with only a group status and
// payment information statuses (no payment named).
func statusOfBatch(id, grp, pmtInfs string) []byte {
	return []byte(`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10"><CstmrPmtStsRpt>
<GrpHdr><MsgId>S-LOST</MsgId><CreDtTm>2026-12-01T16:00:00+08:00</CreDtTm></GrpHdr>
<OrgnlGrpInfAndSts><OrgnlMsgId>` + id + `</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId>` + grp + `</OrgnlGrpInfAndSts>` + pmtInfs + `
</CstmrPmtStsRpt></Document>`)
}

// The bank's only report on a batch cut and sent after the recovery point
// (lost with the disaster) is a group status, or a payment information
// status, naming no payment. By ISO 20022 a status at group (PmtInf) level
// is the status of every payment of the group (block); the rail no longer
// knows which payments those were, so it moved nothing ("no payout batch")
// and the release sent them all again. Every transfer that may have been
// in it leaves the queue for finance's review: those queued before its
// cutoff and restored queued, and payouts made again after the restore
// (before or after the report's import); one queued after the cutoff and
// before the restore was not in it and goes out.
func TestGroupStatusOfALostBatchSendsNoneOfItAgain(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, grp, pmtInf string }{
		{name: "GrpSts ACCP", grp: "<GrpSts>ACCP</GrpSts>"},
		{name: "GrpSts ACSC", grp: "<GrpSts>ACSC</GrpSts>"},
		{name: "GrpSts ACTC", grp: "<GrpSts>ACTC</GrpSts>"},
		{name: "GrpSts RJCT", grp: "<GrpSts>RJCT</GrpSts><StsRsnInf><Rsn><Cd>FF01</Cd></Rsn></StsRsnInf>"},
		{name: "GrpSts RJCT DU01", grp: "<GrpSts>RJCT</GrpSts><StsRsnInf><Rsn><Cd>DU01</Cd></Rsn></StsRsnInf>"},
		{name: "PmtInfSts ACCP", pmtInf: "<OrgnlPmtInfAndSts><OrgnlPmtInfId>pb-20261201-1400-CNY-20261201</OrgnlPmtInfId><PmtInfSts>ACCP</PmtInfSts></OrgnlPmtInfAndSts>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newRail(t, t.TempDir(), t.TempDir())
			ctx := context.Background()
			f.submit(t, "po-a", "CNY", "620.00", bank("6222000011110001"))
			f.submit(t, "po-b", "CNY", "300.00", bank("6222000011110005"))
			f.submit(t, "po-c", "CNY", "40.00", bank("6222000011110006"))
			_, file := f.sendDay1(t) // 14:30: pb-20261201-1400 goes to the bank
			if id := file.Msg.MessageID; id != "pb-20261201-1400" {
				t.Fatalf("day 1's batch is %s", id)
			}
			f.submit(t, "po-next", "CNY", "50.00", bank("6222000011110007")) // after the cutoff
			// The recovery point is after po-a and po-next were queued, before
			// po-b and po-c were (made again after the restore) and before the cut.
			f.restoreToBeforeTheCut(t)
			if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_transfers where reference in ('po-b', 'po-c')`); err != nil {
				t.Fatal(err)
			}
			f.clk.Set(day1.Add(5 * time.Hour)) // 15:00
			f.restore(t, f.clk.Now())
			f.clk.Set(day1.Add(5*time.Hour + 10*time.Minute))
			f.submit(t, "po-b", "CNY", "300.00", bank("6222000011110005")) // made again before the import

			rep, err := f.r.Import(ctx, app.SourceInbox, "grp.xml", statusOfBatch("pb-20261201-1400", tt.grp, tt.pmtInf))
			if err != nil {
				t.Fatal(err)
			}
			f.clk.Set(day1.Add(5*time.Hour + 20*time.Minute))
			f.submit(t, "po-c", "CNY", "40.00", bank("6222000011110006")) // made again after it
			for _, ref := range []string{"po-a", "po-b", "po-c"} {
				if got := f.bookState(t, ref); got != stateReview {
					t.Errorf("%s, which may have been in the lost batch, after its %s: %s, want %s (entries %+v)", ref, tt.name, got, stateReview, rep.Entries)
				}
			}
			if got := f.releaseAndCut(t); got != "po-next" {
				t.Errorf("the first batch after the release sends %q, want po-next only (the others may be at the bank)", got)
			}
		})
	}
}

// A report on a lost batch that names every payment of it (as many as its
// OrgnlNbOfTxs) moves each payment it names and reviews no other
// transfer. One that gives a status only for one currency's payment
// information reviews the transfers of that currency it finds (po-a, CNY,
// goes out); a payout queued after it while held is reviewed whatever its
// currency (po-b: the report's entry keeps its statuses, not which
// currency each covers).
func TestLostBatchStatusCoversOnlyItsPayments(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, grp, pmtInfs string
		wantReview         []string
		wantSent           string
	}{{
		name: "every payment named",
		grp:  "<OrgnlNbOfTxs>1</OrgnlNbOfTxs><GrpSts>ACCP</GrpSts>",
		pmtInfs: `<OrgnlPmtInfAndSts><OrgnlPmtInfId>pb-20261201-1400-CNY-20261201</OrgnlPmtInfId>
<TxInfAndSts><OrgnlEndToEndId>po-a</OrgnlEndToEndId><TxSts>ACCP</TxSts></TxInfAndSts></OrgnlPmtInfAndSts>`,
		wantSent: "po-b,po-u",
	}, {
		name:       "USD only",
		pmtInfs:    "<OrgnlPmtInfAndSts><OrgnlPmtInfId>pb-20261201-1400-USD-20261201</OrgnlPmtInfId><PmtInfSts>RJCT</PmtInfSts><StsRsnInf><Rsn><Cd>AM03</Cd></Rsn></StsRsnInf></OrgnlPmtInfAndSts>",
		wantReview: []string{"po-b", "po-u"},
		wantSent:   "po-a",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newRail(t, t.TempDir(), t.TempDir())
			ctx := context.Background()
			f.submit(t, "po-a", "CNY", "620.00", bank("6222000011110001"))
			f.submit(t, "po-u", "USD", "30.00", bank("6222000011110008"))
			f.sendDay1(t)
			f.restoreToBeforeTheCut(t)
			f.clk.Set(day1.Add(5 * time.Hour))
			f.restore(t, f.clk.Now())
			f.clk.Set(day1.Add(5*time.Hour + 10*time.Minute))
			if _, err := f.r.Import(ctx, app.SourceInbox, "sts.xml", statusOfBatch("pb-20261201-1400", tt.grp, tt.pmtInfs)); err != nil {
				t.Fatal(err)
			}
			f.submit(t, "po-b", "CNY", "300.00", bank("6222000011110005")) // a payout made after the restore
			var review []string
			rows, err := f.r.Pool.Query(ctx, `select reference from payout.bank_transfers where state = 'review' order by reference`)
			if err != nil {
				t.Fatal(err)
			}
			if review, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(review, tt.wantReview) {
				t.Errorf("in review: %v, want %v", review, tt.wantReview)
			}
			if got := f.releaseAndCut(t); got != tt.wantSent {
				t.Errorf("the first batch after the release sends %q, want %q", got, tt.wantSent)
			}
		})
	}
}

// resolve is finance's resolution of a transfer in review.
func (f *fixture) resolve(e2e, resolution, amount, by string) (app.BankTransferReview, error) {
	res := app.BankTransferResolution{EndToEndID: e2e, Resolution: resolution, Currency: "CNY", Reason: "the bank's statement of 2026-12-02", By: by}
	if amount != "" {
		res.Amount = decimal.RequireFromString(amount)
	}
	return f.r.ResolveTransfer(context.Background(), res)
}

// A transfer in review waits for finance: the restore hold's answer lists
// it, and finance resolves it once, by an action kept with who and why —
// paid at the amount the bank paid (booked, its payout paid), or back on
// the queue (sent in the next file). The same resolution again answers
// the first; another one is a conflict; a transfer not in review, or
// unknown, is refused.
func TestResolveATransferInReview(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-paid", "CNY", "620.00", bank("6222000011110001"))
	f.submit(t, "po-dup", "CNY", "300.00", bank("6222000011110002")) // blocked: not in the bank's bookings
	fb, file := f.sendDay1(t)
	f.submit(t, "po-next", "CNY", "50.00", bank("6222000011110006"))
	if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_transfers where reference <> 'po-next'; delete from payout.bank_batches`); err != nil {
		t.Fatal(err)
	}
	f.restore(t, f.clk.Now())
	f.clk.Set(f.clk.Now().Add(time.Minute))
	f.submit(t, "po-paid", "CNY", "580.00", bank("6222000011110001")) // made again with another net
	f.submit(t, "po-dup", "CNY", "300.00", bank("6222000011110002"))
	// The bank's report on a copy: po-dup refused as a duplicate (po-paid accepted).
	dup := bytes.ReplaceAll(fb.StatusReport(file), []byte("<Cd>AC06</Cd>"), []byte("<Cd>DU05</Cd>"))
	for _, b := range [][]byte{fb.Bookings(file), dup} {
		if _, err := f.r.Import(ctx, app.SourceInbox, "r.xml", b); err != nil {
			t.Fatal(err)
		}
	}
	h, err := f.r.RestoreHold(ctx)
	if err != nil || h.ReviewTransfers != 2 || len(h.InReview) != 2 || h.QueuedTransfers != 1 {
		t.Fatalf("the hold with two transfers in review: %+v %v", h, err)
	}
	if r := h.InReview[0]; r.Reference != "po-dup" || r.Cause != app.ReviewDuplicateRejection || r.State != stateReview || r.Resolution != "" {
		t.Errorf("the hold's first review: %+v; want po-dup's, a duplicate rejection, open", r)
	}
	if r := h.InReview[1]; r.Reference != "po-paid" || r.Cause != app.ReviewAmountMismatch || !r.Amount.Equal(decimal.RequireFromString("580")) ||
		!strings.Contains(r.Note, "620") {
		t.Errorf("the hold's second review: %+v; want po-paid's, an amount mismatch naming the bank's 620.00", r)
	}

	f.clk.Set(f.clk.Now().Add(time.Minute))
	paid, err := f.resolve("po-paid", app.BankResolvePaid, "620.00", "finance:alice")
	if err != nil || paid.Resolution != app.BankResolvePaid || paid.PaidAmount == nil || !paid.PaidAmount.Equal(decimal.RequireFromString("620")) ||
		paid.ResolvedBy != "finance:alice" || paid.ResolvedAt == nil || !paid.ResolvedAt.Equal(f.clk.Now()) || paid.State != stateBooked {
		t.Fatalf("po-paid resolved paid at 620.00: %+v %v", paid, err)
	}
	if st := f.state(t, "po-paid"); st.State != app.RailPaid {
		t.Errorf("po-paid resolved paid: %+v, want paid", st)
	}
	if !slices.Contains(f.notify, "po-paid") {
		t.Errorf("notified %v, want po-paid (its payout follows)", f.notify)
	}
	f.clk.Set(f.clk.Now().Add(time.Minute))
	if again, err := f.resolve("po-paid", app.BankResolvePaid, "620.00", "finance:bob"); err != nil || again.ResolvedBy != "finance:alice" ||
		!again.ResolvedAt.Equal(*paid.ResolvedAt) {
		t.Errorf("the same resolution again: %+v %v; want the first's answer", again, err)
	}
	// Paid at the same amount with another reason is not the call sent
	// again: its reason would be lost under a 200 (as a resolution of a
	// rail_amount_mismatch answers, a 409 naming the first reason).
	_, err = f.r.ResolveTransfer(ctx, app.BankTransferResolution{EndToEndID: "po-paid", Resolution: app.BankResolvePaid,
		Amount: decimal.RequireFromString("620.00"), Currency: "CNY", Reason: "the bank's call of 2026-12-03", By: "finance:bob"})
	if !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), `"the bank's statement of 2026-12-02"`) {
		t.Errorf("po-paid resolved paid, then paid at the same amount with another reason: %v; want ErrConflict naming the first reason", err)
	}
	for _, c := range []struct{ resolution, amount string }{{app.BankResolveRequeue, ""}, {app.BankResolvePaid, "580.00"}} {
		if _, err := f.resolve("po-paid", c.resolution, c.amount, "finance:bob"); !errors.Is(err, apperr.ErrConflict) {
			t.Errorf("po-paid resolved paid, then %s %s: %v, want ErrConflict", c.resolution, c.amount, err)
		}
	}

	requeued, err := f.resolve("po-dup", app.BankResolveRequeue, "", "finance:alice")
	if err != nil || requeued.State != stateQueued || requeued.Resolution != app.BankResolveRequeue {
		t.Fatalf("po-dup put back on the queue: %+v %v", requeued, err)
	}
	if _, err := f.resolve("po-next", app.BankResolveRequeue, "", "finance:alice"); !errors.Is(err, apperr.ErrPrecondition) {
		t.Errorf("a queued transfer never in review resolved: %v, want ErrPrecondition", err)
	}
	if _, err := f.resolve("po-none", app.BankResolveRequeue, "", "finance:alice"); !errors.Is(err, apperr.ErrNotFound) {
		t.Errorf("an unknown EndToEndId resolved: %v, want ErrNotFound", err)
	}
	if h, err := f.r.RestoreHold(ctx); err != nil || h.ReviewTransfers != 0 || len(h.InReview) != 0 || h.QueuedTransfers != 2 {
		t.Errorf("the hold once both are resolved: %+v %v; want none in review, po-next and po-dup queued", h, err)
	}
	if got := f.releaseAndCut(t); got != "po-next,po-dup" && got != "po-dup,po-next" {
		t.Errorf("the first batch after the release sends %q, want po-next and po-dup (put back on the queue)", got)
	}
}

// An open review of a transfer not in review (a database made
// inconsistent: by hand, or a restore of part of it) is refused as a
// failed precondition naming the transfer and its review, and logged at
// ERROR with the detail for an operator to mend; nothing changes. It was
// an untyped error: a bare 500, the detail in no answer.
func TestResolveAnOpenReviewOfATransferNotInReview(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	var logs lockedBuffer
	f.r.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	ctx := context.Background()
	f.submit(t, "po-queued", "CNY", "620.00", bank("6222000011110001"))
	var id int64
	if err := f.r.Pool.QueryRow(ctx, `insert into payout.bank_transfer_reviews (reference, cause, note, since) values ('po-queued', $1, 'by the test', $2)
		returning review_id`, app.ReviewLostBatch, f.clk.Now()).Scan(&id); err != nil {
		t.Fatal(err)
	}
	_, err := f.resolve("po-queued", app.BankResolveRequeue, "", "finance:alice")
	if !errors.Is(err, apperr.ErrPrecondition) || status.Code(apperr.ToStatus(err)) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "bank transfer po-queued") || !strings.Contains(err.Error(), fmt.Sprintf("review %d", id)) {
		t.Errorf("resolved po-queued (queued) with its review %d open: %v; want a failed precondition naming both", id, err)
	}
	if got := logs.String(); !strings.Contains(got, `"level":"ERROR"`) || !strings.Contains(got, fmt.Sprintf(`"review_id":%d`, id)) ||
		!strings.Contains(got, `"state":"queued"`) {
		t.Errorf("logged %s; want an ERROR naming review %d and the transfer's state queued", got, id)
	}
	var open int
	if err := f.r.Pool.QueryRow(ctx, `select count(*) from payout.bank_transfer_reviews where review_id = $1 and resolved_at is null`, id).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if got := f.bookState(t, "po-queued"); got != stateQueued || open != 1 {
		t.Errorf("po-queued after the refusal: %s, its review open %d; want %s, the review still open", got, open, stateQueued)
	}
}

// lockedBuffer is a log's output, written and read from any goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A resolution paid names the amount the bank paid, in the transfer's
// currency.
func TestResolvePaidNeedsTheBanksAmount(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-sent", "CNY", "620.00", bank("6222000011110001"))
	fb, file := f.sendDay1(t)
	f.restoreToBeforeTheCut(t)
	f.restore(t, f.clk.Now())
	dup := bytes.ReplaceAll(fb.StatusReport(file), []byte("<TxSts>ACCP</TxSts>"), []byte("<TxSts>RJCT</TxSts><StsRsnInf><Rsn><Cd>DU05</Cd></Rsn></StsRsnInf>"))
	if _, err := f.r.Import(ctx, app.SourceInbox, "dup.xml", dup); err != nil {
		t.Fatal(err)
	}
	for _, res := range []app.BankTransferResolution{
		{EndToEndID: "po-sent", Resolution: app.BankResolvePaid, Currency: "CNY", Reason: "statement", By: "finance"},
		{EndToEndID: "po-sent", Resolution: app.BankResolvePaid, Amount: decimal.RequireFromString("620.00"), Currency: "USD", Reason: "statement", By: "finance"},
		{EndToEndID: "po-sent", Resolution: "ignore", Reason: "statement", By: "finance"},
	} {
		var ie *apperr.InvalidError
		if _, err := f.r.ResolveTransfer(ctx, res); !errors.As(err, &ie) {
			t.Errorf("resolved %+v: %v, want invalid", res, err)
		}
	}
	if got := f.bookState(t, "po-sent"); got != stateReview {
		t.Errorf("po-sent after refused resolutions: %s, want still %s", got, stateReview)
	}
}

// A status report on a batch the rail never had (none of its own, or one
// cut after the latest restore) is what it was: a duplicate's rejection
// is ignored, a status that asks no state (ACTC) leaves no entry, an
// acceptance is reported unknown — no lost batch, no transfer reviewed.
func TestStatusOfABatchNoneOfOursReviewsNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, id, grp string
		want          []string // outcomes
	}{
		{name: "not the rail's id", id: "BANK-X-1", grp: "<GrpSts>ACCP</GrpSts>", want: []string{app.EntryUnknownReference}},
		{name: "duplicate", id: "pb-20261202-1400", grp: "<GrpSts>RJCT</GrpSts><StsRsnInf><Rsn><Cd>DU01</Cd></Rsn></StsRsnInf>", want: []string{app.EntryIgnored}},
		{name: "ACTC", id: "pb-20261202-1400", grp: "<GrpSts>ACTC</GrpSts>"},
		{name: "ACCP", id: "pb-20261202-1400", grp: "<GrpSts>ACCP</GrpSts>", want: []string{app.EntryUnknownReference}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newRail(t, "", "")
			ctx := context.Background()
			f.restore(t, day1) // before day 2's cutoff: pb-20261202-1400 was not lost with it
			f.submit(t, "po-a", "CNY", "620.00", bank("6222000011110001"))
			rep, err := f.r.Import(ctx, app.SourceInbox, "s.xml", statusOfBatch(tt.id, tt.grp, ""))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range rep.Entries {
				got = append(got, e.Outcome)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("entries %+v, want outcomes %v", rep.Entries, tt.want)
			}
			if s := f.bookState(t, "po-a"); s != stateQueued {
				t.Errorf("po-a: %s, want queued", s)
			}
		})
	}
}

// Resolved paid at the amount the bank paid, the transfer is reported at
// that amount (RailStatus.Currency, Amount): at another amount than the
// payout made again, the payout is not recorded paid at its own net (the
// payout workflow's rail_amount_mismatch, as for Alipay and WeChat Pay).
// Reported without an amount, the payout read paid at 580.00 where the
// bank paid 620.00.
func TestResolvedPaidReportsTheBanksAmount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, paid string }{{"another amount", "620.00"}, {"the transfer's", "580.00"}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newRail(t, t.TempDir(), t.TempDir())
			ctx := context.Background()
			f.submit(t, "po-late", "CNY", "620.00", bank("6222000011110001"))
			fb, file := f.sendDay1(t)
			if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_transfers; delete from payout.bank_batches`); err != nil {
				t.Fatal(err)
			}
			f.restore(t, f.clk.Now())
			f.submit(t, "po-late", "CNY", "580.00", bank("6222000011110001")) // made again, another net
			if _, err := f.r.Import(ctx, app.SourceInbox, "book.xml", fb.Bookings(file)); err != nil {
				t.Fatal(err)
			}
			if _, err := f.resolve("po-late", app.BankResolvePaid, tt.paid, "finance:alice"); err != nil {
				t.Fatal(err)
			}
			st := f.state(t, "po-late")
			if st.State != app.RailPaid || st.Currency != "CNY" || !st.Amount.Equal(decimal.RequireFromString(tt.paid)) {
				t.Errorf("po-late resolved paid at %s: %+v; want paid, CNY %s", tt.paid, st, tt.paid)
			}
		})
	}
}

// A transfer resolved paid at another amount than its payout's net is
// booked while its payout stays submitted (rail_amount_mismatch) for
// finance: its workflow, woken, changes nothing. Resync woke it every
// tick, the oldest first, and a hundred of them (resyncMax) crowded out
// the payouts that do have to follow their transfer.
func TestResyncSkipsAPayoutHeldAsRailAmountMismatch(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-mismatch", "CNY", "580.00", bank("6222000011110001"))
	f.submit(t, "po-behind", "CNY", "50.00", bank("6222000011110002"))
	if _, err := f.r.Pool.Exec(ctx, `update payout.bank_transfers set state = 'booked',
		updated_at = case reference when 'po-mismatch' then $1::timestamptz else $1::timestamptz + interval '1 minute' end`, day1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status, failure_code, rail_reference)
		values ('p1', 'p-po-mismatch', 'c1', 'CNY', 580, 0, 0, 580, 'submitted', 'rail_amount_mismatch', 'po-mismatch'),
			('p2', 'p-po-behind', 'c1', 'CNY', 50, 0, 0, 50, 'submitted', '', 'po-behind')`); err != nil {
		t.Fatal(err)
	}
	f.clk.Set(day1.Add(time.Hour))
	if err := f.r.resync(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.notify, []string{"po-behind"}) {
		t.Errorf("resync woke %v, want po-behind only (po-mismatch's payout is held for finance)", f.notify)
	}
}

// Finance's requeue of a transfer in review is sent again (its answer
// lost) after a report of a batch lost with the restore moved the
// transfer, queued again while held, to a new review: the bank may have
// paid it. The resend answered that newer review, which it never saw,
// and put the transfer back on the queue: paid twice. It is a conflict
// naming the newer review, and the transfer stays in review; named by its
// review_id, the first review's resolution answers as before.
func TestResendOfAResolutionDoesNotResolveANewerReview(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-sent", "CNY", "620.00", bank("6222000011110001"))
	fb, file := f.sendDay1(t) // pb-20261201-1400
	f.restoreToBeforeTheCut(t)
	f.restore(t, f.clk.Now())
	f.clk.Set(f.clk.Now().Add(time.Minute))
	dup := bytes.ReplaceAll(fb.StatusReport(file), []byte("<TxSts>ACCP</TxSts>"), []byte("<TxSts>RJCT</TxSts><StsRsnInf><Rsn><Cd>DU05</Cd></Rsn></StsRsnInf>"))
	if _, err := f.r.Import(ctx, app.SourceInbox, "dup.xml", dup); err != nil {
		t.Fatal(err)
	}
	f.clk.Set(f.clk.Now().Add(time.Minute))
	first, err := f.resolve("po-sent", app.BankResolveRequeue, "", "finance:alice")
	if err != nil || first.State != stateQueued {
		t.Fatalf("po-sent put back on the queue: %+v %v", first, err)
	}
	f.clk.Set(f.clk.Now().Add(time.Minute))
	if _, err := f.r.Import(ctx, app.SourceInbox, "grp.xml", statusOfBatch("pb-20261201-1400", "<GrpSts>ACCP</GrpSts>", "")); err != nil {
		t.Fatal(err)
	}
	if got := f.bookState(t, "po-sent"); got != stateReview {
		t.Fatalf("po-sent, queued again while held, after the lost batch's group status: %s, want %s", got, stateReview)
	}
	f.clk.Set(f.clk.Now().Add(time.Minute))
	if again, err := f.resolve("po-sent", app.BankResolveRequeue, "", "finance:alice"); !errors.Is(err, apperr.ErrConflict) {
		t.Errorf("the first requeue sent again after a newer review opened: %+v %v, want ErrConflict", again, err)
	}
	if got := f.bookState(t, "po-sent"); got != stateReview {
		t.Errorf("po-sent after the resend: %s, want still %s (the bank may have paid it)", got, stateReview)
	}
	byID := func(id int64) (app.BankTransferReview, error) {
		return f.r.ResolveTransfer(ctx, app.BankTransferResolution{EndToEndID: "po-sent", ReviewID: id, Resolution: app.BankResolveRequeue,
			Currency: "CNY", Reason: "the bank's statement of 2026-12-02", By: "finance:alice"})
	}
	if again, err := byID(first.ReviewID); err != nil || again.ReviewID != first.ReviewID || !again.ResolvedAt.Equal(*first.ResolvedAt) ||
		again.State != stateReview {
		t.Errorf("the first requeue sent again naming its review %d: %+v %v; want the first's answer, po-sent still in review", first.ReviewID, again, err)
	}
	if _, err := byID(first.ReviewID + 100); !errors.Is(err, apperr.ErrNotFound) {
		t.Errorf("a review po-sent never had resolved: %v, want ErrNotFound", err)
	}
	h, err := f.r.RestoreHold(ctx)
	if err != nil || len(h.InReview) != 1 || h.InReview[0].ReviewID == first.ReviewID || h.InReview[0].Cause != app.ReviewLostBatch {
		t.Fatalf("the hold lists po-sent's newer review: %+v %v", h, err)
	}
	if second, err := byID(h.InReview[0].ReviewID); err != nil || second.State != stateQueued || second.ReviewID != h.InReview[0].ReviewID {
		t.Errorf("the newer review resolved by its review_id: %+v %v; want po-sent queued", second, err)
	}
}

// A payout that may have been in a batch lost with the restore, whose
// workflow submits its transfer only after the hold's release (its
// settled event replayed late, or its workflow behind): the lost batch's
// report, imported while held, reviewed the transfers queued then, and
// this one, queued after the release, went into the next file: paid
// twice. A payout created before the release goes to review as it is
// queued; one created after it was in no batch lost with the restore.
func TestPayoutQueuedAfterTheReleaseOfALostBatchIsReviewed(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	f.submit(t, "po-a", "CNY", "620.00", bank("6222000011110001"))
	f.sendDay1(t) // pb-20261201-1400
	f.restoreToBeforeTheCut(t)
	f.clk.Set(day1.Add(5 * time.Hour))
	f.restore(t, f.clk.Now())
	f.clk.Set(f.clk.Now().Add(time.Minute))
	if _, err := f.r.Import(ctx, app.SourceInbox, "grp.xml", statusOfBatch("pb-20261201-1400", "<GrpSts>ACCP</GrpSts>", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.ReleaseRestoreHold(ctx, "finance:alice"); err != nil {
		t.Fatal(err)
	}
	released := f.clk.Now()
	if _, err := f.r.Pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status, created_at)
		values ('po-old', 'p-po-old', 'c1', 'CNY', 300, 0, 0, 300, 'created', $1), ('po-new', 'p-po-new', 'c2', 'CNY', 50, 0, 0, 50, 'created', $2)`,
		day1, released.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.clk.Set(released.Add(2 * time.Minute))
	f.submit(t, "po-old", "CNY", "300.00", bank("6222000011110005"))
	f.submit(t, "po-new", "CNY", "50.00", bank("6222000011110006"))
	if got := f.bookState(t, "po-old"); got != stateReview {
		t.Errorf("po-old, created before the release and queued after it: %s, want %s (it may be in the lost batch)", got, stateReview)
	}
	if got := f.bookState(t, "po-new"); got != stateQueued {
		t.Errorf("po-new, created after the release: %s, want %s", got, stateQueued)
	}
}

// A payout whose bank transfer was returned but that can no longer follow
// the return (settled outside by finance, or failed) is not behind:
// resync leaves it alone. Re-announced every tick forever, the oldest
// first, a hundred of them crowded out the payouts that are behind.
func TestResyncSkipsAReturnedTransferWhosePayoutIsFinal(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	for _, ref := range []string{"po-so", "po-failed", "po-behind", "po-behind-paid"} {
		f.submit(t, ref, "CNY", "50.00", bank("6222000011110001"))
	}
	if _, err := f.r.Pool.Exec(ctx, `update payout.bank_transfers set state = 'returned',
		updated_at = case reference when 'po-behind' then $1::timestamptz + interval '1 minute' else $1::timestamptz end`, day1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status, failure_code, rail_reference)
		values ('p1', 'p-po-so', 'c1', 'CNY', 50, 0, 0, 50, 'settled_outside', '', 'po-so'),
			('p2', 'p-po-failed', 'c1', 'CNY', 50, 0, 0, 50, 'failed', 'account_closed', 'po-failed'),
			('p3', 'p-po-behind', 'c1', 'CNY', 50, 0, 0, 50, 'in_transit', '', 'po-behind'),
			('p4', 'p-po-behind-paid', 'c1', 'CNY', 50, 0, 0, 50, 'paid', '', 'po-behind-paid')`); err != nil {
		t.Fatal(err)
	}
	f.clk.Set(day1.Add(time.Hour))
	if err := f.r.resync(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.notify, []string{"po-behind-paid", "po-behind"}) {
		t.Errorf("resync woke %v, want po-behind-paid and po-behind only (po-so's payout was settled outside, po-failed's failed)", f.notify)
	}
}

// More than a resync's worth of settled-outside payouts whose transfers
// were returned does not keep a payout that is behind from being woken.
func TestResyncWakesALaggingPayoutBehindManySettledOutside(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	for i := range resyncMax + 1 {
		f.submit(t, fmt.Sprintf("po-so-%03d", i), "CNY", "50.00", bank("6222000011110001"))
	}
	f.submit(t, "po-behind", "CNY", "50.00", bank("6222000011110002"))
	if _, err := f.r.Pool.Exec(ctx, `update payout.bank_transfers set state = 'returned',
		updated_at = case reference when 'po-behind' then $1::timestamptz + interval '1 minute' else $1::timestamptz end`, day1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status, failure_code, rail_reference)
		select 'p-' || reference, 'p-' || reference, 'c1', 'CNY', 50, 0, 0, 50,
			case reference when 'po-behind' then 'paid' else 'settled_outside' end, '', reference
		from payout.bank_transfers`); err != nil {
		t.Fatal(err)
	}
	f.clk.Set(day1.Add(time.Hour))
	if err := f.r.resync(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.notify, []string{"po-behind"}) {
		t.Errorf("resync woke %d references (%v...), want po-behind only", len(f.notify), f.notify[:min(3, len(f.notify))])
	}
}
