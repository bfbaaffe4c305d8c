package postgres

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"

	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A hold locks the provider's payouts before it reads them, so a gate that
// holds a payout's lock (it read the holds, and marks the payout
// submitting) is waited for and its payout answered in flight, not waiting:
// the hold was answered as applying to a payout the gate had just passed.
func TestHoldWaitsForTheGate(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	for i, id := range []string{"po-h1", "po-h2"} {
		if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
				method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
			values ($1, 'p-h', $2, 'CNY', 1000, 250, 150, 600, 'action_required', 'bank', '', '', true, 1, now(), now())`, id, []string{"cyc-20260101", "cyc-20260215"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	gate, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Exec(ctx, `select 1 from payout.payouts where payout_id = 'po-h1' for update`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		waiting, inFlight []string
		err               error
	}
	held := make(chan answer, 1)
	go func() {
		w, f, err := s.PutHold(ctx, "p-h", "dispute", time.Now())
		held <- answer{w, f, err}
	}()
	time.Sleep(300 * time.Millisecond) // the hold waits on po-h1's lock meanwhile
	if _, err := gate.Exec(ctx, `update payout.payouts set status = 'created', submitting = true where payout_id = 'po-h1'`); err != nil {
		t.Fatal(err)
	}
	if err := gate.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-held
	if a.err != nil || !slices.Equal(a.waiting, []string{"po-h2"}) || !slices.Equal(a.inFlight, []string{"po-h1"}) {
		t.Fatalf("hold answered waiting %v, in flight %v (%v); want po-h2 waiting, po-h1 in flight", a.waiting, a.inFlight, a.err)
	}
}

// sentPayout inserts a payout of p-s submitted to its rail under its own id
// as reference, and, for a bank-file one, its transfer in state.
func sentPayout(t *testing.T, pool *pgxpool.Pool, id, cycle, method, transfer string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			status_reason, method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
		values ($1, 'p-s', $2, 'CNY', 1000, 250, 150, 600, 'submitted', 'submitted', $3, '', $1, true, 1, now(), now())`, id, cycle, method); err != nil {
		t.Fatal(err)
	}
	if transfer == "" {
		return
	}
	if _, err := pool.Exec(ctx, `insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name,
			creditor_account, creditor_agent, state, queued_at, updated_at)
		values ($1, $1, 'p-s', 'CNY', 600, 'Provider S', '6222000011110001', 'ICBKCNBJ', $2, now(), now())`, id, transfer); err != nil {
		t.Fatal(err)
	}
}

func reasonAndHistory(t *testing.T, pool *pgxpool.Pool, id string) (string, []string) {
	t.Helper()
	var reason string
	var notes []string
	if err := pool.QueryRow(context.Background(), `select status_reason, (select coalesce(array_agg(note order by seq), '{}') from payout.status_history h
		where h.payout_id = p.payout_id) from payout.payouts p where payout_id = $1`, id).Scan(&reason, &notes); err != nil {
		t.Fatal(err)
	}
	return reason, notes
}

