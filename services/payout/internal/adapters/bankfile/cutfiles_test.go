package bankfile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/iso20022/fakebank"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// More transfers queued at a cutoff than one file takes: the cutoff
// builds as many files as it needs, each within the cap and under its own
// id, the oldest transfers in the first, each transfer in exactly one of
// them; a second cut answers the same files; each file is delivered under
// its own name, and the bank's pain.002 and camt.054 on the second move
// its transfers only.
func TestCutSplitsACutoffIntoFilesOfAtMostTheCap(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), t.TempDir())
	f.r.transfersMax = 2
	ctx := context.Background()
	refs := []string{"po-1", "po-2", "po-3", "po-4", "po-5"}
	for i, ref := range refs { // a minute apart, po-1 the oldest
		f.clk.Set(day1.Add(time.Duration(i) * time.Minute))
		ccy, amt := "CNY", "100.00"
		if ref == "po-3" {
			ccy, amt = "USD", "40.00"
		}
		f.submit(t, ref, ccy, amt, bank(fmt.Sprintf("62220000111100%d", 10+i)))
	}
	f.clk.Set(day1.Add(4*time.Hour + 30*time.Minute)) // after the cutoff
	f.submit(t, "po-late", "CNY", "100.00", bank("6222000011110020"))
	cut := f.r.LastCutoff(day1.Add(5 * time.Hour))

	ids, built, err := f.r.Cut(ctx, cut)
	if err != nil || !built {
		t.Fatal(ids, built, err)
	}
	// Computed from the inputs: the cap of 2, oldest first.
	wantIDs := []string{"pb-20261201-1400", "pb-20261201-1400-02", "pb-20261201-1400-03"}
	wantFiles := [][]string{{"po-1", "po-2"}, {"po-3", "po-4"}, {"po-5"}}
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("cut %v, want %v", ids, wantIDs)
	}
	var all []string
	for i, id := range wantIDs {
		file, err := f.r.BatchFile(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		p, err := iso20022.ParsePain001(file)
		if err != nil {
			t.Fatal(err)
		}
		got := e2es(p)
		slices.Sort(got)
		if p.MessageID != id || !slices.Equal(got, wantFiles[i]) {
			t.Errorf("file %s: MsgId %s, transfers %v, want %v", id, p.MessageID, got, wantFiles[i])
		}
		b, err := f.r.GetBatch(ctx, id)
		if err != nil || b.Transfers != len(wantFiles[i]) || !b.CutoffAt.Equal(cut) {
			t.Errorf("batch %s: %+v %v", id, b, err)
		}
		all = append(all, got...)
	}
	slices.Sort(all)
	if !slices.Equal(all, refs) {
		t.Errorf("the files carry %v, want each of %v once", all, refs)
	}
	// The book agrees: each transfer batched in its file, none left
	// queued at or before the cutoff, the late one queued for tomorrow.
	var left, misplaced int
	if err := f.r.Pool.QueryRow(ctx, `select
			count(*) filter (where state = 'queued' and queued_at <= $1),
			count(*) filter (where queued_at <= $1 and (batch_id is null or batch_id <> all($2::text[])))
		from payout.bank_transfers`, cut, wantIDs).Scan(&left, &misplaced); err != nil || left != 0 || misplaced != 0 {
		t.Errorf("%d transfers queued at or before the cutoff left queued, %d not in one of its files (%v)", left, misplaced, err)
	}
	for i, id := range wantIDs {
		for _, ref := range wantFiles[i] {
			var got string
			if err := f.r.Pool.QueryRow(ctx, `select coalesce(batch_id, '') from payout.bank_transfers where reference = $1`, ref).Scan(&got); err != nil || got != id {
				t.Errorf("%s in batch %q (%v), want %s", ref, got, err, id)
			}
		}
	}
	// Once per cutoff: a second cut answers the same files.
	if again, built, err := f.r.Cut(ctx, cut); err != nil || built || !slices.Equal(again, wantIDs) {
		t.Errorf("re-cut: %v built %v %v", again, built, err)
	}
	if next, built, err := f.r.Cut(ctx, cut.AddDate(0, 0, 1)); err != nil || !built || !slices.Equal(next, []string{"pb-20261202-1400"}) {
		t.Errorf("next day's cut: %v built %v %v", next, built, err)
	}

	// Each file is delivered under its own name; the bank takes each.
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	fb := fakebank.New(f.r.Cfg.OutboxDir, f.r.Cfg.InboxDir, debtor.Account)
	files, err := fb.Take()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var second fakebank.File
	for _, fl := range files {
		names = append(names, fl.Name)
		if fl.Duplicate {
			t.Errorf("the bank refused %s as a duplicate", fl.Name)
		}
		if fl.Msg.MessageID == wantIDs[1] {
			second = fl
		}
	}
	slices.Sort(names)
	if want := []string{"pb-20261201-1400-02.xml", "pb-20261201-1400-03.xml", "pb-20261201-1400.xml", "pb-20261202-1400.xml"}; !slices.Equal(names, want) {
		t.Fatalf("outbox %v, want %v", names, want)
	}
	// The bank's pain.002 on the second file moves its transfers, only them.
	rep, err := f.r.Import(ctx, app.SourceUpload, "sts-2.xml", fb.StatusReport(second))
	if err != nil || rep.OriginalMessageID != wantIDs[1] {
		t.Fatalf("pain.002 on %s: %+v %v", wantIDs[1], rep, err)
	}
	for _, ref := range refs {
		want := app.RailAccepted
		if slices.Contains(wantFiles[1], ref) {
			want = app.RailInTransit
			if outcomes(rep)[ref] != app.EntryApplied {
				t.Errorf("pain.002 %s: %s (%+v)", ref, outcomes(rep)[ref], rep.Entries)
			}
		}
		if st := f.state(t, ref); st.State != want {
			t.Errorf("%s after the pain.002 on %s: %s, want %s", ref, wantIDs[1], st.State, want)
		}
	}
	if _, err := f.r.Import(ctx, app.SourceUpload, "ntf-2.xml", fb.Bookings(second)); err != nil {
		t.Fatal(err)
	}
	for _, ref := range wantFiles[1] {
		if st := f.state(t, ref); st.State != app.RailPaid {
			t.Errorf("%s after the camt.054 booking: %s, want paid", ref, st.State)
		}
	}
	// Newest first, a cutoff's files last to first, paged by id.
	var listed []string
	for before := ""; ; {
		page, err := f.r.ListBatches(ctx, before, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page {
			listed = append(listed, b.ID)
		}
		if len(page) < 3 {
			break
		}
		before = page[len(page)-1].ID
	}
	if want := []string{"pb-20261202-1400", wantIDs[2], wantIDs[1], wantIDs[0]}; !slices.Equal(listed, want) {
		t.Errorf("listed %v, want %v", listed, want)
	}
}

// Two transfers that each fit ISO 20022's 18 digits but whose control
// sum does not go out in two files of the cutoff: one file would carry a
// CtrlSum the bank refuses.
func TestCutSplitsWhereTheControlSumWouldPassISODigits(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-a", "CNY", "9000000000000000.00", bank("6222000011110010"))
	f.clk.Set(day1.Add(time.Minute))
	f.submit(t, "po-b", "CNY", "9000000000000000.00", bank("6222000011110011"))
	ids, built, err := f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour)))
	if err != nil || !built || strings.Join(ids, ",") != "pb-20261201-1400,pb-20261201-1400-02" {
		t.Fatalf("cut %v built %v: %v", ids, built, err)
	}
	for i, want := range []string{"po-a", "po-b"} {
		file, err := f.r.BatchFile(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		p, err := iso20022.ParsePain001(file)
		if err != nil || strings.Join(e2es(p), ",") != want {
			t.Errorf("file %s: %v %v, want %s", ids[i], e2es(p), err, want)
		}
	}
}

