package settlement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// A provider's settlement is ONE ledger transaction carrying its commission
// sweep (no instant where the commission is earned but still in bank:client),
// and the statement names it as the sweep.
func TestSettlementCarriesItsSweep(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.seed(t, cycle1.ID, 2) // p-00000 standard (CNY 1033.33 and USD 10.01), p-00001 pro
	runCycle(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, CloseNow: true}, nil)
	if n := f.count(t, `select count(*) from settlement.settlements where status = 'settled'`); n != 3 {
		t.Fatalf("settled rows = %d, want 3", n)
	}
	for _, c := range []struct{ provider, currency, commission string }{
		{"p-00000", "CNY", "258.33"}, // 25 % of 1033.33
		{"p-00000", "USD", "2.50"},   // 25 % of 10.01
		{"p-00001", "CNY", "206.67"}, // 20 % of 1033.33
	} {
		key := domain.SettlementKey(cycle1.ID, c.provider, c.currency)
		txs := exactKey(f.ledger.Transactions(key), key)
		if len(txs) != 1 {
			t.Fatalf("%s %s: %d settlement transactions, want 1", c.provider, c.currency, len(txs))
		}
		if op, client := sweepLegs(txs[0]); op != c.commission || client != c.commission {
			t.Errorf("%s %s: settlement sweeps Dr bank:operating %q, Cr bank:client %q; want %s both", c.provider, c.currency, op, client, c.commission)
		}
		if n := len(f.ledger.Transactions(domain.SweepKey(cycle1.ID, c.provider, c.currency))); n != 0 {
			t.Errorf("%s %s: %d separate sweep transactions, want 0", c.provider, c.currency, n)
		}
	}
	var sweepID, txID string
	if err := f.s.d.Pool.QueryRow(context.Background(), `select transaction_id, sweep_transaction_id from settlement.settlements
		where provider_id = 'p-00001' and currency = 'CNY'`).Scan(&txID, &sweepID); err != nil {
		t.Fatal(err)
	}
	if txID == "" || sweepID != txID {
		t.Errorf("p-00001 statement: transaction %q, sweep %q; want the sweep in the settlement transaction", txID, sweepID)
	}
}

