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
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// entries is the ledger's journal as payout reads it.
type entries map[string]domain.LedgerEntry

func (e entries) Entry(_ context.Context, id string) (domain.LedgerEntry, error) {
	if x, ok := e[id]; ok {
		return x, nil
	}
	return domain.LedgerEntry{}, fmt.Errorf("ledger transaction %s: %w", id, apperr.ErrNotFound)
}

func (e entries) Entries(ctx context.Context, ids []string) ([]domain.LedgerEntry, error) {
	var out []domain.LedgerEntry
	for _, id := range ids {
		if x, ok := e[id]; ok {
			out = append(out, x)
		}
	}
	return out, nil
}

// manualPayment is finance's entry paying amount by hand: Dr
// provider:{provider}:available, Cr bank:client.
func manualPayment(id, provider, amount, currency string) domain.LedgerEntry {
	a := decimal.RequireFromString(amount)
	return domain.LedgerEntry{ID: id, Postings: []domain.LedgerPosting{
		{Account: domain.AvailableAccount(provider), Direction: "debit", Currency: currency, Amount: a},
		{Account: domain.ClientBank, Direction: "credit", Currency: currency, Amount: a},
	}}
}

// p-9 closed its bank account: its last payout failed account_frozen, its
// net back in available. Nobody will give a new payout method, so :retry
// cannot send it and :cancel refuses a failed payout; finance pays it by
// hand (a manual entry, Dr available / Cr bank:client) and settles the
// payout outside, naming that entry. The payout is final (settled_outside,
// in its history), the failed gauge drops to 0, and :retry is refused:
// one would pay the net again out of a newer cycle's money. An entry of
// another provider, another amount or currency, one unknown, or one another
// payout claims, is refused, and the payout stays failed.
func TestFailedPayoutSettledOutside(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-9', 'p-9', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 2, true, now() - interval '3 days', now() - interval '2 days'),
		('po-8', 'p-9', 'cyc-20260215', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 1, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	failed := func() float64 {
		t.Helper()
		var q string
		for _, m := range Metrics() {
			if m.Name == "gpubill_payouts" {
				q = m.Query
			}
		}
		var n float64
		if err := pool.QueryRow(ctx, `select coalesce(sum(g.n), 0) from (`+q+`) as g(status, currency, n) where g.status = 'failed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := failed(); n != 2 {
		t.Fatalf("gpubill_payouts{status=failed} %v before, want 2", n)
	}
	journal := entries{
		"tx-p9":    manualPayment("tx-p9", "p-9", "600.00", "CNY"),
		"tx-p8":    manualPayment("tx-p8", "p-9", "600.00", "CNY"),
		"tx-other": manualPayment("tx-other", "p-7", "600.00", "CNY"),
		"tx-short": manualPayment("tx-short", "p-9", "599.99", "CNY"),
		"tx-usd":   manualPayment("tx-usd", "p-9", "600.00", "USD"),
		"tx-reversed": func() domain.LedgerEntry {
			e := manualPayment("tx-reversed", "p-9", "600.00", "CNY")
			e.ReversedBy = "tx-r"
			return e
		}(),
		"tx-submit": {ID: "tx-submit", Metadata: map[string]string{"kind": "payout", "payout_id": "po-10"}, Postings: []domain.LedgerPosting{
			{Account: domain.AvailableAccount("p-9"), Direction: "debit", Currency: "CNY", Amount: decimal.RequireFromString("600.00")},
			{Account: domain.InTransitAccount("p-9"), Direction: "credit", Currency: "CNY", Amount: decimal.RequireFromString("600.00")}}},
	}
	s := &postgres.Store{Pool: pool}
	a := &app.Payouts{Store: s, Entries: journal, Clock: clock.NewManual(time.Now())}
	settle := func(payout, txID string) (domain.Payout, error) {
		return a.SettleOutside(ctx, app.OutsideSettlement{PayoutID: payout, TransactionID: txID, Reason: "paid by hand, ICBC ref 77", By: "fin-1"})
	}
	for _, tt := range []struct{ give, want string }{
		{"tx-other", "409"},
		{"tx-short", "409"},
		{"tx-usd", "409"},
		{"tx-reversed", "409"},
		{"tx-submit", "409"},
		{"tx-unknown", "400"},
	} {
		_, err := settle("po-9", tt.give)
		var inv *apperr.InvalidError
		got := map[bool]string{true: "409", false: "?"}[errors.Is(err, apperr.ErrConflict)]
		if errors.As(err, &inv) {
			got = "400"
		}
		if got != tt.want {
			t.Fatalf("settle po-9 by %s: %v, want %s", tt.give, err, tt.want)
		}
	}
	if n := failed(); n != 2 {
		t.Fatalf("gpubill_payouts{status=failed} %v after refused settlements, want 2", n)
	}

	p, err := settle("po-9", "tx-p9")
	if err != nil {
		t.Fatal(err)
	}
	last := p.History[len(p.History)-1]
	if p.Status != domain.StatusSettledOutside || last.Status != domain.StatusSettledOutside || !strings.Contains(last.Note, "tx-p9") {
		t.Fatalf("settled: %s, last history %+v; want settled_outside naming tx-p9", p.Status, last)
	}
	if n := failed(); n != 1 {
		t.Fatalf("gpubill_payouts{status=failed} %v after po-9 settled outside, want 1 (po-8)", n)
	}
	if _, err := settle("po-9", "tx-p9"); err != nil {
		t.Fatalf("the same settlement again: %v, want it answered as it is", err)
	}
	if _, err := settle("po-9", "tx-p8"); !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("po-9 settled again by another transaction: %v, want a conflict", err)
	}
	// Attempt 2: a retry sent again after a lost answer is a no-op for a
	// payout on its way; one settled outside is refused.
	if err := a.Retry(ctx, "po-9", "new account"); !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("retry of a payout settled outside: %v, want refused", err)
	}
	if err := a.Cancel(ctx, "po-9", "gone"); !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("cancel of a payout settled outside: %v, want refused", err)
	}
	// One entry pays one payout: po-8, p-9's other failed payout of the
	// same net, may not claim po-9's.
	if _, err := settle("po-8", "tx-p9"); !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("po-8 settled by po-9's transaction: %v, want a conflict", err)
	}
	if _, err := settle("po-8", "tx-p8"); err != nil {
		t.Fatal(err)
	}
	if n := failed(); n != 0 {
		t.Fatalf("gpubill_payouts{status=failed} %v after both settled outside, want 0", n)
	}
}

// reversingEntries answers each entry as journal holds it, and from the
// second read on as reversed by reversedBy: finance reversing the entry
// while :settle-outside checks it.
type reversingEntries struct {
	journal    entries
	reversedBy string
	reads      int
}

func (r *reversingEntries) Entries(ctx context.Context, ids []string) ([]domain.LedgerEntry, error) {
	return r.journal.Entries(ctx, ids)
}

func (r *reversingEntries) Entry(ctx context.Context, id string) (domain.LedgerEntry, error) {
	e, err := r.journal.Entry(ctx, id)
	r.reads++
	if r.reads > 1 {
		e.ReversedBy = r.reversedBy
	}
	return e, err
}

// A payout settled outside whose ledger entry finance later reverses
// (POST /v1/transactions/{id}:reverse) is no longer paid: its net is back
// in provider:{id}:available. The periodic check moves it back to failed
// (its failure code kept, its history naming both transactions), the
// failed gauge (GpubillPayoutFailed) counts it again, and it can be
// settled outside again or retried. It read paid by hand forever, :retry
// refused, nothing watching the net. An entry reversed while
// :settle-outside checks it (read before the payout's lock) is refused.
func TestSettledOutsideEntryReversedFailsThePayoutAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-9', 'p-9', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 2, true, now() - interval '3 days', now() - interval '2 days'),
		('po-7', 'p-7', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'returned', 'account_closed', 1, true, now() - interval '3 days', now() - interval '2 days'),
		('po-6', 'p-6', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_closed', 1, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	journal := entries{
		"tx-p9":  manualPayment("tx-p9", "p-9", "600.00", "CNY"),
		"tx-p9b": manualPayment("tx-p9b", "p-9", "600.00", "CNY"),
		"tx-p7":  manualPayment("tx-p7", "p-7", "600.00", "CNY"),
		"tx-p6":  manualPayment("tx-p6", "p-6", "600.00", "CNY"),
	}
	s := &postgres.Store{Pool: pool}
	a := &app.Payouts{Store: s, Entries: journal, Clock: clock.NewManual(time.Now()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	settle := func(payout, txID string) (domain.Payout, error) {
		return a.SettleOutside(ctx, app.OutsideSettlement{PayoutID: payout, TransactionID: txID, Reason: "paid by hand, ICBC ref 77", By: "fin-1"})
	}
	for _, x := range [][2]string{{"po-9", "tx-p9"}, {"po-7", "tx-p7"}} {
		if _, err := settle(x[0], x[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.CheckSettledOutside(ctx); err != nil {
		t.Fatalf("check with nothing reversed: %v", err)
	}
	if p, err := s.GetPayout(ctx, "po-9"); err != nil || p.Status != domain.StatusSettledOutside {
		t.Fatalf("po-9 after a check with nothing reversed: %s %v, want settled_outside", p.Status, err)
	}
	e := journal["tx-p9"]
	e.ReversedBy = "tx-rev"
	journal["tx-p9"] = e
	if err := a.CheckSettledOutside(ctx); err != nil {
		t.Fatalf("check: %v", err)
	}
	p, err := s.GetPayout(ctx, "po-9")
	if err != nil {
		t.Fatal(err)
	}
	last := p.History[len(p.History)-1]
	if p.Status != domain.StatusFailed || p.FailureCode != "account_frozen" || last.Status != domain.StatusFailed ||
		!strings.Contains(last.Note, "tx-p9") || !strings.Contains(last.Note, "tx-rev") {
		t.Fatalf("po-9 after its entry was reversed: %s (%s), last history %+v; want failed account_frozen naming tx-p9 and tx-rev",
			p.Status, p.FailureCode, last)
	}
	if q, err := s.GetPayout(ctx, "po-7"); err != nil || q.Status != domain.StatusSettledOutside {
		t.Fatalf("po-7, its entry not reversed: %s %v, want settled_outside", q.Status, err)
	}
	if err := a.CheckSettledOutside(ctx); err != nil {
		t.Fatalf("check again: %v", err)
	}
	if q, err := s.GetPayout(ctx, "po-9"); err != nil || len(q.History) != len(p.History) {
		t.Fatalf("po-9 after a second check: %d history rows, %v; want %d (not moved again)", len(q.History), err, len(p.History))
	}
	if _, err := settle("po-9", "tx-p9b"); err != nil {
		t.Fatalf("po-9 settled outside again by another entry: %v", err)
	}

	// Reversed between :settle-outside's read and the payout's lock.
	a.Entries = &reversingEntries{journal: journal, reversedBy: "tx-rev2"}
	if _, err := settle("po-6", "tx-p6"); !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("po-6 settled by an entry reversed while it was checked: %v, want a conflict", err)
	}
	if q, err := s.GetPayout(ctx, "po-6"); err != nil || q.Status != domain.StatusFailed {
		t.Fatalf("po-6: %s %v, want still failed", q.Status, err)
	}
}

// Finance paid p-5's failed payout (600.00) by hand in two bank transfers
// (350.00 and 250.00), each posted as its own ledger entry: the payout is
// settled outside by both, each claimed for it, in one database
// transaction. Refused, the payout staying failed with nothing claimed:
// a sum 0.01 short (a 409 naming the sum and the net), one entry another
// payout claims (409), a duplicate in the list (400), both forms at once
// (400). The same request again answers the payout as it is.
func TestFailedPayoutSettledOutsideBySeveralEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-5', 'p-5', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_closed', 1, true, now() - interval '3 days', now() - interval '2 days'),
		('po-4', 'p-5', 'cyc-20260215', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_closed', 1, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	journal := entries{
		"tx-a":     manualPayment("tx-a", "p-5", "350.00", "CNY"),
		"tx-b":     manualPayment("tx-b", "p-5", "250.00", "CNY"),
		"tx-b-low": manualPayment("tx-b-low", "p-5", "249.99", "CNY"),
		"tx-c":     manualPayment("tx-c", "p-5", "600.00", "CNY"),
		"tx-d":     manualPayment("tx-d", "p-5", "350.00", "CNY"),
	}
	s := &postgres.Store{Pool: pool}
	a := &app.Payouts{Store: s, Entries: journal, Clock: clock.NewManual(time.Now()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	settle := func(payout string, single string, several ...string) (domain.Payout, error) {
		return a.SettleOutside(ctx, app.OutsideSettlement{PayoutID: payout, TransactionID: single, TransactionIDs: several,
			Reason: "paid by hand in two transfers, ICBC refs 77 and 78", By: "fin-1"})
	}
	claims := func(payout string) string {
		t.Helper()
		var got string
		if err := pool.QueryRow(ctx, `select coalesce(string_agg(transaction_id, ',' order by transaction_id), '')
			from payout.settled_outside where payout_id = $1`, payout).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// po-4 claims tx-d, settled by the whole net in tx-c first.
	if _, err := settle("po-4", "tx-c"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `update payout.settled_outside set transaction_id = 'tx-d' where payout_id = 'po-4'`); err != nil {
		t.Fatal(err)
	}
	_, err := settle("po-5", "", "tx-a", "tx-b-low")
	if !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "599.99") || !strings.Contains(err.Error(), "600.00") {
		t.Fatalf("po-5 settled by entries summing 599.99: %v, want a conflict naming the sum 599.99 and the net 600.00", err)
	}
	if _, err := settle("po-5", "", "tx-d", "tx-b"); !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "po-4") {
		t.Fatalf("po-5 settled by tx-d, which po-4 claims: %v, want a conflict naming po-4", err)
	}
	var inv *apperr.InvalidError
	if _, err := settle("po-5", "", "tx-a", "tx-a"); !errors.As(err, &inv) {
		t.Fatalf("po-5 settled by tx-a twice: %v, want a 400", err)
	}
	if _, err := settle("po-5", "tx-c", "tx-a", "tx-b"); !errors.As(err, &inv) {
		t.Fatalf("po-5 settled by both forms at once: %v, want a 400", err)
	}
	if p, err := s.GetPayout(ctx, "po-5"); err != nil || p.Status != domain.StatusFailed || claims("po-5") != "" {
		t.Fatalf("po-5 after refused settlements: %s %v, claims %q; want failed, nothing claimed", p.Status, err, claims("po-5"))
	}

	p, err := settle("po-5", "", "tx-a", "tx-b")
	if err != nil {
		t.Fatal(err)
	}
	last := p.History[len(p.History)-1]
	if p.Status != domain.StatusSettledOutside || !strings.Contains(last.Note, "tx-a") || !strings.Contains(last.Note, "tx-b") {
		t.Fatalf("po-5 settled by tx-a and tx-b: %s, last history %+v; want settled_outside naming both", p.Status, last)
	}
	if got := claims("po-5"); got != "tx-a,tx-b" {
		t.Fatalf("po-5's claims %q, want tx-a,tx-b", got)
	}
	for _, again := range [][]string{{"tx-a", "tx-b"}, {"tx-b", "tx-a"}} {
		q, err := settle("po-5", "", again...)
		if err != nil || q.Status != domain.StatusSettledOutside || len(q.History) != len(p.History) {
			t.Fatalf("the same settlement again (%v): %s, %d history rows, %v; want answered as it is", again, q.Status, len(q.History), err)
		}
	}
	if _, err := settle("po-5", "", "tx-a"); !errors.Is(err, apperr.ErrConflict) {
		t.Fatalf("po-5 settled again by tx-a alone: %v, want a conflict", err)
	}
	// The check reads every claim: tx-b reversed fails po-5 again, tx-b
	// released, tx-a (350.00 paid by hand, standing) still claimed
	// (TestSettledOutsideBySeveralOneReversedNeverPaysTwice).
	e := journal["tx-b"]
	e.ReversedBy = "tx-rev"
	journal["tx-b"] = e
	if err := a.CheckSettledOutside(ctx); err != nil {
		t.Fatal(err)
	}
	if q, err := s.GetPayout(ctx, "po-5"); err != nil || q.Status != domain.StatusFailed || claims("po-5") != "tx-a" {
		t.Fatalf("po-5 after tx-b was reversed: %s %v, claims %q; want failed, tx-a still claimed", q.Status, err, claims("po-5"))
	}
}

// balances sums the journal's postings on provider p's available and on
// bank:client (each on its normal side: credit positive for available, a
// liability; debit positive for bank:client, an asset), reversals
// included.
func balances(journal entries, reversals []domain.LedgerEntry, p string) (available, bank decimal.Decimal) {
	all := make([]domain.LedgerEntry, 0, len(journal)+len(reversals))
	for _, e := range journal {
		all = append(all, e)
	}
	for _, e := range append(all, reversals...) {
		for _, x := range e.Postings {
			sign := map[string]int64{"credit": 1, "debit": -1}[x.Direction]
			switch x.Account {
			case domain.AvailableAccount(p):
				available = available.Add(x.Amount.Mul(decimal.NewFromInt(sign)))
			case domain.ClientBank:
				bank = bank.Sub(x.Amount.Mul(decimal.NewFromInt(sign)))
			}
		}
	}
	return available, bank
}

// reverse is the ledger reversing journal[id] by rid (every posting
// mirrored, the two linked).
func reverse(journal entries, id, rid string) domain.LedgerEntry {
	e := journal[id]
	e.ReversedBy = rid
	journal[id] = e
	r := domain.LedgerEntry{ID: rid, Reverses: id}
	for _, x := range e.Postings {
		x.Direction = map[string]string{"debit": "credit", "credit": "debit"}[x.Direction]
		r.Postings = append(r.Postings, x)
	}
	return r
}

// Finance paid p-3's failed payout (net 600.00, failed bank_rejected, its
// net back in available) by hand in two transfers, tx-a 350.00 and tx-b
// 250.00, and settled it outside by both; then reversed tx-b (that
// transfer bounced). Balances: available 0.00 → 250.00; bank:client
// −600.00 → −350.00: the provider holds 350.00 of the net, paid by tx-a,
// which stands. All claims were released and the payout failed, its note
// saying "the net is back in available" (250.00 of 600.00 is), and :retry
// was accepted: the retry posts the whole net (600.00) from available to
// in_transit, waits at the gate for 350.00 of a newer cycle's money, and
// pays 600.00 by rail: 950.00 for a 600.00 net, the newer cycle's payout
// short by 350.00. The payout now keeps tx-a claimed, fails again naming
// what stands, refuses :retry while tx-a stands, and is settled outside
// again only by tx-a with entries for the rest (a settlement leaving tx-a
// out is a conflict); tx-a reversed too, the payout holds nothing and a
// retry pays the whole net, which is then back in available.
func TestSettledOutsideBySeveralOneReversedNeverPaysTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-3', 'p-3', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'bank_rejected', 1, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	journal := entries{
		// The failed payout's net back in available (Dr in_transit, Cr available).
		"tx-failed": {ID: "tx-failed", Postings: []domain.LedgerPosting{
			{Account: domain.InTransitAccount("p-3"), Direction: "debit", Currency: "CNY", Amount: decimal.RequireFromString("600.00")},
			{Account: domain.AvailableAccount("p-3"), Direction: "credit", Currency: "CNY", Amount: decimal.RequireFromString("600.00")}}},
		"tx-a": manualPayment("tx-a", "p-3", "350.00", "CNY"),
		"tx-b": manualPayment("tx-b", "p-3", "250.00", "CNY"),
		"tx-c": manualPayment("tx-c", "p-3", "250.00", "CNY"),
	}
	var reversals []domain.LedgerEntry
	s := &postgres.Store{Pool: pool}
	a := &app.Payouts{Store: s, Entries: journal, Clock: clock.NewManual(time.Now()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	settle := func(ids ...string) (domain.Payout, error) {
		return a.SettleOutside(ctx, app.OutsideSettlement{PayoutID: "po-3", TransactionIDs: ids, Reason: "two transfers, ICBC 77/78", By: "fin-1"})
	}
	claims := func() string {
		t.Helper()
		var got string
		if err := pool.QueryRow(ctx, `select coalesce(string_agg(transaction_id, ',' order by transaction_id), '')
			from payout.settled_outside where payout_id = 'po-3'`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// The journal as settled: two entries, available 0, bank:client out 600.
	delete(journal, "tx-c")
	if _, err := settle("tx-a", "tx-b"); err != nil {
		t.Fatal(err)
	}
	if av, bank := balances(journal, reversals, "p-3"); !av.Equal(decimal.Zero) || !bank.Equal(decimal.RequireFromString("-600")) {
		t.Fatalf("after settling by tx-a and tx-b: available %s, bank:client %s; want 0, -600", av, bank)
	}
	reversals = append(reversals, reverse(journal, "tx-b", "tx-rev-b"))
	if err := a.CheckSettledOutside(ctx); err != nil {
		t.Fatal(err)
	}
	av, bank := balances(journal, reversals, "p-3")
	if !av.Equal(decimal.RequireFromString("250")) || !bank.Equal(decimal.RequireFromString("-350")) {
		t.Fatalf("after tx-b reversed: available %s, bank:client %s; want 250, -350 (350.00 paid by tx-a, standing)", av, bank)
	}
	p, err := s.GetPayout(ctx, "po-3")
	if err != nil {
		t.Fatal(err)
	}
	last := p.History[len(p.History)-1]
	if p.Status != domain.StatusFailed || !strings.Contains(last.Note, "tx-rev-b") || !strings.Contains(last.Note, "tx-a") {
		t.Fatalf("po-3 after tx-b reversed: %s, last history %q; want failed naming tx-rev-b and tx-a, which stands", p.Status, last.Note)
	}
	if err := a.Retry(ctx, "po-3", "new account"); !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("retry of po-3 while tx-a (350.00 paid by hand) stands: %v; want refused: a retry pays the whole net "+
			"(600.00) out of available (%s): 350.00 + 600.00 = 950.00 paid for a net of 600.00", err, av)
	}
	if got := claims(); got != "tx-a" {
		t.Fatalf("po-3's claims after tx-b reversed: %q; want tx-a (it stands: 350.00 of the net paid by hand)", got)
	}
	journal["tx-c"] = manualPayment("tx-c", "p-3", "250.00", "CNY")
	journal["tx-full"] = manualPayment("tx-full", "p-3", "600.00", "CNY")
	for _, alone := range []string{"tx-full", "tx-c"} {
		if _, err := settle(alone); !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "tx-a") {
			t.Fatalf("po-3 settled by %s alone while it still claims tx-a: %v; want a conflict naming tx-a", alone, err)
		}
	}
	delete(journal, "tx-full")
	if p, err := settle("tx-a", "tx-c"); err != nil || p.Status != domain.StatusSettledOutside {
		t.Fatalf("po-3 settled again by tx-a (standing) and tx-c (the rest): %v; want settled_outside", err)
	}
	if got := claims(); got != "tx-a,tx-c" {
		t.Fatalf("po-3's claims: %q, want tx-a,tx-c", got)
	}
	if av, bank := balances(journal, reversals, "p-3"); !av.Equal(decimal.Zero) || !bank.Equal(decimal.RequireFromString("-600")) {
		t.Fatalf("after settling again: available %s, bank:client %s; want 0, -600 (the net paid once)", av, bank)
	}
	// Both reversed: nothing stands, the payout holds nothing and a retry
	// pays the net, all of it back in available.
	reversals = append(reversals, reverse(journal, "tx-a", "tx-rev-a"), reverse(journal, "tx-c", "tx-rev-c"))
	if err := a.CheckSettledOutside(ctx); err != nil {
		t.Fatal(err)
	}
	if got := claims(); got != "" {
		t.Fatalf("po-3's claims after every entry was reversed: %q, want none", got)
	}
	if av, _ := balances(journal, reversals, "p-3"); !av.Equal(decimal.RequireFromString("600")) {
		t.Fatalf("available after every entry reversed: %s, want 600", av)
	}
	if err := a.Retry(ctx, "po-3", "new account"); err != nil {
		t.Fatalf("retry of po-3, every hand payment reversed: %v", err)
	}
}

// hookedEntries runs hook once, before the first batch read it answers.
type hookedEntries struct {
	entries
	hook func()
}

func (h *hookedEntries) Entries(ctx context.Context, ids []string) ([]domain.LedgerEntry, error) {
	if f := h.hook; f != nil {
		h.hook = nil
		f()
	}
	return h.entries.Entries(ctx, ids)
}

// A replica's pass that read a claim reversed moves nothing once that
// claim is no longer held: replica B read tx-p9 reversed; meanwhile
// replica A's pass failed po-9 and released tx-p9, and finance settled it
// outside again by tx-p9b, a real payment. B used to fail po-9 again with
// tx-p9b standing ("the net is back in available", a retry paying it twice).
func TestSettledOutsideStalePassLeavesAFreshSettlement(t *testing.T) {
	ctx := context.Background()
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-9', 'p-9', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 2, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	journal := entries{
		"tx-p9":  manualPayment("tx-p9", "p-9", "600.00", "CNY"),
		"tx-p9b": manualPayment("tx-p9b", "p-9", "600.00", "CNY"),
	}
	s := &postgres.Store{Pool: pool}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := &app.Payouts{Store: s, Entries: journal, Clock: clock.NewManual(time.Now()), Log: log}
	if _, err := a.SettleOutside(ctx, app.OutsideSettlement{PayoutID: "po-9", TransactionID: "tx-p9", Reason: "by hand", By: "fin"}); err != nil {
		t.Fatal(err)
	}
	e := journal["tx-p9"]
	e.ReversedBy = "tx-r"
	journal["tx-p9"] = e
	hb := &hookedEntries{entries: journal}
	b := &app.Payouts{Store: s, Entries: hb, Clock: clock.NewManual(time.Now()), Log: log}
	hb.hook = func() {
		if err := a.CheckSettledOutside(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.SettleOutside(ctx, app.OutsideSettlement{PayoutID: "po-9", TransactionID: "tx-p9b", Reason: "by hand again", By: "fin"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.CheckSettledOutside(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := s.GetPayout(ctx, "po-9")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != domain.StatusSettledOutside {
		t.Errorf("po-9 settled again by tx-p9b (not reversed), after replica B's stale pass: %s (%q); want settled_outside", p.Status, p.History[len(p.History)-1].Note)
	}
	if err := a.Retry(ctx, "po-9", "new account"); err == nil {
		t.Error(":retry of po-9 accepted while tx-p9b paid its net by hand")
	}
}