// A hold answers the provider's payouts already sent (to Alipay, or in a
// bank file already cut) in flight: it cannot stop them. A bank transfer
// still queued for its cutoff is held (the cut leaves it out), and its
// payout says so; released, it says it goes in the next bank file. The
// hold answered payouts_in_flight 0 while a submitted payout was paid.
func TestHoldAnswersSubmittedPayoutsInFlight(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	sentPayout(t, pool, "po-alipay", "cyc-20260101", "alipay", "")
	sentPayout(t, pool, "po-batched", "cyc-20260115", "bank", "batched")
	sentPayout(t, pool, "po-queued", "cyc-20260201", "bank", "queued")
	if _, err := pool.Exec(ctx, `update payout.payouts set expected_arrival = '2026-12-01'`); err != nil {
		t.Fatal(err)
	}
	waiting, inFlight, err := s.PutHold(ctx, "p-s", "fraud dispute", time.Now())
	if err != nil || !slices.Equal(waiting, []string{"po-queued"}) || !slices.Equal(inFlight, []string{"po-alipay", "po-batched"}) {
		t.Fatalf("hold answered waiting %v, in flight %v (%v); want po-queued waiting, po-alipay and po-batched in flight", waiting, inFlight, err)
	}
	reason, notes := reasonAndHistory(t, pool, "po-queued")
	held := "held by finance: fraud dispute (its bank transfer stays queued, out of the bank file, until the hold is released)"
	if reason != held || !slices.Equal(notes, []string{held}) {
		t.Fatalf("held queued payout reads %q, history %q", reason, notes)
	}
	var arrivals []string
	if err := pool.QueryRow(ctx, `select array_agg(payout_id || ' ' || coalesce(expected_arrival::text, 'none') order by payout_id) from payout.payouts`).
		Scan(&arrivals); err != nil || !slices.Equal(arrivals, []string{"po-alipay 2026-12-01", "po-batched 2026-12-01", "po-queued none"}) {
		t.Fatalf("expected arrivals %q (%v); want none for the held queued payout (unknown while held), the others kept", arrivals, err)
	}
	if reason, notes := reasonAndHistory(t, pool, "po-batched"); reason != "submitted" || len(notes) != 0 {
		t.Fatalf("batched payout reads %q, history %q: the hold does not stop it", reason, notes)
	}
	// The same hold again says nothing new.
	if _, _, err := s.PutHold(ctx, "p-s", "fraud dispute", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, notes := reasonAndHistory(t, pool, "po-queued"); len(notes) != 1 {
		t.Fatalf("hold placed again: history %q", notes)
	}
	waiting, inFlight, err = s.PutHold(ctx, "p-s", "", time.Now())
	if err != nil || !slices.Equal(waiting, []string{"po-queued"}) || !slices.Equal(inFlight, []string{"po-alipay", "po-batched"}) {
		t.Fatalf("release answered waiting %v, in flight %v (%v)", waiting, inFlight, err)
	}
	reason, notes = reasonAndHistory(t, pool, "po-queued")
	released := "hold released by finance: its queued bank transfer goes in the next bank file"
	if reason != released || !slices.Equal(notes, []string{held, released}) {
		t.Fatalf("released queued payout reads %q, history %q", reason, notes)
	}
}

// A hold placed while a bank batch is being cut waits for the cut (its
// batch lock): the transfer the cut batched is answered in flight, not
// held, since the bank file carries it.
func TestHoldWaitsForTheCut(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	sentPayout(t, pool, "po-cut", "cyc-20260101", "bank", "queued")
	cut, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Rollback(ctx) // committed below; a failed test's is rolled back
	if _, err := cut.Exec(ctx, `select pg_advisory_xact_lock($1)`, domain.BankBatchLockKey); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		waiting, inFlight []string
		err               error
	}
	held := make(chan answer, 1)
	go func() {
		w, f, err := s.PutHold(ctx, "p-s", "dispute", time.Now())
		held <- answer{w, f, err}
	}()
	time.Sleep(300 * time.Millisecond) // the hold waits on the batch lock meanwhile
	if _, err := cut.Exec(ctx, `update payout.bank_transfers set state = 'batched' where reference = 'po-cut'`); err != nil {
		t.Fatal(err)
	}
	if err := cut.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-held
	if a.err != nil || len(a.waiting) != 0 || !slices.Equal(a.inFlight, []string{"po-cut"}) {
		t.Fatalf("hold answered waiting %v, in flight %v (%v); want po-cut in flight", a.waiting, a.inFlight, a.err)
	}
}

