// Package stmtcache keeps each SQLite connection's prepared statements for
// the Temporal dev server (see Install).
package stmtcache

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	_ "unsafe" // go:linkname

	_ "modernc.org/sqlite" // registers "sqlite"
)

// The Temporal server's SQLite store runs every statement through
// database/sql without preparing it, and modernc's driver then compiles the
// SQL text anew on each call: 23 % of the server's CPU while settlement
// closed a cycle (sqlite3Prepare under conn.exec and conn.query). The
// server holds ONE connection to SQLite, so that time also queues every
// other store call behind it.
//
// cachingDriver wraps modernc's driver under the same name ("sqlite": the
// server's SQLite plugin opens that name and nothing else) and keeps each
// connection's prepared statements by SQL text, reusing them across calls
// (modernc resets a prepared statement after each use). A statement still
// in use (rows not yet closed when the same SQL runs again on the
// connection) is not shared: that call prepares its own, as before.
//
// Go lets only the standard library's own code replace a registered driver,
// so the registry is reached with go:linkname (built with
// -ldflags=-checklinkname=0, see the Makefile), once, before the server
// opens anything.

//go:linkname sqlDrivers database/sql.drivers
var sqlDrivers map[string]driver.Driver

// statementCacheMax bounds a connection's cache (the server uses a few
// hundred distinct statements; visibility queries with user filters vary).
const statementCacheMax = 2048

// Install wraps the registered "sqlite" driver with the statement cache
// (idempotent). Call it before anything opens a database.
func Install() error {
	inner, ok := sqlDrivers["sqlite"]
	if !ok {
		return errors.New("statement cache: no sqlite driver registered")
	}
	if _, done := inner.(cachingDriver); done {
		return nil
	}
	sqlDrivers["sqlite"] = cachingDriver{inner: inner}
	if _, err := sql.Open("sqlite", ":memory:"); err != nil { // the name still resolves
		return err
	}
	return nil
}

type cachingDriver struct{ inner driver.Driver }

func (d cachingDriver) Open(name string) (driver.Conn, error) {
	c, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	inner, ok := c.(innerConn)
	if !ok {
		return c, nil // not the driver this was written for: no cache
	}
	return &cachingConn{inner: inner, stmts: map[string]*cachedStmt{}}, nil
}

// innerConn is what modernc's connection implements and the cache uses.
type innerConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

type cachedStmt struct {
	st    driver.Stmt
	inUse bool
}

// cachingConn is used by one goroutine at a time (database/sql's rule).
type cachingConn struct {
	inner innerConn
	stmts map[string]*cachedStmt
}

func (c *cachingConn) Prepare(query string) (driver.Stmt, error) { return c.inner.Prepare(query) }
func (c *cachingConn) Begin() (driver.Tx, error)                 { return c.inner.Begin() } //nolint:staticcheck // driver.Conn
func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.inner.BeginTx(ctx, opts)
}
func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.inner.PrepareContext(ctx, query)
}
func (c *cachingConn) Ping(ctx context.Context) error         { return c.inner.Ping(ctx) }
func (c *cachingConn) ResetSession(ctx context.Context) error { return c.inner.ResetSession(ctx) }
func (c *cachingConn) IsValid() bool                          { return c.inner.IsValid() }

func (c *cachingConn) Close() error {
	for q, s := range c.stmts {
		_ = s.st.Close()
		delete(c.stmts, q)
	}
	return c.inner.Close()
}

// timerTasksSQL is the Temporal server's read of a page of timer tasks
// (getTimerTasksQuery of its SQLite plugin, spaces collapsed). SQLite
// cannot take a lower bound for the primary key's visibility_timestamp
// from its OR, so it scans the shard's timers from the first: every
// timer task not yet deleted below the page, a number that grew with the
// cycle (a 100 000-provider close spent 0.7 % of the server's CPU in this
// read 40 s in and 17.7 % four minutes later; perf, DEVELOPERS.md).
// boundedTimerTasksSQL is the same query with the bound the OR implies
// (both of its branches have visibility_timestamp at least the smaller of
// ?2 and ?4, which Temporal passes equal), which the index range uses.
const (
	timerTasksSQL = "SELECT visibility_timestamp, task_id, data, data_encoding FROM timer_tasks WHERE shard_id = ? " +
		"AND ((visibility_timestamp >= ? AND task_id >= ?) OR visibility_timestamp > ?) AND visibility_timestamp < ? " +
		"ORDER BY visibility_timestamp,task_id LIMIT ?"
	boundedTimerTasksSQL = "SELECT visibility_timestamp, task_id, data, data_encoding FROM timer_tasks WHERE shard_id = ?1 " +
		"AND visibility_timestamp >= min(?2, ?4) " +
		"AND ((visibility_timestamp >= ?2 AND task_id >= ?3) OR visibility_timestamp > ?4) AND visibility_timestamp < ?5 " +
		"ORDER BY visibility_timestamp,task_id LIMIT ?6"
)

// rewrite is the statement run for query: the bounded timer read for
// Temporal's, query itself for every other.
func rewrite(query string) string {
	if strings.HasPrefix(query, "SELECT visibility_timestamp, task_id") && strings.Join(strings.Fields(query), " ") == timerTasksSQL {
		return boundedTimerTasksSQL
	}
	return query
}

// stmt returns the connection's prepared statement for query, marked in
// use, or nil when it is in use already (the caller then runs uncached).
func (c *cachingConn) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if s, ok := c.stmts[query]; ok {
		if s.inUse {
			return nil, nil
		}
		s.inUse = true
		return s, nil
	}
	if len(c.stmts) >= statementCacheMax {
		for q, s := range c.stmts {
			if !s.inUse {
				_ = s.st.Close()
				delete(c.stmts, q)
			}
		}
	}
	st, err := c.inner.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s := &cachedStmt{st: st, inUse: true}
	c.stmts[query] = s
	return s, nil
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.inner.ExecContext(ctx, query, args)
	}
	res, err := s.st.(driver.StmtExecContext).ExecContext(ctx, args)
	c.release(query, s, err)
	return res, err
}

// release returns a statement to the cache, or drops it after an error
// (a constraint failure, an interrupt) so the next call prepares afresh.
func (c *cachingConn) release(query string, s *cachedStmt, err error) {
	s.inUse = false
	if err != nil {
		_ = s.st.Close()
		delete(c.stmts, query)
	}
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	query = rewrite(query)
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.inner.QueryContext(ctx, query, args)
	}
	rows, err := s.st.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		c.release(query, s, err)
		return nil, err
	}
	return &cachedRows{Rows: rows, c: c, query: query, s: s}, nil
}

// cachedRows returns its statement to the cache when closed.
type cachedRows struct {
	driver.Rows
	c     *cachingConn
	query string
	s     *cachedStmt
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.c.release(r.query, r.s, err)
	return err
}
