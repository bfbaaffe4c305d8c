package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// wantReportAsOf fails t unless the segregated-funds report as of at shows
// renter's wallet and bank:client as the postings created up to at sum them.
func wantReportAsOf(t *testing.T, f *fixture, at time.Time, renter string) {
	t.Helper()
	rep, err := f.svc.Reports().SegregatedFunds(f.ctx, &at, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	brute := bruteBalances(t, f, "CNY", at)
	wantWallet := brute[domain.RenterWallet(renter)].Neg()
	gotWallet := dec("0")
	for _, c := range rep.Clients {
		if c.Kind == "renter" && c.ID == renter {
			gotWallet = c.Wallet
		}
	}
	if !gotWallet.Equal(wantWallet) || !rep.Resource.Equal(brute[domain.BankClient]) {
		t.Fatalf("as of %s: report %s's wallet %s, bank:client %s; the postings up to it sum to %s, %s",
			at.Format(time.RFC3339Nano), renter, gotWallet, rep.Resource, wantWallet, brute[domain.BankClient])
	}
}

// A posting created (by its writer's clock) inside a checkpoint interval
// that is no longer the latest, and committed after two more checkpoints
// were made (a group commit or a charge batch that took minutes), is in
// every as-of report from its creation on, before the checkpoints are
// rebuilt and after; verify calls none of them altered. The next
// checkpoint only re-counted the interval just before it, so the posting
// was left out of the reports as of every later instant for good (while
// GET /v1/accounts/{address}?as_of, which sums postings, showed it), and
// verify named the checkpoint altered: a false tampering signal that also
// made restore refuse the snapshot.
func TestLateCommitTwoCheckpointsBackIsInEveryReport(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(start)
	f := newFixtureAt(t, nil, clk)
	rp := f.svc.Reports()
	step := func(i int) *domain.Checkpoint {
		t.Helper()
		f.deposit(t, "r-1", "10.00", "CNY", fmt.Sprintf("d-%d", i))
		clk.Advance(25 * time.Hour) // a day passed: a checkpoint is due
		if made, err := rp.CheckpointStep(f.ctx); err != nil || !made {
			t.Fatalf("checkpoint %d: made %v, %v", i, made, err)
		}
		c, err := rp.Store.LatestCheckpoint(f.ctx, nil)
		if err != nil || c == nil {
			t.Fatalf("checkpoint %d: %v %v", i, c, err)
		}
		return c
	}
	c0, c1, c2 := step(0), step(1), step(2)
	now := clk.Now()
	clk.Set(c1.At.Add(-time.Minute)) // created inside (c0, c1], committed after c2 was made
	f.deposit(t, "r-late", "7.77", "CNY", "late")
	clk.Set(now)
	instants := []time.Time{c1.At.Add(-time.Minute), c1.At, c1.At.Add(time.Second), c2.At, c2.At.Add(time.Second)}
	chainAll(t, f)
	// Before the next step: the checkpoints the posting is late into are
	// known stale, read by no report and not called altered.
	for _, at := range instants {
		wantReportAsOf(t, f, at, "r-late")
	}
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
		t.Fatalf("verify with the late posting committed, before the next checkpoint step: %+v, %v; want ok", res, err)
	}
	c3 := step(3)
	instants = append(instants, c3.At, c3.At.Add(time.Second), clk.Now().Add(-time.Second))
	for _, at := range instants {
		wantReportAsOf(t, f, at, "r-late")
	}
	chainAll(t, f)
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
		t.Fatalf("verify after the checkpoints were rebuilt: %+v, %v; want ok", res, err)
	}
	// Rebuilt, at the same instants, and nothing left to rebuild.
	var ats []time.Time
	rows, err := f.pool.Query(f.ctx, `select at from ledger.balance_checkpoints order by at`)
	if err != nil {
		t.Fatal(err)
	}
	if ats, err = pgx.CollectRows(rows, pgx.RowTo[time.Time]); err != nil {
		t.Fatal(err)
	}
	if len(ats) != 4 || !ats[0].Equal(c0.At) || !ats[1].Equal(c1.At) || !ats[2].Equal(c2.At) || !ats[3].Equal(c3.At) {
		t.Fatalf("checkpoints at %v, want %s %s %s %s", ats, c0.At, c1.At, c2.At, c3.At)
	}
	var pending int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.checkpoint_late`).Scan(&pending); err != nil || pending != 0 {
		t.Fatalf("%d late postings left to rebuild for (%v), want 0", pending, err)
	}
}

// A writer whose transaction is open when a checkpoint is made, carrying a
// posting created before the checkpoint's instant, is waited for: the
// checkpoint is made once it has committed, and holds its posting. The
// checkpoint was built from the postings committed so far, and the open
// writer, having looked before the checkpoint began, had no reason to say
// it was late.
func TestCheckpointWaitsForAWriterOpenBeforeIt(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	rp := f.svc.Reports()
	f.deposit(t, "r-1", "10.00", "CNY", "d-1")
	clk.Advance(time.Hour)
	upTo := clk.Now().Add(-2 * time.Minute) // the step's: now - checkpointSettle

	// The open writer: its postings are created a minute before upTo.
	writer, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(context.WithoutCancel(f.ctx)) // a no-op once committed below
	if _, err := writer.Exec(f.ctx, `insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at) values
		('6b0f5e1c-0000-4000-8000-000000000001', 0, 'bank:client', 'CNY', 'debit', 5.55, $1),
		('6b0f5e1c-0000-4000-8000-000000000001', 1, 'renter:r-open:wallet', 'CNY', 'credit', 5.55, $1)`, upTo.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		made bool
		err  error
	}
	done := make(chan result, 1)
	go func() {
		made, err := rp.CheckpointStep(f.ctx)
		done <- result{made, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the checkpoint step returned (made %v, %v) while a writer that began before it was open", r.made, r.err)
	case <-time.After(2 * time.Second): // a step that does not wait makes its checkpoint in milliseconds
	}
	if err := writer.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the checkpoint step did not end once the writer committed")
	}
	if r.err != nil || !r.made {
		t.Fatalf("checkpoint step: made %v, %v", r.made, r.err)
	}
	var got string
	err = f.pool.QueryRow(f.ctx, `select coalesce((select net_debit::text from ledger.checkpoint_balances
		where at = $1 and currency = 'CNY' and account = 'renter:r-open:wallet'), 'none')`, upTo).Scan(&got)
	if err != nil || got != "-5.55" {
		t.Fatalf("the checkpoint at %s holds %s (%v) for the writer's renter, want -5.55", upTo, got, err)
	}
}

// A checkpoint made stale before ledger/0040 (a posting committed late into
// it, with no trigger to mark it) is named by verify, which says how to
// repair it; once marked for a rebuild from its instant (what `gpubill
// ledger checkpoints rebuild --since` does), verify is ok at once, and after
// one checkpoint step the checkpoint is rebuilt and every as-of report holds
// the posting. Nothing repaired such a checkpoint: the posting was left out
// of every report based on it, and verify called it altered, for good.
func TestStaleCheckpointMarkedIsRebuilt(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	f := newFixtureAt(t, nil, clk)
	rp := f.svc.Reports()
	var cs []*domain.Checkpoint
	for i := range 3 {
		f.deposit(t, "r-1", "10.00", "CNY", fmt.Sprintf("d-%d", i))
		clk.Advance(25 * time.Hour)
		if made, err := rp.CheckpointStep(f.ctx); err != nil || !made {
			t.Fatalf("checkpoint %d: made %v, %v", i, made, err)
		}
		c, err := rp.Store.LatestCheckpoint(f.ctx, nil)
		if err != nil || c == nil {
			t.Fatalf("checkpoint %d: %v %v", i, c, err)
		}
		cs = append(cs, c)
	}
	// Committed after c2, created inside (c0, c1], as before ledger/0040:
	// the trigger off, nothing marks it late.
	if _, err := f.pool.Exec(f.ctx, `alter table ledger.postings disable trigger postings_late_for_checkpoint`); err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	clk.Set(cs[1].At.Add(-time.Minute))
	f.deposit(t, "r-late", "7.77", "CNY", "late")
	clk.Set(now)
	if _, err := f.pool.Exec(f.ctx, `alter table ledger.postings enable trigger postings_late_for_checkpoint`); err != nil {
		t.Fatal(err)
	}
	chainAll(t, f)
	stamp := cs[1].At.UTC().Format(time.RFC3339Nano)
	res, err := ledger.VerifyChain(f.ctx, f.pool)
	if err != nil || res.OK || !strings.HasPrefix(res.BadReportRecord, "checkpoint "+stamp+" ") ||
		!strings.Contains(res.Reason, "gpubill ledger checkpoints rebuild --since "+stamp) {
		t.Fatalf("verify of a checkpoint a posting committed late into, unmarked: %+v, %v; want checkpoint %s named and how to rebuild it", res, err, stamp)
	}
	n, err := ledger.MarkCheckpointsStale(f.ctx, f.pool, cs[1].At)
	if err != nil || n != 2 {
		t.Fatalf("mark the checkpoints from %s stale: %d, %v; want 2 (c1, c2)", stamp, n, err)
	}
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
		t.Fatalf("verify once marked, before the checkpoint step: %+v, %v; want ok", res, err)
	}
	if _, err := rp.CheckpointStep(f.ctx); err != nil {
		t.Fatal(err)
	}
	var pending int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.checkpoint_late`).Scan(&pending); err != nil || pending != 0 {
		t.Fatalf("%d marks left after the checkpoint step (%v), want 0: the checkpoints were not rebuilt", pending, err)
	}
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
		t.Fatalf("verify after the checkpoint step: %+v, %v; want ok", res, err)
	}
	for _, at := range []time.Time{cs[1].At.Add(-time.Minute), cs[1].At, cs[1].At.Add(time.Second), cs[2].At, cs[2].At.Add(time.Second), clk.Now().Add(-time.Second)} {
		wantReportAsOf(t, f, at, "r-late")
	}
}
