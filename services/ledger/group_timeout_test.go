package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// counterTotal is an unlabelled counter's value in this process.
func counterTotal(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s (a series exported at 0 from the start)", name)
	return 0
}

// lockTable takes table in EXCLUSIVE mode on a connection of its own, so
// every insert into it blocks (reads go on): a database that hangs without
// refusing. The returned func releases it (idempotent; also at cleanup).
// A first write (warm) runs once the lock's connection is taken: it creates
// the accounts and leaves the pool an idle connection with the write's
// statements prepared, so a held group's pipeline goes whole, its COMMIT
// included, and blocks on the server.
func lockTable(t *testing.T, f *fixture, table string) (release func()) {
	t.Helper()
	conn, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.CreateTransaction(f.ctx, transfer("warm", "bank:client", "renter:r-1:wallet", "1", "USD")); err != nil {
		conn.Release()
		t.Fatal(err)
	}
	if _, err := conn.Exec(f.ctx, "begin; lock table "+table+" in exclusive mode"); err != nil {
		conn.Release()
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		if _, err := conn.Exec(context.Background(), "rollback"); err != nil {
			t.Error(err)
		}
		conn.Release()
	}
	t.Cleanup(release)
	return release
}

// answer is one CreateTransaction's outcome and how long it took.
type answer struct {
	tx   *domain.Transaction
	err  error
	took time.Duration
}

// createAsync runs CreateTransaction of a transfer into renter r-1's
// wallet on its own goroutine.
func createAsync(ctx context.Context, f *fixture, key string) <-chan answer {
	return postAsync(ctx, f, transfer(key, "bank:client", "renter:r-1:wallet", "1", "USD"))
}

// postAsync runs CreateTransaction of in on its own goroutine.
func postAsync(ctx context.Context, f *fixture, in app.CreateTransactionInput) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		start := time.Now()
		tx, err := f.app.CreateTransaction(ctx, in)
		ch <- answer{tx, err, time.Since(start)}
	}()
	return ch
}

// await is a's answer within within; ok false when it had none by then.
func await(a <-chan answer, within time.Duration) (answer, bool) {
	select {
	case x := <-a:
		return x, true
	case <-time.After(within):
		return answer{}, false
	}
}

// retryOnce posts key's transfer into renter r-1's wallet again and
// asserts it is in the journal exactly once.
func retryOnce(t *testing.T, f *fixture, key string) {
	t.Helper()
	retryPosted(t, f, transfer(key, "bank:client", "renter:r-1:wallet", "1", "USD"))
}

// retryPosted posts in again and asserts its key is in the journal exactly
// once.
func retryPosted(t *testing.T, f *fixture, in app.CreateTransactionInput) {
	t.Helper()
	key := in.IdempotencyKey
	tx, err := f.app.CreateTransaction(f.ctx, in)
	if err != nil {
		t.Fatalf("retry of %s: %v", key, err)
	}
	if tx.IdempotencyKey != key {
		t.Fatalf("retry of %s answered transaction %s of key %s", key, tx.ID, tx.IdempotencyKey)
	}
	if n := f.count(t, `select count(*) from ledger.transactions where idempotency_key = $1`, key); n != 1 {
		t.Fatalf("%s posted %d times, want once", key, n)
	}
}

