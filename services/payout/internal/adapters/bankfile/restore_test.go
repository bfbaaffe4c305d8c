package bankfile

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

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
	if _, _, err := f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now())); err != nil {
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
	id, built, err := f.r.Cut(ctx, f.r.LastCutoff(f.clk.Now().AddDate(0, 0, 1)))
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
