package postgres

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// cachedStore is a migrated payout schema with one paid payout, and a
// store whose poll cache listens until the test ends.
func cachedStore(t *testing.T) (*Store, context.CancelFunc) {
	t.Helper()
	ctx := context.Background()
	pool := migratedPool(t)
	for _, q := range []string{
		`insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			method, method_summary, rail_reference, workflow_started, version, created_at, updated_at)
		values ('po-c1', 'p-c1', 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'in_transit', 'bank', 'bank ****0001', 'po-c1', true, 3, now(), now())`,
		`insert into payout.status_history (payout_id, seq, status, note, at) values ('po-c1', 1, 'created', '', now())`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	c := &PayoutCache{Pool: pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("cache: %v", err)
		}
	})
	testkit.Eventually(t, 10*time.Second, func() bool { _, live := c.Epoch(); return live }, "cache listening")
	return &Store{Pool: pool, Cache: c}, cancel
}

// A polled payout is served from memory, and a change written by anyone
// (here plain SQL on another connection: another process) drops the copy,
// so the next poll sees it; the history and the statements count as the
// payout's.
func TestPayoutCacheDropsAChangedPayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := cachedStore(t)
	p, err := s.PollPayout(ctx, "po-c1")
	if err != nil || p.Status != "in_transit" || p.Version != 3 {
		t.Fatalf("first poll: %+v %v", p, err)
	}
	if s.Cache.Len() != 1 {
		t.Fatalf("cached %d payouts after a poll, want 1", s.Cache.Len())
	}
	for _, tc := range []struct {
		name, sql string
		check     func(p PayoutView) bool
	}{
		{"status", `update payout.payouts set status = 'paid', version = 4 where payout_id = 'po-c1'`, func(p PayoutView) bool { return p.Status == "paid" }},
		{"history", `insert into payout.status_history (payout_id, seq, status, note, at) values ('po-c1', 2, 'paid', 'late', now())`,
			func(p PayoutView) bool { return p.History == 2 }},
		{"statement", `insert into payout.payout_statements (payout_id, cycle_id, currency, net) values ('po-c1', 'cyc-20260101', 'CNY', 600)`,
			func(p PayoutView) bool { return p.Statements == 1 }},
	} {
		if _, err := s.PollPayout(ctx, "po-c1"); err != nil { // cached again
			t.Fatal(err)
		}
		if _, err := s.Pool.Exec(ctx, tc.sql); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, func() bool {
			p, err := s.PollPayout(ctx, "po-c1")
			return err == nil && tc.check(view(p))
		}, "poll after a change of "+tc.name)
	}
}

// A read that began before an invalidation is not kept (it may hold what
// the write replaced), and nothing is kept while the cache does not listen.
func TestPayoutCacheKeepsNoReadOlderThanAnInvalidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, stop := cachedStore(t)
	epoch, live := s.Cache.Epoch()
	if !live {
		t.Fatal("not live")
	}
	p, err := s.GetPayout(ctx, "po-c1")
	if err != nil {
		t.Fatal(err)
	}
	s.Cache.Forget("po-other") // a notification arrived meanwhile
	s.Cache.Put(epoch, p)
	if _, ok := s.Cache.Get("po-c1"); ok {
		t.Fatal("a read older than an invalidation was kept")
	}
	stop()
	testkit.Eventually(t, 10*time.Second, func() bool { _, live := s.Cache.Epoch(); return !live }, "cache stopped")
	if _, err := s.PollPayout(ctx, "po-c1"); err != nil {
		t.Fatal(err)
	}
	if s.Cache.Len() != 0 {
		t.Fatal("kept a copy while not listening")
	}
}

// When the listening connection is lost (its backend terminated), the
// cache empties, a change made meanwhile is read from the database, and it
// listens again on its own.
func TestPayoutCacheSurvivesALostListener(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := cachedStore(t)
	if _, err := s.PollPayout(ctx, "po-c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `select pg_terminate_backend(pid) from pg_stat_activity
		where datname = current_database() and query ilike 'listen %'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return s.Cache.Len() == 0 }, "cache emptied")
	if _, err := s.Pool.Exec(ctx, `update payout.payouts set status = 'paid', version = 4 where payout_id = 'po-c1'`); err != nil {
		t.Fatal(err)
	}
	if p, err := s.PollPayout(ctx, "po-c1"); err != nil || p.Status != "paid" {
		t.Fatalf("poll while relistening: %s %v", p.Status, err)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		if _, err := s.PollPayout(ctx, "po-c1"); err != nil {
			return false
		}
		return s.Cache.Len() == 1
	}, "cache listening again")
}

// PayoutView is what the tests compare of a payout.
type PayoutView struct {
	Status              string
	History, Statements int
}

func view(p domain.Payout) PayoutView {
	return PayoutView{Status: p.Status, History: len(p.History), Statements: len(p.Statements)}
}
