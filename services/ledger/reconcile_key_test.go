package ledger_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A reconciliation's idempotency key answers the run that holds it only
// for the request that made it, and only for a day: as an idempotent API
// does (Stripe's keys), a key reused with another request (another
// currency, or every currency instead of one) is refused (409) naming the
// key and the run that holds it, and so is a key older than a day (a
// finance user asking again the next day, statements imported since,
// expects a new run, not yesterday's). Within the day the same request
// answers the same run even though statements were imported since: the
// daily schedule's retries (up to 6 h) must get the run they stored.
// Before, every reuse of a key silently answered the old run, or (another
// currency) stored a second run under it.
func TestReconciliationKeyReusedForAnotherRequestIsRefused(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	f := newFixtureAt(t, nil, clk)
	rec := f.svc.Reconciliations()
	f.deposit(t, "r-1", "100.00", "CNY", "bank-ref-1")
	chainAll(t, f)
	importCSV(t, f, "st-1", "date,reference,amount,balance\n2026-11-30,bank-ref-1,100.00,100.00\n")

	runs, err := rec.RunKeyed(f.ctx, "CNY", domain.ReconByRequest, "finance:alice", "k-1")
	if err != nil || len(runs) != 1 {
		t.Fatalf("keyed run: %v %v", runs, err)
	}
	r1 := runs[0]
	conflict := func(name string, err error, wants ...string) {
		t.Helper()
		if !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("%s: %v; want a conflict", name, err)
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: %q does not name %q", name, err, w)
			}
		}
	}

	// A retry within the day, a statement imported since: the same run.
	clk.Advance(time.Hour)
	f.deposit(t, "r-1", "30.00", "CNY", "bank-ref-2")
	chainAll(t, f)
	importCSV(t, f, "st-2", "date,reference,amount,balance\n2026-12-01,bank-ref-2,30.00,130.00\n")
	runs, err = rec.RunKeyed(f.ctx, "CNY", domain.ReconByRequest, "finance:alice", "k-1")
	if err != nil || len(runs) != 1 || runs[0].ID != r1.ID {
		t.Fatalf("retry of the keyed run: %v %v; want %s again", runs, err, r1.ID)
	}

	// Another request under the key: refused, whichever currency.
	_, err = rec.RunKeyed(f.ctx, "USD", domain.ReconByRequest, "finance:alice", "k-1")
	conflict("k-1 for USD", err, `"k-1"`, r1.ID)
	_, err = rec.RunKeyed(f.ctx, "", domain.ReconByRequest, "finance:alice", "k-1")
	conflict("k-1 for every currency", err, `"k-1"`, r1.ID)

	// Over REST: a 409 naming the key and the run, nothing internal.
	base, secret := startServer(t, f)
	tok, err := auth.Issue(secret, auth.RoleFinance, "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := restClient{t: t, base: base, token: tok}
	code, body := c.do("POST", "/v1/reconciliations", `{"currency":"USD","idempotency_key":"k-1"}`)
	if code != 409 || !strings.Contains(body, "k-1") || !strings.Contains(body, r1.ID) || strings.Contains(body, "ledger.") {
		t.Fatalf("POST /v1/reconciliations k-1 for USD: %d %s; want 409 naming k-1 and %s", code, body, r1.ID)
	}

	// The next day the key is refused: a new run needs a new key.
	clk.Advance(24 * time.Hour)
	_, err = rec.RunKeyed(f.ctx, "CNY", domain.ReconByRequest, "finance:alice", "k-1")
	conflict("k-1 a day later", err, `"k-1"`, r1.ID)
	runs, err = rec.RunKeyed(f.ctx, "CNY", domain.ReconByRequest, "finance:alice", "k-2")
	if err != nil || len(runs) != 1 || runs[0].ID == r1.ID || strings.Join(runs[0].StatementIDs, ",") != "st-2" {
		t.Fatalf("run under a new key: %v %v; want a new run taking st-2", runs, err)
	}
	if n := f.count(t, `select count(*) from ledger.reconciliations`); n != 2 {
		t.Fatalf("%d runs stored, want 2 (k-1's and k-2's)", n)
	}

	// The daily schedule's key (one per scheduled run, every currency):
	// its retry answers the run it stored.
	sched, err := rec.RunKeyed(f.ctx, "", domain.ReconBySchedule, "service:settlement", "ledger-reconciliation-daily-2026-12-02T06:00:00Z")
	if err != nil || len(sched) != 1 {
		t.Fatalf("scheduled run: %v %v", sched, err)
	}
	clk.Advance(6 * time.Hour)
	again, err := rec.RunKeyed(f.ctx, "", domain.ReconBySchedule, "service:settlement", "ledger-reconciliation-daily-2026-12-02T06:00:00Z")
	if err != nil || len(again) != 1 || again[0].ID != sched[0].ID {
		t.Fatalf("retry of the scheduled run: %v %v; want %s again", again, err, sched[0].ID)
	}
}

