package ledger_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// The chain's health on /metrics: how far the chain is behind the journal
// (the chain worker only logged its failures), and new transactions that
// sort before its head and so will never be chained (only ledger verify
// looked, and only when run).
func TestChainMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, ref := range []string{"a", "b"} {
		f.deposit(t, "r-1", "1", "USD", ref)
	}
	chainAll(t, f)
	metric := func(name string) float64 {
		t.Helper()
		for _, m := range ledger.Metrics() {
			if m.Name == name {
				var v float64
				if err := f.pool.QueryRow(f.ctx, m.Query).Scan(&v); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return v
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	if lag, n := metric("gpubill_ledger_chain_lag_seconds"), metric("gpubill_ledger_unchainable_transactions"); lag != 0 || n != 0 {
		t.Fatalf("all chained: lag %v, unchainable %v; want 0, 0", lag, n)
	}
	// An hour-old transaction whose id the chain cannot take yet (a Postgres
	// transaction id ahead of every running one), and one whose id is older
	// than the chain's head (as in a journal moved into a cluster behind it).
	hourAgo := time.Now().Add(-time.Hour)
	for _, x := range []struct{ id, xid string }{
		{"00000000-0000-7000-8000-0000000000f1", "999999999999"},
		{"ffffffff-ffff-7fff-bfff-fffffffffff2", "3"},
	} {
		if _, err := f.pool.Exec(f.ctx, `insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at, xid)
			values ($1::uuid, $1::text, '\x00', 'manual', $2, $2, $3::xid8)`, x.id, hourAgo, x.xid); err != nil {
			t.Fatal(err)
		}
	}
	if lag := metric("gpubill_ledger_chain_lag_seconds"); lag < 3500 || lag > 3700 {
		t.Errorf("chain lag %v s; want the hour-old transaction's age", lag)
	}
	if n := metric("gpubill_ledger_unchainable_transactions"); n != 1 {
		t.Errorf("unchainable %v; want 1", n)
	}
}

// The audit log's chain on /metrics: of the latest records, those whose
// link does not verify (ledger verify walks them all, only when run). A
// record deleted from the middle and another's actor edited, with the
// append-only trigger disabled, are two broken links; the log untouched
// has none.
func TestAuditChainMetric(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	var evs []domain.AuditEvent
	for i := range 6 {
		evs = append(evs, domain.AuditEvent{EventID: fmt.Sprintf("e-%d", i), At: at, Service: "ledger", Method: "m",
			Actor: "fin", Role: "finance", ResourceIDs: []string{"a=1"}, Code: "OK"})
	}
	if err := f.app.RecordAuditEvents(f.ctx, evs); err != nil {
		t.Fatal(err)
	}
	breaks := func() float64 {
		t.Helper()
		for _, m := range ledger.Metrics() {
			if m.Name == "gpubill_ledger_audit_chain_breaks" {
				var v float64
				if err := f.pool.QueryRow(f.ctx, m.Query).Scan(&v); err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
		t.Fatal("no metric gpubill_ledger_audit_chain_breaks")
		return 0
	}
	if n := breaks(); n != 0 {
		t.Fatalf("untouched log: %v broken links; want 0", n)
	}
	if _, err := f.pool.Exec(f.ctx, `alter table ledger.audit_events disable trigger audit_events_immutable;
		delete from ledger.audit_events where event_id = 'e-2';
		update ledger.audit_events set actor = 'bob' where event_id = 'e-4';
		alter table ledger.audit_events enable trigger audit_events_immutable`); err != nil {
		t.Fatal(err)
	}
	if n := breaks(); n != 2 {
		t.Fatalf("a record deleted and one edited: %v broken links; want 2", n)
	}
}
