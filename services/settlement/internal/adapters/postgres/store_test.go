package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// newStore is a Store on a fresh database with settlement's schema.
func newStore(t *testing.T) *Store {
	t.Helper()
	return NewStore(testkit.NewMigratedPool(t, Schema, migrations.For(Schema)))
}

// rowsRead is how many rows of settlement.settlements (heap or index) an
// EXPLAIN (ANALYZE, FORMAT JSON) plan read, kept or filtered out.
func rowsRead(t *testing.T, plan []byte) float64 {
	t.Helper()
	var out []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &out); err != nil || len(out) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	var walk func(n map[string]any) float64
	walk = func(n map[string]any) float64 {
		sum := 0.0
		rel, _ := n["Relation Name"].(string)
		idx, _ := n["Index Name"].(string)
		if rel == "settlements" || idx == "settlements_pkey" || idx == "settlements_provider" {
			num := func(k string) float64 { f, _ := n[k].(float64); return f }
			sum += (num("Actual Rows") + num("Rows Removed by Filter") + num("Rows Removed by Index Recheck")) * num("Actual Loops")
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				sum += walk(m)
			}
		}
		return sum
	}
	return walk(out[0].Plan)
}

// ProviderStates answers from the rows of the providers asked only: the
// page polls it every 50 ms, so reading the whole cycle made a cycle's
// polls cost grow with its size (the planner chose to scan every row of
// the cycle and filter the providers, a statement without statistics).
func TestProviderStatesReadsOnlyTheProvidersAsked(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	const cycle, n = "cyc-20260101", 20000
	if _, err := s.Pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
		values ($1, 'closing', now(), now(), now())`, cycle); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross)
		select $1, 'p-' || lpad(i::text, 6, '0'), 'CNY', 100 from generate_series(0, $2 - 1) i`, cycle, n); err != nil {
		t.Fatal(err)
	}
	// p-000001 settled in two currencies, p-000002 held, p-000003 settled
	// in one of two (pending), p-000004 pending, p-999999 not in the cycle.
	if _, err := s.Pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, status)
		values ($1, 'p-000001', 'USD', 1, 'settled'), ($1, 'p-000003', 'USD', 1, 'pending')`, cycle); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `update settlement.settlements set status = case provider_id when 'p-000002' then 'held' else 'settled' end
		where cycle_id = $1 and (provider_id in ('p-000001', 'p-000002') or provider_id = 'p-000003' and currency = 'CNY')`, cycle); err != nil {
		t.Fatal(err)
	}
	// A page's window: 500 providers in flight.
	asked := []string{"p-000001", "p-000002", "p-000003", "p-000004", "p-999999"}
	for i := range 495 {
		asked = append(asked, fmt.Sprintf("p-%06d", 10000+i))
	}
	got, err := s.ProviderStates(ctx, cycle, asked)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"p-000001": "settled", "p-000002": "held"}; !maps.Equal(got, want) {
		t.Fatalf("states %v, want %v", got, want)
	}
	var plan []byte
	if err := s.Pool.QueryRow(ctx, `explain (analyze, format json) `+providerStatesSQL, cycle, asked).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	// At most the asked providers' rows (7 + 495), each possibly seen in
	// the index and the heap.
	if read := rowsRead(t, plan); read > 2*(7+495) {
		t.Fatalf("ProviderStates of %d providers read %.0f rows of a %d-row cycle:\n%s", len(asked), read, n, plan)
	}
}

// NextProviders reads a page's providers from the index in order once the
// snapshot is marked done: without statistics of the cycle's rows the
// planner sorted every row after the cursor for each page.
func TestNextProvidersReadsAPage(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	const cycle, n, limit = "cyc-20260101", 20000, 100
	if _, err := s.Pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
		values ($1, 'closing', now(), now(), now())`, cycle); err != nil {
		t.Fatal(err)
	}
	rows := make([]domain.Balance, n)
	for i := range rows {
		rows[i] = domain.Balance{ProviderID: fmt.Sprintf("p-%06d", i), Currency: "CNY", Amount: decimal.NewFromInt(100)}
	}
	rows = append(rows, domain.Balance{ProviderID: "p-000101", Currency: "USD", Amount: decimal.NewFromInt(1)})
	if err := s.SnapshotBalances(ctx, cycle, rows, split.DefaultCommission().Rates); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkSnapshotDone(ctx, cycle); err != nil {
		t.Fatal(err)
	}
	got, err := s.NextProviders(ctx, cycle, "p-000099", limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != limit || got[0] != "p-000100" || got[1] != "p-000101" || got[2] != "p-000102" || got[limit-1] != "p-000199" {
		t.Fatalf("page after p-000099: %d providers %v", len(got), got)
	}
	var plan []byte
	if err := s.Pool.QueryRow(ctx, `explain (analyze, format json) `+nextProvidersSQL, cycle, "p-000099", limit).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	// The page's rows (101), each possibly seen in the index and the heap.
	if read := rowsRead(t, plan); read > 2*(limit+1) {
		t.Fatalf("a page of %d providers read %.0f rows of a %d-row cycle:\n%s", limit, read, n, plan)
	}
}