// A batch id names its cutoff, with or without a file's number (02 to
// 99); anything else is none of this rail's.
func TestBatchCutoffReadsEveryFileOfACutoff(t *testing.T) {
	t.Parallel()
	r := &Rail{Cfg: Config{Location: shanghai, CutoffHour: 14}}
	cut := time.Date(2026, 12, 1, 14, 0, 0, 0, shanghai)
	for _, tc := range []struct {
		give string
		want bool
	}{
		{"pb-20261201-1400", true},
		{"pb-20261201-1400-02", true},
		{"pb-20261201-1400-17", true},
		{"pb-20261201-1400-99", true},
		{"pb-20261201-1400-01", false},
		{"pb-20261201-1400-00", false},
		{"pb-20261201-1400-2", false},
		{"pb-20261201-1400-100", false},
		{"pb-20261201-1400-+2", false},
		{"pb-20261201-1400--2", false},
		{"pb-20261201-1400-", false},
		{"pb-20261201-1400-x2", false},
		{"pb-20261201-1400-02-02", false},
	} {
		got, ok := r.batchCutoff(tc.give)
		if ok != tc.want || (ok && !got.Equal(cut)) {
			t.Errorf("batchCutoff(%s) = %s %v, want %v", tc.give, got, ok, tc.want)
		}
	}
}