// Two requests under one key for two currencies at once: one runs, the
// other is refused naming its run. Each takes its own currency's lock, so
// only the key's lock keeps them from both finding the key free and both
// storing a run under it (the unique index is per currency). The table is
// held so both are inside their runs before either stores.
func TestReconciliationKeyTakenOnceAcrossCurrencies(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	rec := f.svc.Reconciliations()
	release := lockTable(t, f, "ledger.reconciliations")
	type result struct {
		runs []*domain.ReconRun
		err  error
	}
	done := make(chan result, 2)
	for _, cur := range []string{"CNY", "USD"} {
		go func() {
			runs, err := rec.RunKeyed(f.ctx, cur, domain.ReconByRequest, "finance:alice", "k-both")
			done <- result{runs, err}
		}()
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.count(t, `select count(*) from pg_locks l join pg_stat_activity a on a.pid = l.pid
			where not l.granted and a.datname = current_database()`) >= 2
	}, "both runs waiting")
	release()
	var ran, refused int
	for range 2 {
		r := <-done
		switch {
		case r.err == nil && len(r.runs) == 1:
			ran++
		case errors.Is(r.err, apperr.ErrConflict) && strings.Contains(r.err.Error(), `"k-both"`):
			refused++
		default:
			t.Fatalf("a run under k-both: %v %v", r.runs, r.err)
		}
	}
	if n := f.count(t, `select count(*) from ledger.reconciliations where idempotency_key = 'k-both'`); ran != 1 || refused != 1 || n != 1 {
		t.Fatalf("%d ran, %d refused, %d runs hold k-both; want one of each and one run", ran, refused, n)
	}
}

// A reconciliation key answers only the caller that stored it: another
// finance user, or the stack's service identity, sending the same key
// (the same currency, within the day) is refused (409) naming the key, and
// no run is stored; the caller that stored it still gets its run. As a
// ledger transaction's key answers only its own request, the caller is
// part of the request. Before, another caller's key answered that
// caller's run as if it were the asker's (a finance user believing she
// had reconciled was shown a colleague's run of hours before).
func TestReconciliationKeyOfAnotherCallerIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	rec := f.svc.Reconciliations()
	f.deposit(t, "r-1", "100.00", "CNY", "bank-ref-1")
	chainAll(t, f)
	importCSV(t, f, "st-1", "date,reference,amount,balance\n2026-11-30,bank-ref-1,100.00,100.00\n")
	runs, err := rec.RunKeyed(f.ctx, "CNY", domain.ReconByRequest, "finance:alice", "k-1")
	if err != nil || len(runs) != 1 {
		t.Fatalf("keyed run: %v %v", runs, err)
	}
	r1 := runs[0]
	for _, by := range []string{"finance:bob", "finance", "service:settlement"} {
		trigger := domain.ReconByRequest
		if strings.HasPrefix(by, "service") {
			trigger = domain.ReconBySchedule
		}
		got, err := rec.RunKeyed(f.ctx, "CNY", trigger, by, "k-1")
		if !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), `"k-1"`) {
			t.Fatalf("k-1 sent by %s: %v %v; want a conflict naming k-1", by, got, err)
		}
	}
	if n := f.count(t, `select count(*) from ledger.reconciliations`); n != 1 {
		t.Fatalf("%d runs stored, want alice's alone", n)
	}
	runs, err = rec.RunKeyed(f.ctx, "CNY", domain.ReconByRequest, "finance:alice", "k-1")
	if err != nil || len(runs) != 1 || runs[0].ID != r1.ID {
		t.Fatalf("alice's retry: %v %v; want %s again", runs, err, r1.ID)
	}

	// Over REST: bob's token, alice's key: a 409 naming the key, nothing
	// internal.
	base, secret := startServer(t, f)
	tok, err := auth.Issue(secret, auth.RoleFinance, "bob", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := restClient{t: t, base: base, token: tok}
	code, body := c.do("POST", "/v1/reconciliations", `{"currency":"CNY","idempotency_key":"k-1"}`)
	if code != 409 || !strings.Contains(body, "k-1") || strings.Contains(body, "ledger.") {
		t.Fatalf("POST /v1/reconciliations k-1 as bob: %d %s; want 409 naming k-1", code, body)
	}
}
