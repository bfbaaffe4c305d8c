package pg_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// One session holds a SessionLock at a time: a second TryLock, on another
// pool as another replica's, finds it held; Lock waits for its release,
// holding no connection meanwhile, and gives up with its context.
func TestSessionLockOneHolderAtATime(t *testing.T) {
	ctx := context.Background()
	open := func() pg.SessionLock {
		pool, err := pg.Open(ctx, testkit.BaseDSN(), 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pg.SessionLock{Pool: pool, Key: "gpubill.test.session_lock." + t.Name()}
	}
	a, b := open(), open()
	release, ok, err := a.TryLock(ctx)
	if err != nil || !ok {
		t.Fatalf("first TryLock: %v, %v; want the lock", ok, err)
	}
	if _, ok, err := b.TryLock(ctx); err != nil || ok {
		t.Fatalf("second replica's TryLock while held: %v, %v; want not taken", ok, err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.Lock(short, 20*time.Millisecond); err == nil {
		t.Fatal("Lock while held answered before its context ended; want it to wait")
	}
	if n := b.Pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("a waiting Lock holds %d connections; want none", n)
	}
	go func() { time.Sleep(100 * time.Millisecond); release() }()
	start := time.Now()
	release2, err := b.Lock(ctx, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatalf("Lock answered after %s, before the holder released", time.Since(start))
	}
	release2()
	release3, ok, err := a.TryLock(ctx)
	if err != nil || !ok {
		t.Fatalf("TryLock after both released: %v, %v; want the lock", ok, err)
	}
	release3() // a pool closes only once its connections are back
}

// A release on a connection the network has silently cut returns within
// UnlockTimeout: the unlock used to wait for the kernel to give up on its
// retransmissions (~15 minutes), the pass that released with it stalled
// that long.
func TestSessionLockReleaseOnACutConnectionReturns(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(testkit.BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	addr, hole := testkit.BlackholeProxy(t, u.Host)
	u.Host = addr
	pool, err := pg.Open(ctx, u.String(), 2)
	if err != nil {
		t.Fatal(err)
	}
	// Closed on success only: a pool closes once its connections are back,
	// and a release still waiting never gives its own back.
	was := pg.UnlockTimeout
	pg.UnlockTimeout = time.Second
	defer func() { pg.UnlockTimeout = was }()
	// A key of this run's own: a run stopped while its release waited
	// leaves its lock to the server's keepalives (~25 s).
	l := pg.SessionLock{Pool: pool, Key: fmt.Sprintf("gpubill.test.session_lock.%s.%d", t.Name(), time.Now().UnixNano())}
	release, ok, err := l.TryLock(ctx)
	if err != nil || !ok {
		t.Fatalf("TryLock: %v, %v; want the lock", ok, err)
	}
	hole.Store(true)
	done := make(chan struct{})
	start := time.Now()
	go func() { release(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("release on a cut connection still waiting after %s; want it back within UnlockTimeout (%s)", time.Since(start).Round(time.Second), pg.UnlockTimeout)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("release on a cut connection took %s; want about UnlockTimeout (%s)", d.Round(time.Millisecond), pg.UnlockTimeout)
	}
	pool.Close()
}
