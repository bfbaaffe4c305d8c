package payout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
	"github.com/gpubill/gpubill/services/payout/internal/ports"
)

// anyCase is the ledger's journal read as the ledger reads a transaction
// id: in any letter case (its transactionID: uuid.Parse, 36 characters,
// answered in lower case), the entry answered under its own id.
type anyCase entries

func (e anyCase) Entry(ctx context.Context, id string) (domain.LedgerEntry, error) {
	return entries(e).Entry(ctx, strings.ToLower(id))
}

func (e anyCase) Entries(ctx context.Context, ids []string) ([]domain.LedgerEntry, error) {
	lower := make([]string, 0, len(ids))
	for _, id := range ids {
		lower = append(lower, strings.ToLower(id))
	}
	return entries(e).Entries(ctx, lower)
}

// availableLeft is what provider p holds in available after nets of the
// failed payouts were put back there (each net credited) and the journal's
// hand payments took theirs out: computed from the inputs, not from
// payout.
func availableLeft(journal anyCase, p string, nets ...string) decimal.Decimal {
	left := decimal.Zero
	for _, n := range nets {
		left = left.Add(decimal.RequireFromString(n))
	}
	av, _ := balances(entries(journal), nil, p)
	return left.Add(av)
}

// One hand payment of 600.00 (T) paid one payout. Finance settled po-a
// outside by T, then po-b (p-1's other failed payout of 600.00) by T typed
// in upper case: the ledger reads it as T, the claim's unique key compared
// it as typed, and both payouts read settled_outside while 600.00 stayed
// in provider:p-1:available, unclaimed, the provider shown paid twice by
// one transfer. The second claim is a conflict naming po-a, in any case.
func TestSettledOutsideOneEntryInAnotherCaseSettlesOnePayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-a', 'p-1', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 1, true, now() - interval '3 days', now() - interval '2 days'),
		('po-b', 'p-1', 'cyc-20260215', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 1, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	const tx = "0193e0a4-7c1d-7b2e-9f00-5a1b2c3d4e5f"
	journal := anyCase{tx: manualPayment(tx, "p-1", "600.00", "CNY")}
	s := &postgres.Store{Pool: pool}
	a := &app.Payouts{Store: s, Entries: journal, Clock: clock.NewManual(time.Now()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	settle := func(payout, id string) (domain.Payout, error) {
		return a.SettleOutside(ctx, app.OutsideSettlement{PayoutID: payout, TransactionID: id, Reason: "paid by hand, ICBC ref 77", By: "fin-1"})
	}
	if _, err := settle("po-a", tx); err != nil {
		t.Fatal(err)
	}
	left := availableLeft(journal, "p-1", "600.00", "600.00")
	for _, give := range []string{strings.ToUpper(tx), strings.ToUpper(tx[:8]) + tx[8:], " " + strings.ToUpper(tx) + " "} {
		_, err := settle("po-b", give)
		p, gerr := s.GetPayout(ctx, "po-b")
		if gerr != nil {
			t.Fatal(gerr)
		}
		if !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "po-a") || p.Status != domain.StatusFailed {
			t.Fatalf("po-b settled by %q, po-a's transaction %s in another case: %v, po-b %s; want a conflict naming po-a, po-b failed "+
				"(one 600.00 entry paid one payout: %s CNY left in provider:p-1:available, unclaimed)", give, tx, err, p.Status, left.StringFixed(2))
		}
	}
	var claims int
	if err := pool.QueryRow(ctx, `select count(*) from payout.settled_outside where lower(transaction_id) = $1`, tx).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	if claims != 1 {
		t.Fatalf("claims of %s in any case: %d, want 1", tx, claims)
	}
	// po-a's settlement sent again in another case is answered as it is.
	if p, err := settle("po-a", strings.ToUpper(tx)); err != nil || p.Status != domain.StatusSettledOutside {
		t.Fatalf("po-a's settlement again, its transaction in upper case: %v; want answered as it is", err)
	}
	// The database refuses the second claim too (payout/0037), however a
	// replica typed it: a version before this one stored ids as typed.
	_, err := pool.Exec(ctx, `insert into payout.settled_outside (payout_id, transaction_id, reason, settled_by, settled_at)
		values ('po-b', $1, 'typed by an earlier replica', 'fin-1', now())`, strings.ToUpper(tx))
	if err == nil || !strings.Contains(err.Error(), "23505") {
		t.Fatalf("a claim of %s in upper case written straight to the table: %v; want a unique violation", tx, err)
	}
	// po-b settled by a claim kept as typed (before payout/0037, in upper
	// case): the same settlement, sent in lower case, answers as it is.
	const v = "0193e0a4-7c1d-7b2e-9f00-00000000000c"
	journal[v] = manualPayment(v, "p-1", "600.00", "CNY")
	if _, err := pool.Exec(ctx, `with c as (insert into payout.settled_outside (payout_id, transaction_id, reason, settled_by, settled_at)
			values ('po-b', upper($1), 'paid by hand', 'fin-1', now()))
		update payout.payouts set status = 'settled_outside' where payout_id = 'po-b'`, v); err != nil {
		t.Fatal(err)
	}
	if _, err := settle("po-b", v); err != nil {
		t.Fatalf("po-b's settlement by %s again, its claim kept in upper case: %v; want answered as it is", v, err)
	}
}

// A 600.00 net settled by transaction_ids [T, UPPER(T)], T a 300.00 hand
// payment: the duplicate check compared the ids as typed, the ledger read
// T twice, the sum 600.00 matched, and the payout read paid with 300.00 of
// it never paid. Naming one entry twice, in any case, is a 400.
func TestSettledOutsideOneEntryNamedTwiceInAnotherCase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-c', 'p-2', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 1, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	const tx, tx2 = "0193e0a4-7c1d-7b2e-9f00-00000000000a", "0193e0a4-7c1d-7b2e-9f00-00000000000b"
	journal := anyCase{
		tx:  manualPayment(tx, "p-2", "300.00", "CNY"),
		tx2: manualPayment(tx2, "p-2", "300.00", "CNY"),
	}
	s := &postgres.Store{Pool: pool}
	a := &app.Payouts{Store: s, Entries: journal, Clock: clock.NewManual(time.Now()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	settle := func(ids ...string) (domain.Payout, error) {
		return a.SettleOutside(ctx, app.OutsideSettlement{PayoutID: "po-c", TransactionIDs: ids, Reason: "two transfers, ICBC 77/78", By: "fin-1"})
	}
	delete(journal, tx2)
	left := availableLeft(journal, "p-2", "600.00")
	_, err := settle(tx, strings.ToUpper(tx))
	p, gerr := s.GetPayout(ctx, "po-c")
	if gerr != nil {
		t.Fatal(gerr)
	}
	var inv *apperr.InvalidError
	if !errors.As(err, &inv) || p.Status != domain.StatusFailed {
		t.Fatalf("po-c (net 600.00) settled by [%s, its upper case], a 300.00 entry: %v, po-c %s; want a 400, po-c failed "+
			"(%s CNY of the net never paid)", tx, err, p.Status, left.StringFixed(2))
	}
	// Two entries, the second in upper case, are claimed as the ledger
	// names them.
	journal[tx2] = manualPayment(tx2, "p-2", "300.00", "CNY")
	if _, err := settle(tx, strings.ToUpper(tx2)); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := pool.QueryRow(ctx, `select string_agg(transaction_id, ',' order by transaction_id) from payout.settled_outside
		where payout_id = 'po-c'`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s,%s", tx, tx2); got != want {
		t.Fatalf("po-c's claims %q, want %q (the ledger's form)", got, want)
	}
	if q, err := settle(strings.ToUpper(tx2), tx); err != nil || len(q.History) != len(p.History)+1 {
		t.Fatalf("po-c's settlement again, in another case and order: %v; want answered as it is", err)
	}
}

// Through the API (gRPC, and REST through its gateway), the ids are read
// as UUIDs and passed on in the ledger's form (transaction_id since
// 5ea9bf0d, transaction_ids since 2b0997d5): an id in upper case names the
// entry another payout claims, a conflict, and the same entry twice is a
// 400. This passed before the app and the claim's key compared ids in
// the ledger's form: the port was the only guard.
func TestSettledOutsideAPIReadsIDsInAnyCase(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{Role: auth.RoleFinance, Subject: "fin-1"})
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-a', 'p-1', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 1, true, now() - interval '3 days', now() - interval '2 days'),
		('po-b', 'p-1', 'cyc-20260215', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 1, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	const tx, half = "0193e0a4-7c1d-7b2e-9f00-5a1b2c3d4e5f", "0193e0a4-7c1d-7b2e-9f00-00000000000a"
	journal := anyCase{tx: manualPayment(tx, "p-1", "600.00", "CNY"), half: manualPayment(half, "p-1", "300.00", "CNY")}
	s := &postgres.Store{Pool: pool}
	srv := &ports.Server{Store: s, Epoch: "1", Clock: clock.System{},
		App: &app.Payouts{Store: s, Entries: journal, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	settle := func(payout string, ids ...string) error {
		_, err := srv.SettlePayoutOutside(ctx, &payoutv1.SettlePayoutOutsideRequest{PayoutId: payout, TransactionIds: ids, Reason: "paid by hand, ICBC ref 77"})
		return err
	}
	var inv *apperr.InvalidError
	if err := settle("po-b", half, strings.ToUpper(half)); !errors.As(err, &inv) {
		t.Fatalf("po-b settled by a 300.00 entry named twice in two cases: %v; want a 400", err)
	}
	if err := settle("po-a", tx); err != nil {
		t.Fatal(err)
	}
	if err := settle("po-b", strings.ToUpper(tx)); !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("po-b settled by po-a's entry in upper case: %v; want a conflict", err)
	}
}