// A group commit the database holds (a lock on the journal, as a network
// partition or a stuck lock would) ends at the group's timeout: rolled
// back on the server too (nothing of it commits once the lock is
// released), each of its writes answered Unavailable (503, retry) within
// the timeout, the group counted; a retry under the same idempotency key
// then posts each write exactly once. Before, every API write of the
// process waited for ever.
func TestGroupCommitTimesOutOnAHangingDatabase(t *testing.T) {
	f := newFixture(t, nil)
	const timeout = time.Second
	f.app.GroupTimeout = timeout
	timeouts0 := counterTotal(t, "gpubill_ledger_write_group_timeouts_total")
	release := lockTable(t, f, "ledger.transactions")

	const n = 3
	answers := make([]<-chan answer, n)
	for i := range n {
		answers[i] = createAsync(f.ctx, f, fmt.Sprintf("hang-%d", i))
	}
	const margin = 3 * time.Second
	got := make([]answer, n)
	for i := range n {
		a, ok := await(answers[i], timeout+margin)
		if !ok {
			release() // let the held writes finish, so the test ends
			t.Fatalf("write hang-%d still waiting %s after its group's timeout of %s: the database held it", i, margin, timeout)
		}
		got[i] = a
	}
	returned := time.Now()
	for i, a := range got {
		if !errors.Is(a.err, apperr.ErrUnavailable) {
			t.Fatalf("write hang-%d: %v, want unavailable", i, a.err)
		}
		if a.took > timeout+margin {
			t.Fatalf("write hang-%d answered after %s, its group's timeout %s", i, a.took, timeout)
		}
		st, _ := status.FromError(apperr.ToStatus(a.err))
		if st.Code() != codes.Unavailable || strings.Contains(st.Message(), "ledger.") || strings.Contains(st.Message(), "SQLSTATE") {
			t.Fatalf("write hang-%d answered %s %q, want Unavailable without internals", i, st.Code(), st.Message())
		}
		t.Logf("hang-%d: %s after %s", i, st.Message(), a.took.Round(time.Millisecond))
	}
	if d := counterTotal(t, "gpubill_ledger_write_group_timeouts_total") - timeouts0; d < 1 {
		t.Fatalf("gpubill_ledger_write_group_timeouts_total rose by %v, want the timed-out group counted", d)
	}
	// The server gave the held statements up too (statement_timeout): once
	// the lock goes, nothing of the group commits behind its callers.
	time.Sleep(time.Until(returned.Add(timeout)))
	release()
	time.Sleep(300 * time.Millisecond)
	if c := f.count(t, `select count(*) from ledger.transactions where idempotency_key like 'hang-%'`); c != 0 {
		t.Fatalf("%d of the timed-out group's writes committed once the lock was released, want it rolled back", c)
	}
	for i := range n {
		retryOnce(t, f, fmt.Sprintf("hang-%d", i))
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", fmt.Sprint(n+1))
}

// A group write that does not go through Store.PostNew (a transfer into a
// cycle's pending account takes the cycle's lock in Store.WithTx; a write
// alone, or each of a group that failed, is posted by postOne) is bounded
// as the PostNew group is: answered unavailable at the group's timeout, and
// its statement ends on the server then too, not when the database lets it
// go (it would hold its connection and the cycle's lock, which a cycle's
// close waits for). No statement_timeout is needed for it: the group's
// context ends it, pgx sending the server a cancel request as it closes
// the connection, and nothing of a WithTx transaction commits without its
// COMMIT, which PostNew's pipeline has sent ahead.
func TestGroupCommitOfCycleAccountsEndsOnTheServer(t *testing.T) {
	f := newFixture(t, nil)
	const timeout = time.Second
	f.app.GroupTimeout = timeout
	release := lockTable(t, f, "ledger.transactions")
	toPending := func(key string) app.CreateTransactionInput {
		return transfer(key, "bank:client", "provider:p-1:pending:cyc-20261227", "1", "USD")
	}

	const n = 3 // the first write's group holds it alone (postOne), the other two wait and go together (WithTx)
	answers := make([]<-chan answer, n)
	for i := range n {
		answers[i] = postAsync(f.ctx, f, toPending(fmt.Sprintf("cyc-hang-%d", i)))
		time.Sleep(50 * time.Millisecond)
	}
	const margin = 3 * time.Second
	for i := range n {
		a, ok := await(answers[i], 2*timeout+margin)
		if !ok {
			release()
			t.Fatalf("write cyc-hang-%d still waiting %s after its group's timeout: the database held it", i, 2*timeout+margin)
		}
		if !errors.Is(a.err, apperr.ErrUnavailable) {
			t.Fatalf("write cyc-hang-%d: %v, want unavailable", i, a.err)
		}
	}
	const waiting = `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`
	testkit.Eventually(t, time.Second, func() bool { return f.count(t, waiting) == 0 },
		"%d of the timed-out group's statements still waiting on the server a second after their callers were answered", n)
	release()
	for i := range n {
		retryPosted(t, f, toPending(fmt.Sprintf("cyc-hang-%d", i)))
	}
	wantBalance(t, f, "provider:p-1:pending:cyc-20261227", "USD", fmt.Sprint(n))
}

// A write queued behind a group the database holds waits, in all, at most
// the group timeout from when it was queued: its own group has what is
// left of it, not a timeout of its own. Before, it waited for the group
// ahead to time out and then for its own group's whole timeout: twice the
// limit.
func TestQueuedWriteWaitsAtMostTheGroupTimeout(t *testing.T) {
	f := newFixture(t, nil)
	const timeout = 2 * time.Second
	f.app.GroupTimeout = timeout
	release := lockTable(t, f, "ledger.transactions")

	first := createAsync(f.ctx, f, "ahead-0") // its group the lock holds
	time.Sleep(200 * time.Millisecond)
	queued := createAsync(f.ctx, f, "behind-0") // waits behind it
	const margin = 800 * time.Millisecond
	a0, ok0 := await(first, timeout+margin)
	a1, ok1 := await(queued, timeout+margin)
	if !ok0 || !ok1 {
		release()
		t.Fatalf("still waiting %s after the group timeout of %s (the group's write answered: %v, the one queued behind it: %v)", margin, timeout, ok0, ok1)
	}
	for _, a := range []answer{a0, a1} {
		if !errors.Is(a.err, apperr.ErrUnavailable) {
			t.Fatalf("%v, want unavailable", a.err)
		}
	}
	if a1.took > timeout+margin {
		t.Fatalf("the write queued behind a held group answered after %s, want within its group timeout of %s from when it was queued", a1.took, timeout)
	}
	t.Logf("ahead-0 after %s, behind-0 after %s", a0.took.Round(time.Millisecond), a1.took.Round(time.Millisecond))
	release()
	retryOnce(t, f, "ahead-0")
	retryOnce(t, f, "behind-0")
	wantBalance(t, f, "renter:r-1:wallet", "USD", "3")
}

// A caller whose own context ends while its group commit runs (the caller
// that started the group) or waits behind it is answered its context's
// error at once, not when the database lets the group go. The running
// group still commits its write once the database lets it, and a retry
// under the same idempotency key answers that transaction, posted once; a
// write whose caller left while it queued is never posted, and its retry
// posts it once.
func TestGroupCommitCallerGoneAnsweredPromptly(t *testing.T) {
	f := newFixture(t, nil)
	f.app.GroupTimeout = 20 * time.Second // far above the callers' deadlines
	release := lockTable(t, f, "ledger.transactions")

	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(f.ctx, deadline)
	defer cancel()
	first := createAsync(ctx, f, "gone-0") // runs the group the lock holds
	time.Sleep(50 * time.Millisecond)
	ctx2, cancel2 := context.WithCancel(f.ctx)
	second := createAsync(ctx2, f, "gone-1") // waits behind it
	time.Sleep(50 * time.Millisecond)
	cancel2()

	const margin = 2 * time.Second
	a0, ok0 := await(first, deadline+margin)
	a1, ok1 := await(second, margin)
	if !ok0 || !ok1 {
		release()
		t.Fatalf("callers gone still waiting %s later (the group's write answered: %v, the one queued behind it: %v)", margin, ok0, ok1)
	}
	if !errors.Is(a0.err, context.DeadlineExceeded) || a0.took > deadline+margin {
		t.Fatalf("the group's first caller, past its deadline: %v after %s, want deadline exceeded promptly", a0.err, a0.took)
	}
	if st, _ := status.FromError(apperr.ToStatus(a0.err)); st.Code() != codes.DeadlineExceeded {
		t.Fatalf("answered %s, want DeadlineExceeded", st.Code())
	}
	if !errors.Is(a1.err, context.Canceled) || a1.took > margin {
		t.Fatalf("the caller queued behind, cancelled: %v after %s, want canceled promptly", a1.err, a1.took)
	}
	t.Logf("gone-0: %v after %s; gone-1: %v after %s", a0.err, a0.took.Round(time.Millisecond), a1.err, a1.took.Round(time.Millisecond))

	// The lock released, the running group commits what its caller gave
	// up on; a retry answers it, posted once. The retry queues behind the
	// write that queued and was left: that one was not posted.
	release()
	retryOnce(t, f, "gone-0")
	if c := f.count(t, `select count(*) from ledger.transactions where idempotency_key = 'gone-1'`); c != 0 {
		t.Fatalf("gone-1, whose caller left while it queued, posted %d times before its retry", c)
	}
	retryOnce(t, f, "gone-1")
	wantBalance(t, f, "renter:r-1:wallet", "USD", "3")
}

// GPUBILL_LEDGER_GROUP_COMMIT_TIMEOUT sets the group commit's bound; one
// that is not a positive duration stops the service's start.
func TestGroupCommitTimeoutFromEnv(t *testing.T) {
	pool, _ := testkit.NewPool(t)
	ctx := testkit.Context(t)
	d := svc.Deps{Pool: pool, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Clock: clock.System{}, Calendar: cycles.Default()}
	for _, c := range []struct {
		env  string
		want time.Duration
		bad  bool
	}{
		{"", 0, false}, // the default (app.DefaultGroupTimeout)
		{"250ms", 250 * time.Millisecond, false},
		{"0s", 0, true},
		{"-1s", 0, true},
		{"ten seconds", 0, true},
		{"24h", 24 * time.Hour, false},
		{"720h", 0, true}, // past statement_timeout's int32 of milliseconds (~596 h): every grouped write failed back to one at a time
	} {
		t.Setenv("GPUBILL_LEDGER_GROUP_COMMIT_TIMEOUT", c.env)
		s, err := ledger.New(ctx, d)
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "GPUBILL_LEDGER_GROUP_COMMIT_TIMEOUT") {
				t.Fatalf("%q: %v, want the setting refused", c.env, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.env, err)
		}
		if got := s.App().GroupTimeout; got != c.want {
			t.Fatalf("%q: group timeout %s, want %s", c.env, got, c.want)
		}
	}
}