// A settlement that earlier code had begun as two transactions (the
// settlement posted under its key, the sweep not yet) finishes as two: the
// settlement is replayed as it was and the sweep posted under its own key,
// not refused as a conflicting replay.
func TestSettlementBegunAsTwoTransactionsFinishes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.ledger.Charge("p-00000", cycle1.ID, "CNY", "1033.33")
	// p-00000's CNY settlement as the two-transaction code posted it before a crash.
	legacyKey := domain.SettlementKey(cycle1.ID, "p-00000", "CNY")
	legacy, err := f.ledger.CreateTransaction(context.Background(), &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: legacyKey,
		Description:    "settlement of p-00000 for " + cycle1.ID,
		Metadata: map[string]string{"kind": "settlement", "cycle_id": cycle1.ID, "provider_id": "p-00000",
			"commission_rate": "0.25", "jurisdiction": "CN"},
		Postings: []*ledgerv1.Posting{
			{Account: domain.PendingAccount("p-00000", cycle1.ID), Direction: "debit", Amount: "1033.33", Currency: "CNY"},
			{Account: domain.AccountCommission, Direction: "credit", Amount: "258.33", Currency: "CNY"},
			{Account: "tax:withheld:CN", Direction: "credit", Amount: "155.00", Currency: "CNY"},
			{Account: domain.AvailableAccount("p-00000"), Direction: "credit", Amount: "620.00", Currency: "CNY"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	split := domain.Split{Currency: "CNY", Gross: decimal.RequireFromString("1033.33"), CommissionRate: decimal.RequireFromString("0.25"),
		Commission: decimal.RequireFromString("258.33"), Tax: decimal.RequireFromString("155.00"), Net: decimal.RequireFromString("620.00"), Jurisdiction: "CN"}
	posted, err := f.s.acts.Steps.PostSettlement(context.Background(), app.PostInput{CycleID: cycle1.ID, ProviderID: "p-00000", Split: split})
	if err != nil {
		t.Fatal(err)
	}
	// The begun one: its settlement replayed (not reposted), its sweep on its own key.
	if txs := exactKey(f.ledger.Transactions(legacyKey), legacyKey); len(txs) != 1 || len(txs[0].Postings) != 4 {
		t.Fatalf("legacy settlement: %v", txs)
	}
	sw := f.ledger.Transactions(domain.SweepKey(cycle1.ID, "p-00000", "CNY"))
	if len(sw) != 1 {
		t.Fatalf("legacy settlement's sweep posted %d times, want 1", len(sw))
	}
	if op, client := sweepLegs(sw[0]); op != "258.33" || client != "258.33" {
		t.Errorf("legacy sweep Dr %q Cr %q, want 258.33", op, client)
	}
	if b := f.ledger.Balance(domain.AccountBankOperating, "CNY"); b.String() != "-258.33" { // credits − debits
		t.Errorf("bank:operating CNY = %s, want 258.33 swept", b.Neg())
	}
	if posted.TransactionID != legacy.Transaction.TransactionId || posted.SweepID != sw[0].TransactionId {
		t.Errorf("posted %+v, want settlement %s and sweep %s", posted, legacy.Transaction.TransactionId, sw[0].TransactionId)
	}
	if b := f.ledger.Balance(domain.PendingAccount("p-00000", cycle1.ID), "CNY"); !b.IsZero() {
		t.Errorf("pending %s after settlement, want 0", b)
	}
}

// sweepLegs returns a transaction's Dr bank:operating and Cr bank:client amounts.
func sweepLegs(tx *ledgerv1.Transaction) (op, client string) {
	for _, p := range tx.Postings {
		switch {
		case p.Account == domain.AccountBankOperating && p.Direction == "debit":
			op = p.Amount
		case p.Account == domain.AccountBankClient && p.Direction == "credit":
			client = p.Amount
		}
	}
	return op, client
}

// exactKey keeps the transactions under exactly one key (the fake ledger
// lists by key prefix, and the sweep key extends the settlement key).
func exactKey(txs []*ledgerv1.Transaction, key string) []*ledgerv1.Transaction {
	var out []*ledgerv1.Transaction
	for _, tx := range txs {
		if tx.IdempotencyKey == key {
			out = append(out, tx)
		}
	}
	return out
}

// The hourly sweep over the real store and the ledger's gRPC answers: 500
// USD sweeps the ledger refuses (bank:client short, as the ledger says it), and
// before them one whose key holds another body (Aborted), do not keep the
// CNY sweep settled after them from being swept. Before, a run read the
// oldest 500 once and failed at the conflicting one, every hour.
func TestSweepRunReachesEveryUnsweptStatement(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	at := time.Date(2026, 2, 16, 1, 0, 0, 0, time.UTC)
	if _, err := f.s.d.Pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
		values ($1, 'settled', $2, $2, $2)`, cycle1.ID, cycle1.Closes); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.d.Pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, status,
			commission, tax_withheld, net, settled_at)
		select $1, 'p-' || lpad(i::text, 5, '0'), 'USD', 10, 'settled', 2.50, 0, 7.50, $2::timestamptz + i * interval '1 second'
		from generate_series(1, 500) i
		union all select $1, 'p-old', 'USD', 10, 'settled', 2.50, 0, 7.50, $2
		union all select $1, 'p-new', 'CNY', 10, 'settled', 2.50, 0, 7.50, $2::timestamptz + interval '1 hour'`, cycle1.ID, at); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 500; i++ {
		f.ledger.Refuse(domain.SweepKey(cycle1.ID, fmt.Sprintf("p-%05d", i), "USD"), bankClientShort("USD"))
	}
	// p-old's key holds a sweep of another amount.
	oldKey := domain.SweepKey(cycle1.ID, "p-old", "USD")
	if _, err := f.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{IdempotencyKey: oldKey, Description: "another body",
		Postings: []*ledgerv1.Posting{
			{Account: domain.AccountBankOperating, Direction: "debit", Amount: "9.99", Currency: "USD"},
			{Account: domain.AccountBankClient, Direction: "credit", Amount: "9.99", Currency: "USD"},
		}}); err != nil {
		t.Fatal(err)
	}
	newKey := domain.SweepKey(cycle1.ID, "p-new", "CNY")
	for run, want := range []app.SweepSummary{{Swept: 1, Deferred: 500, Conflicts: 1}, {Deferred: 500, Conflicts: 1}} {
		got, err := f.s.acts.SweepCommission(ctx)
		if err != nil {
			t.Fatalf("run %d: %v", run+1, err)
		}
		if got != want {
			t.Errorf("run %d: %+v, want %+v", run+1, got, want)
		}
	}
	txs := exactKey(f.ledger.Transactions(newKey), newKey)
	if len(txs) != 1 {
		t.Fatalf("p-new: %d sweeps under %s, want 1", len(txs), newKey)
	}
	if op, client := sweepLegs(txs[0]); op != "2.50" || client != "2.50" {
		t.Errorf("p-new's sweep Dr bank:operating %q, Cr bank:client %q; want 2.50 both", op, client)
	}
	rows, err := f.s.d.Pool.Query(ctx, `select provider_id, sweep_transaction_id from settlement.settlements where sweep_transaction_id <> ''`)
	if err != nil {
		t.Fatal(err)
	}
	sweeps := map[string]string{}
	for rows.Next() {
		var p, id string
		if err := rows.Scan(&p, &id); err != nil {
			t.Fatal(err)
		}
		sweeps[p] = id
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(sweeps) != 1 || sweeps["p-new"] != txs[0].TransactionId {
		t.Errorf("statements naming a sweep %v, want p-new's alone (%s)", sweeps, txs[0].TransactionId)
	}
}

// bankClientShort is the ledger's refusal of a sweep bank:client cannot
// fund, as the ledger answers it (checkOverdraft: InvalidArgument with a
// BadRequest field violation on postings naming bank:client).
func bankClientShort(currency string) error {
	return apperr.ToStatus(&apperr.InvalidError{Violations: []apperr.FieldViolation{{Field: "postings", Reason: fmt.Sprintf(
		"bank:client would go negative in %s (balance -2.50 after this transaction): bank accounts may not be overdrawn except by a reversal", currency)}}})
}

// Only the ledger's bank:client shortfall defers a sweep. A sweep refused
// for another reason (settlement's token lost its role: PermissionDenied; a
// posting the ledger finds bad: InvalidArgument on another field) never
// fixes itself by the next hour and is not client money short: it is
// counted as refused, not deferred, and the run goes on.
func TestSweepRefusalIsNotADeferral(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	at := time.Date(2026, 2, 16, 1, 0, 0, 0, time.UTC)
	if _, err := f.s.d.Pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
		values ($1, 'settled', $2, $2, $2)`, cycle1.ID, cycle1.Closes); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.d.Pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, status,
			commission, tax_withheld, net, settled_at)
		select $1, p, c, 10, 'settled', 2.50, 0, 7.50, $2::timestamptz + n * interval '1 second'
		from (values ('p-denied', 'USD', 1), ('p-invalid', 'USD', 2), ('p-short', 'USD', 3), ('p-other', 'USD', 4), ('p-ok', 'CNY', 5)) v(p, c, n)`,
		cycle1.ID, at); err != nil {
		t.Fatal(err)
	}
	key := func(p, c string) string { return domain.SweepKey(cycle1.ID, p, c) }
	f.ledger.Refuse(key("p-denied", "USD"), status.Error(codes.PermissionDenied, "settlement token lacks role ledger:settlement"))
	f.ledger.Refuse(key("p-invalid", "USD"), apperr.ToStatus(&apperr.InvalidError{Violations: []apperr.FieldViolation{
		{Field: "metadata", Reason: "kind commission_sweep is not a settlement kind"}}}))
	f.ledger.Refuse(key("p-short", "USD"), bankClientShort("USD"))
	// Another account's overdraft on the same field is not bank:client short.
	f.ledger.Refuse(key("p-other", "USD"), apperr.ToStatus(&apperr.InvalidError{Violations: []apperr.FieldViolation{
		{Field: "postings", Reason: "bank:operating would go negative in USD (balance -2.50 after this transaction): bank accounts may not be overdrawn except by a reversal"}}}))
	for run := 1; run <= 2; run++ {
		got, err := f.s.acts.SweepCommission(ctx)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		wantSwept := 0
		if run == 1 {
			wantSwept = 1
		}
		if want := (app.SweepSummary{Swept: wantSwept, Deferred: 1, Refused: 3}); got != want {
			t.Errorf("run %d: %+v, want %+v (p-short alone deferred: bank:client short; p-denied, p-invalid, p-other refused; p-ok swept once)", run, got, want)
		}
	}
	if txs := exactKey(f.ledger.Transactions(key("p-ok", "CNY")), key("p-ok", "CNY")); len(txs) != 1 {
		t.Errorf("p-ok: %d sweeps, want 1", len(txs))
	}
}