// A cutoff's files are built in one transaction: a cut failing at its
// second file (here a batch row already holding that id, a fault of the
// database's own) keeps none of them, every transfer stays queued, and
// the next cut builds them all, each transfer once.
func TestCutOfManyFilesIsAllOrNothing(t *testing.T) {
	t.Parallel()
	f := newRail(t, t.TempDir(), "")
	f.r.transfersMax = 2
	ctx := context.Background()
	refs := []string{"po-1", "po-2", "po-3"}
	for i, ref := range refs {
		f.clk.Set(day1.Add(time.Duration(i) * time.Minute))
		f.submit(t, ref, "CNY", "100.00", bank(fmt.Sprintf("62220000111100%d", 10+i)))
	}
	cut := f.r.LastCutoff(day1.Add(5 * time.Hour))
	if _, err := f.r.Pool.Exec(ctx, `insert into payout.bank_batches (batch_id, cutoff_at, execution_date, transfers, control_sum, file, file_sha256, created_at)
		values ('pb-20261201-1400-02', $1, '2026-11-01', 0, 0, '', '', $1)`, cut.AddDate(0, -1, 0)); err != nil {
		t.Fatal(err)
	}
	ids, built, err := f.r.Cut(ctx, cut)
	if err == nil || !strings.Contains(err.Error(), "bank_batches_pkey") || built || len(ids) != 0 {
		t.Fatalf("cut with its second file's id taken: %v built %v: %v, want the duplicate key", ids, built, err)
	}
	var queued, batches int
	if err := f.r.Pool.QueryRow(ctx, `select (select count(*) from payout.bank_transfers where state = 'queued' and batch_id is null),
			(select count(*) from payout.bank_batches where cutoff_at = $1)`, cut).Scan(&queued, &batches); err != nil || queued != 3 || batches != 0 {
		t.Fatalf("after the failed cut: %d queued, %d files of the cutoff (%v), want 3 and 0", queued, batches, err)
	}
	if _, err := f.r.Pool.Exec(ctx, `delete from payout.bank_batches where batch_id = 'pb-20261201-1400-02'`); err != nil {
		t.Fatal(err)
	}
	ids, built, err = f.r.Cut(ctx, cut)
	if err != nil || !built || strings.Join(ids, ",") != "pb-20261201-1400,pb-20261201-1400-02" {
		t.Fatalf("cut again: %v built %v: %v", ids, built, err)
	}
	if err := f.r.Deliver(ctx); err != nil {
		t.Fatal(err)
	}
	var in, undelivered int
	if err := f.r.Pool.QueryRow(ctx, `select count(*) filter (where state = 'batched' and batch_id = any($1::text[])),
			(select count(*) from payout.bank_batches where cutoff_at = $2 and delivered_at is null)
		from payout.bank_transfers`, ids, cut).Scan(&in, &undelivered); err != nil || in != 3 || undelivered != 0 {
		t.Errorf("%d transfers in the cutoff's files, %d files undelivered (%v), want 3 and 0", in, undelivered, err)
	}
}

// A transfer queued before Submit refused amounts over ISO 20022's 18
// digits (10^16 yuan) is left out of the cut, failed alone; the others'
// file is written without it.
func TestCutLeavesOutAnAmountOverISODigitsQueuedBefore(t *testing.T) {
	t.Parallel()
	f := newRail(t, "", "")
	ctx := context.Background()
	f.submit(t, "po-ok", "CNY", "100.00", bank("6222000011110010"))
	f.submit(t, "po-big", "CNY", "100.00", bank("6222000011110011"))
	if _, err := f.r.Pool.Exec(ctx, `update payout.bank_transfers set amount = 10000000000000000 where reference = 'po-big'`); err != nil {
		t.Fatal(err)
	}
	ids, built, err := f.r.Cut(ctx, f.r.LastCutoff(day1.Add(5*time.Hour)))
	if err != nil || !built || len(ids) != 1 {
		t.Fatalf("cut %v built %v: %v", ids, built, err)
	}
	file, err := f.r.BatchFile(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if p, err := iso20022.ParsePain001(file); err != nil || strings.Join(e2es(p), ",") != "po-ok" {
		t.Errorf("file %s: %v %v, want po-ok alone", ids[0], e2es(p), err)
	}
	if st := f.state(t, "po-big"); st.State != app.RailFailed || !strings.Contains(st.Message, "18 digits") {
		t.Errorf("po-big: %+v, want failed over 18 digits", st)
	}
}