// A payout submitted into the bank-file queue while its provider is held
// (the hold answered it in flight) is noted held by its workflow
// (HoldQueued): held in its reason and history, its arrival date cleared,
// as PutHold does for a transfer queued before the hold; once only, and
// not for a provider released meanwhile or a transfer already cut.
func TestHoldQueuedNotesAHeldQueuedTransfer(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	sentPayout(t, pool, "po-q", "cyc-20260101", "bank", "queued")
	sentPayout(t, pool, "po-b", "cyc-20260115", "bank", "batched")
	if _, err := pool.Exec(ctx, `update payout.payouts set expected_arrival = '2026-12-01'`); err != nil {
		t.Fatal(err)
	}
	holdQueued := func(id string) {
		t.Helper()
		if err := s.Update(ctx, func(tx app.Tx) error {
			if err := tx.LockBankQueue(ctx); err != nil {
				return err
			}
			p, err := tx.Lock(ctx, id)
			if err != nil {
				return err
			}
			return tx.HoldQueued(ctx, &p, time.Now())
		}); err != nil {
			t.Fatal(err)
		}
	}
	arrival := func(id string) string {
		t.Helper()
		var d *time.Time
		if err := pool.QueryRow(ctx, `select expected_arrival from payout.payouts where payout_id = $1`, id).Scan(&d); err != nil {
			t.Fatal(err)
		}
		if d == nil {
			return "none"
		}
		return d.Format(time.DateOnly)
	}
	holdQueued("po-q")
	if reason, notes := reasonAndHistory(t, pool, "po-q"); reason != "submitted" || len(notes) != 0 || arrival("po-q") != "2026-12-01" {
		t.Fatalf("not held: %q, history %q, arrival %s; want unchanged", reason, notes, arrival("po-q"))
	}
	if _, err := pool.Exec(ctx, `insert into payout.holds (provider_id, reason, held_at) values ('p-s', 'fraud dispute', now())`); err != nil {
		t.Fatal(err)
	}
	held := domain.HeldQueuedNote("fraud dispute")
	for range 2 {
		holdQueued("po-q")
		if reason, notes := reasonAndHistory(t, pool, "po-q"); reason != held || !slices.Equal(notes, []string{held}) || arrival("po-q") != "none" {
			t.Fatalf("held: %q, history %q, arrival %s; want %q once, no arrival date", reason, notes, arrival("po-q"), held)
		}
	}
	holdQueued("po-b")
	if reason, notes := reasonAndHistory(t, pool, "po-b"); reason != "submitted" || len(notes) != 0 || arrival("po-b") != "2026-12-01" {
		t.Fatalf("batched: %q, history %q, arrival %s; want unchanged: the hold does not stop it", reason, notes, arrival("po-b"))
	}
}

// keptLedger keeps the transfers posted to it.
type keptLedger struct {
	mu   sync.Mutex
	keys []string
}

func (l *keptLedger) Available(context.Context, string, string) (decimal.Decimal, error) {
	return decimal.Zero, nil
}
func (l *keptLedger) Transfer(_ context.Context, t domain.LedgerTransfer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, t.Key+" "+t.Debit+" → "+t.Credit+" "+t.Amount.String())
	return nil
}

// A cancel of a payout whose bank transfer is queued waits for a cut in
// progress (the batch lock): the transfer the cut batched is on its way,
// so its cancel is refused, nothing posted; the one the cut left queued is
// canceled, out of the queue, its amount posted back to available. Both
// winning, the bank paid a payout whose money was back in available.
func TestCancelWaitsForTheCut(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	led := &keptLedger{}
	a := &app.Payouts{Store: s, Ledger: led, Clock: clock.System{}, Log: slog.New(slog.DiscardHandler)}
	sentPayout(t, pool, "po-cut", "cyc-20260101", "bank", "queued")
	sentPayout(t, pool, "po-left", "cyc-20260115", "bank", "queued")
	cut, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Rollback(ctx) // committed below; a failed test's is rolled back
	if _, err := cut.Exec(ctx, `select pg_advisory_xact_lock($1)`, domain.BankBatchLockKey); err != nil {
		t.Fatal(err)
	}
	canceled := make(chan error, 2)
	for _, id := range []string{"po-cut", "po-left"} {
		go func() { canceled <- a.Cancel(ctx, id, "fraud confirmed") }()
	}
	time.Sleep(300 * time.Millisecond) // the cancels wait on the batch lock meanwhile
	if _, err := cut.Exec(ctx, `update payout.bank_transfers set state = 'batched' where reference = 'po-cut'`); err != nil {
		t.Fatal(err)
	}
	if err := cut.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var refused int
	for range 2 {
		if err := <-canceled; errors.Is(err, apperr.ErrPrecondition) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	if err := pool.QueryRow(ctx, `select array_agg(p.payout_id || ' ' || p.status || ' ' || t.state order by p.payout_id)
		from payout.payouts p join payout.bank_transfers t on t.reference = p.rail_reference`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	want := []string{"po-cut submitted batched", "po-left canceled canceled"}
	posted := []string{"payout-po-left-1-canceled provider:p-s:in_transit → provider:p-s:available 600"}
	if refused != 1 || !slices.Equal(got, want) || !slices.Equal(led.keys, posted) {
		t.Fatalf("cancels during a cut: %d refused, payouts %q, posted %q; want 1 refused, %q, %q", refused, got, led.keys, want, posted)
	}
}