// A provider's settlement whose own commission sweep meets a Conflict (the
// sweep key holds another body) completes: the statement is settled without
// a sweep (deferred to the hourly sweep, which meets and counts the Conflict
// again), the conflict is counted and the commission still reads as unswept.
// Before, the Conflict failed the provider's settlement, every retry.
func TestSettlementWhoseSweepConflictsCompletes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	f.seed(t, cycle1.ID, 1) // p-00000 standard: CNY 1033.33, USD 10.01
	// Held through the close (its gross snapshotted), then settled on release.
	if _, err := f.s.api.HoldProvider(ctx, holdReq(cycle1.ID, "p-00000")); err != nil {
		t.Fatal(err)
	}
	runCycle(t, f, app.CycleInput{CycleID: cycle1.ID, ClosesAt: cycle1.Closes, CloseNow: true}, nil)
	// p-00000's CNY settlement as the two-transaction code posted it, and
	// under its sweep key another body (a sweep of another amount).
	if _, err := f.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: domain.SettlementKey(cycle1.ID, "p-00000", "CNY"),
		Description:    "settlement of p-00000 for " + cycle1.ID,
		Metadata: map[string]string{"kind": "settlement", "cycle_id": cycle1.ID, "provider_id": "p-00000",
			"commission_rate": "0.25", "jurisdiction": "CN"},
		Postings: []*ledgerv1.Posting{
			{Account: domain.PendingAccount("p-00000", cycle1.ID), Direction: "debit", Amount: "1033.33", Currency: "CNY"},
			{Account: domain.AccountCommission, Direction: "credit", Amount: "258.33", Currency: "CNY"},
			{Account: "tax:withheld:CN", Direction: "credit", Amount: "155.00", Currency: "CNY"},
			{Account: domain.AvailableAccount("p-00000"), Direction: "credit", Amount: "620.00", Currency: "CNY"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	sweepKey := domain.SweepKey(cycle1.ID, "p-00000", "CNY")
	if _, err := f.ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{IdempotencyKey: sweepKey, Description: "another body",
		Postings: []*ledgerv1.Posting{
			{Account: domain.AccountBankOperating, Direction: "debit", Amount: "9.99", Currency: "CNY"},
			{Account: domain.AccountBankClient, Direction: "credit", Amount: "9.99", Currency: "CNY"},
		}}); err != nil {
		t.Fatal(err)
	}
	before := sweepConflictsCounted(t, "CNY")
	releaseAndSettle(t, f, "p-00000") // fails the test on the provider workflow's error
	if n := f.count(t, `select count(*) from settlement.settlements where provider_id = 'p-00000' and status = 'settled'`); n != 2 {
		t.Errorf("p-00000: %d statements settled, want 2 (CNY, its sweep conflicting, and USD)", n)
	}
	if c := sweepConflictsCounted(t, "CNY"); c != before+1 {
		t.Errorf("gpubill_settlement_commission_sweep_conflicts_total{currency=\"CNY\"} went %v → %v over the settlement, want one more", before, c)
	}
	// Nothing lost: the CNY commission reads as unswept (the
	// gpubill_settlement_commission_unswept gauge's query), the USD one swept.
	var unswept string
	if err := f.s.d.Pool.QueryRow(ctx, `select coalesce(sum(commission), 0)::text from settlement.settlements
		where status = 'settled' and commission > 0 and sweep_transaction_id = '' and currency = 'CNY'`).Scan(&unswept); err != nil {
		t.Fatal(err)
	}
	if unswept != "258.33" {
		t.Errorf("CNY commission unswept %s, want 258.33", unswept)
	}
	if n := f.count(t, `select count(*) from settlement.settlements where currency = 'USD' and sweep_transaction_id <> ''`); n != 1 {
		t.Errorf("USD statements swept %d, want 1", n)
	}
	// The hourly sweep meets it, counts it and leaves it unswept.
	got, err := f.s.acts.SweepCommission(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (app.SweepSummary{Conflicts: 1}); got != want {
		t.Errorf("hourly sweep after the settlement: %+v, want %+v", got, want)
	}
	if c := sweepConflictsCounted(t, "CNY"); c != before+2 {
		t.Errorf("gpubill_settlement_commission_sweep_conflicts_total{currency=\"CNY\"} went %v → %v, want two more", before, c)
	}
	if txs := exactKey(f.ledger.Transactions(sweepKey), sweepKey); len(txs) != 1 || txs[0].Description != "another body" {
		t.Errorf("under %s: %v, want the other body alone", sweepKey, txs)
	}
}

// sweepConflictsCounted reads
// gpubill_settlement_commission_sweep_conflicts_total{currency}. Only
// TestSettlementWhoseSweepConflictsCompletes meets a CNY conflict in this
// package.
func sweepConflictsCounted(t *testing.T, currency string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gpubill_settlement_commission_sweep_conflicts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "currency" && l.GetValue() == currency {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no gpubill_settlement_commission_sweep_conflicts_total{currency=%q}", currency)
	return 0
}
