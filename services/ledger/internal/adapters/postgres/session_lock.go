package postgres

import (
	"context"
	"fmt"

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
// it (ok false if one does); release frees it and the connection.
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
		conn.Exec(context.WithoutCancel(ctx), `select pg_advisory_unlock(hashtext($1))`, l.Key) //nolint:errcheck // a lock not released ends with its session
	}, true, nil
}