// A caller whose context ends while its statement waits in a shared batch
// is answered at once, and its statement still runs with the group's
// (pg.Batches.Do): Prepare must not write what it answers from the
// batch's callback. It did (its results were the callback's variables), a
// race `make test-race` reports.
func TestPrepareWithAnEndedContext(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for i := range 20 {
		leader := make(chan error, 1)
		go func() {
			_, _, _, _, _, err := s.Prepare(ctx, "cyc-20260101", fmt.Sprintf("p-lead-%d", i))
			leader <- err
		}()
		time.Sleep(2 * time.Millisecond) // the leader's group lingers: this one joins it
		held, tier, _, closedAt, items, err := s.Prepare(ended, "cyc-20260101", fmt.Sprintf("p-ended-%d", i))
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Prepare with an ended context: %v", err)
		}
		if err != nil && (held || tier != "" || !closedAt.IsZero() || items != nil) {
			t.Fatalf("Prepare answered %v with %v %q %v %v", err, held, tier, closedAt, items)
		}
		if err := <-leader; err != nil {
			t.Fatalf("the leader's Prepare: %v", err)
		}
	}
}

// A provider's prepare and a hold of it take the same lock first, so each
// reads what the other committed: a prepare waiting behind a hold's
// transaction reads the hold (it read the holds as they were before, and
// began a settlement the hold answered 200 for), and a hold waiting behind a
// prepare that began the settlement is refused.
func TestPrepareAndHoldReadWhatTheOtherCommitted(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	const cycle = "cyc-20260101"
	if _, err := s.Pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
		values ($1, 'closing', '2026-01-01', '2026-02-15', '2026-02-15')`, cycle); err != nil {
		t.Fatal(err)
	}
	wait := func(what string, tx func() error) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // the other call waits on the lock meanwhile
		if err := tx(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// A hold's transaction holds the lock: the prepare waits and reads it.
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, holdLockSQL, cycle, "p-held"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `insert into settlement.holds (cycle_id, provider_id, held, reason) values ($1, 'p-held', true, 'dispute')`, cycle); err != nil {
		t.Fatal(err)
	}
	prepared := make(chan bool, 1)
	go func() {
		held, _, _, _, _, err := s.Prepare(ctx, cycle, "p-held")
		if err != nil {
			t.Error(err)
		}
		prepared <- held
	}()
	wait("commit the hold", func() error { return tx.Commit(ctx) })
	if held := <-prepared; !held {
		t.Fatal("a prepare waiting behind a hold's commit read the provider not held")
	}

	// A prepare that began the settlement holds the lock: the hold waits
	// and is refused.
	tx, err = s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, holdLockSQL, cycle, "p-begun"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, begun_at)
		values ($1, 'p-begun', 'CNY', 100, now())`, cycle); err != nil {
		t.Fatal(err)
	}
	holdErr := make(chan error, 1)
	go func() {
		holdErr <- s.SetHold(ctx, domain.Hold{CycleID: cycle, ProviderID: "p-begun", Held: true, Reason: "dispute", UpdatedAt: time.Now()})
	}()
	wait("commit the prepare", func() error { return tx.Commit(ctx) })
	if err := <-holdErr; !errors.Is(err, apperr.ErrPrecondition) {
		t.Fatalf("a hold waiting behind a prepare that began the settlement: %v; want a precondition error", err)
	}
}

// A provider's currencies snapshotted on two pages around a tier change are
// split at one tier and rate, the first page's: the second currency's row
// took the new tier and rate, and Prepare answered the first row's rate with
// the last row's tier, so both were split at 0.25 and both statements named
// partner.
func TestSnapshotKeepsAProvidersTierAcrossPages(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	const cycle = "cyc-20260101"
	rates := split.DefaultCommission().Rates
	if _, err := s.Pool.Exec(ctx, `insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
		values ($1, 'closing', now(), now(), now())`, cycle); err != nil {
		t.Fatal(err)
	}
	setTier := func(tier string) {
		t.Helper()
		if _, err := s.Pool.Exec(ctx, `insert into settlement.providers (provider_id, tier) values ('p-1', $1)
			on conflict (provider_id) do update set tier = excluded.tier`, tier); err != nil {
			t.Fatal(err)
		}
	}
	setTier(split.TierStandard)
	if err := s.SnapshotBalances(ctx, cycle, []domain.Balance{{ProviderID: "p-1", Currency: "CNY", Amount: decimal.NewFromInt(100)}}, rates); err != nil {
		t.Fatal(err)
	}
	setTier("partner")
	if err := s.SnapshotBalances(ctx, cycle, []domain.Balance{{ProviderID: "p-1", Currency: "USD", Amount: decimal.NewFromInt(10)}}, rates); err != nil {
		t.Fatal(err)
	}
	_, tier, rate, _, items, err := s.Prepare(ctx, cycle, "p-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || tier != split.TierStandard || !rate.Valid || !rate.Decimal.Equal(rates[split.TierStandard]) {
		t.Fatalf("prepared tier %q at %v for %d rows; want %s at %s for both currencies", tier, rate, len(items), split.TierStandard, rates[split.TierStandard])
	}
	var n int
	if err := s.Pool.QueryRow(ctx, `select count(*) from settlement.settlements where cycle_id = $1 and provider_id = 'p-1'
		and tier = $2 and commission_rate = $3`, cycle, split.TierStandard, rates[split.TierStandard]).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d of 2 rows snapshotted at %s, %s (%v)", n, split.TierStandard, rates[split.TierStandard], err)
	}
}
