package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SessionLock is an advisory lock held by one session at a time
// (pg_try_advisory_lock(hashtext(Key))): one replica does the work it
// guards, and a replica that dies lets it go with its connection.
type SessionLock struct {
	Pool *pgxpool.Pool
	Key  string
}

// TryLock takes the lock on a connection of its own if no session holds
// it (ok false if one does); release frees it and the connection. A
// release whose unlock fails closes the connection rather than return it
// to the pool: back in the pool its session, and the lock, would live on,
// and every later TryLock, of every replica, would find the lock held.
func (l SessionLock) TryLock(ctx context.Context) (release func(), ok bool, err error) {
	conn, err := l.Pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", l.Key, err)
	}
	if err := conn.QueryRow(ctx, `select pg_try_advisory_lock(hashtext($1))`, l.Key).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, fmt.Errorf("lock %s: %w", l.Key, err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return func() {
		defer conn.Release()
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), UnlockTimeout)
		defer cancel()
		if _, err := conn.Exec(bg, `select pg_advisory_unlock(hashtext($1))`, l.Key); err != nil {
			_ = conn.Conn().Close(bg) // its session, and the lock, end with it; Release then drops the closed connection
		}
	}, true, nil
}

// UnlockTimeout bounds a release's unlock: on a connection the network has
// silently cut, it would otherwise wait for the kernel to give up on its
// retransmissions (~15 minutes), and the pass that released with it
// (a bank inbox's, a tax run's) with it. Past it the connection is closed;
// the server ends the session, and the lock, when its keepalives find the
// peer gone (pkg/pg's tcp_keepalives_*, ~25 s).
var UnlockTimeout = 10 * time.Second

// Lock takes the lock, trying again every poll until ctx ends; it holds no
// connection while it waits.
func (l SessionLock) Lock(ctx context.Context, poll time.Duration) (release func(), err error) {
	for {
		release, ok, err := l.TryLock(ctx)
		if err != nil || ok {
			return release, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for lock %s: %w", l.Key, context.Cause(ctx))
		case <-time.After(poll):
		}
	}
}
