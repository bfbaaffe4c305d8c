// Package pg opens PostgreSQL pools and runs each service's migrations with
// goose at start-up. Only a database's owner creates it (Open: gpubill dev, a
// service's own binary); read-only commands use OpenReadOnly, which never
// creates anything.
package pg

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
)

// poolSizeDefault bounds connections per service pool; 2 cores here, and
// every hot path batches, so a few connections suffice.
const poolSizeDefault = 8

// sessionTCPDefaults make the server drop the session of a client it can no
// longer reach (its node partitioned: no FIN, no RST) within about 30 s:
// probes after 10 s idle, 5 s apart, 3 unanswered; data unacknowledged for
// 30 s. With the OS defaults (7200 s + 9 × 75 s) such a session kept its
// locks, an outbox relay's advisory lock among them, for 2 h 11 min. The
// server applies them to TCP connections only (a Unix socket shows 0). A
// parameter DATABASE_URL sets (?tcp_keepalives_idle=60) or options
// (PGOPTIONS) names is left as given.
var sessionTCPDefaults = map[string]string{
	"tcp_keepalives_idle":     "10",
	"tcp_keepalives_interval": "5",
	"tcp_keepalives_count":    "3",
	"tcp_user_timeout":        "30000", // ms
}

// adminDatabase is the maintenance database EnsureDatabase creates a missing
// database from.
const adminDatabase = "postgres"

// EnsureDatabase creates the database named in dsn (a URL or keyword/value
// string) if it does not exist. It connects to that database first and
// turns to the maintenance database "postgres" on the same server only when
// the server says it is missing: behind a pooler that lists only the
// service's database, or with CONNECT on "postgres" revoked, an existing
// database still opens. Errors name the server, database and user, never
// the DSN itself, which may hold a password.
func EnsureDatabase(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err) // pgx redacts the password
	}
	if cfg.Database == "" {
		return errors.New("DATABASE_URL names no database")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	if !HasCode(err, "3D000") { // invalid_catalog_name: the database is missing
		return fmt.Errorf("connect to %s: %w", describe(cfg), err)
	}
	return createDatabase(ctx, cfg)
}

// createDatabase creates cfg's database from the maintenance database, as
// cfg's user; one created concurrently (another replica) is success.
func createDatabase(ctx context.Context, cfg *pgx.ConnConfig) error {
	admin := cfg.Copy()
	admin.Database = adminDatabase
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("database %q is missing; connect to %s to create it: %w", cfg.Database, describe(admin), err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "create database "+pgx.Identifier{cfg.Database}.Sanitize())
	if HasCode(err, "42P04") { // duplicate_database: created concurrently
		return nil
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", describe(cfg), err)
	}
	return nil
}

// describe names cfg's database, server and user for an error message,
// leaving out the password.
func describe(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("database %q on %s:%d as %q", cfg.Database, cfg.Host, cfg.Port, cfg.User)
}

// ErrNoDatabase and ErrNoSchema: what a read-only command needs is missing,
// typically a mistyped DATABASE_URL.
var (
	ErrNoDatabase = errors.New("database does not exist")
	ErrNoSchema   = errors.New("schema not found")
)

// Open returns a pool on the database, creating the database if it is
// missing: for the database's owner (gpubill dev, a service at start-up).
func Open(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	if err := EnsureDatabase(ctx, dsn); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	return open(ctx, cfg, maxConns)
}

// OpenReadOnly returns a pool on an existing database for a command that
// only reads (ledger verify, reports): it never creates the database (a
// missing one is ErrNoDatabase), and every session is read-only, so the
// command cannot write even by mistake.
func OpenReadOnly(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	return openExisting(ctx, dsn, maxConns, true)
}

// OpenExisting returns a pool on an existing database for a maintenance
// command that writes (ledger checkpoints rebuild): it never creates the
// database (a missing one is ErrNoDatabase).
func OpenExisting(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	return openExisting(ctx, dsn, maxConns, false)
}

func openExisting(ctx context.Context, dsn string, maxConns int32, readOnly bool) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if readOnly {
		cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	pool, err := open(ctx, cfg, maxConns)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
		return nil, fmt.Errorf("%w: %q on %s:%d (check DATABASE_URL)", ErrNoDatabase, cfg.ConnConfig.Database, cfg.ConnConfig.Host, cfg.ConnConfig.Port)
	}
	return pool, err
}

// RequireSchema fails with ErrNoSchema unless the service's migrations have
// run in the database (its goose version table exists).
func RequireSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var found bool
	err := pool.QueryRow(ctx, `select to_regclass($1) is not null`, pgx.Identifier{schema, "goose_db_version"}.Sanitize()).Scan(&found)
	if err != nil {
		return fmt.Errorf("look for schema %s: %w", schema, err)
	}
	if !found {
		return fmt.Errorf("%w: %s has not been migrated in database %q (check DATABASE_URL; the %s service or gpubill dev creates it)",
			ErrNoSchema, schema, pool.Config().ConnConfig.Database, schema)
	}
	return nil
}

func open(ctx context.Context, cfg *pgxpool.Config, maxConns int32) (*pgxpool.Pool, error) {
	if maxConns <= 0 {
		maxConns = poolSizeDefault
	}
	cfg.MaxConns = maxConns
	for k, v := range sessionTCPDefaults {
		if _, set := cfg.ConnConfig.RuntimeParams[k]; !set && !strings.Contains(cfg.ConnConfig.RuntimeParams["options"], k) {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return pool, nil
}

// Migrate applies the migrations in fsys (files NNNN_slug.sql) to the
// service's own schema, keeping goose's version table inside that schema so
// services migrate independently. Every service migrates at start, so it
// refuses (ErrRestorePending) a database a gpubill restore did not finish
// readying: a service started there would run on the snapshot as loaded.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string, fsys fs.FS) error {
	if err := RestoreFinished(ctx, pool); err != nil {
		return fmt.Errorf("database %q: %w", pool.Config().ConnConfig.Database, err)
	}
	// Serialise concurrent migrators of the same schema (several processes:
	// a Deployment's replicas start together), the schema's creation
	// included: create schema if not exists is not safe concurrently, two
	// sessions can both find it missing and one fails on pg_namespace's
	// unique index (23505).
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	lockKey := "gpubill.migrate." + schema
	if err := lockMigrations(ctx, conn, lockKey); err != nil {
		return fmt.Errorf("migration lock of %s: %w", schema, err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `select pg_advisory_unlock(hashtext($1))`, lockKey) //nolint:errcheck // the migration has succeeded or failed already: a lock not released ends with its session
	if _, err := conn.ExecContext(ctx, "create schema if not exists "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	return migrate(ctx, db, schema, fsys)
}

// migrationLockPoll is how long a migrator waiting for another (a replica
// started with it) sleeps between two tries of the migration lock.
const migrationLockPoll = 100 * time.Millisecond

// lockMigrations takes the session advisory lock key on conn, trying it
// every migrationLockPoll until it is free or ctx ends. It never waits
// inside pg_advisory_lock: a statement blocked there holds a snapshot, and
// create index concurrently (a NO TRANSACTION migration: ledger/0033,
// metering/0003) waits for every older snapshot in the database to end.
// The holder's build waited for the waiter's snapshot, the waiter for the
// lock the holder keeps on another, idle, connection: a cycle Postgres
// does not see, and both replicas hung until killed, leaving the index
// invalid. Between tries conn is idle outside any transaction and holds no
// snapshot. The wait has no bound of its own: the migration it waits for
// may build an index on a large table; ctx (the start-up probe) bounds it.
func lockMigrations(ctx context.Context, conn *sql.Conn, key string) error {
	for {
		var locked bool
		if err := conn.QueryRowContext(ctx, `select pg_try_advisory_lock(hashtext($1))`, key).Scan(&locked); err != nil {
			return err
		}
		if locked {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for another migrator: %w", context.Cause(ctx))
		case <-time.After(migrationLockPoll):
		}
	}
}

func migrate(ctx context.Context, db *sql.DB, schema string, fsys fs.FS) error {
	store, err := database.NewStore(database.DialectPostgres, schema+".goose_db_version")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider("", db, fsys, goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations for %s: %w", schema, err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", schema, err)
	}
	return nil
}

// CopyUnlessRepeated copies stream (a binary COPY stream, sql its COPY
// statement) inside a savepoint of tx, and reports whether it did: a row
// that a unique key refuses rolls the savepoint back and it returns false
// with no error, for the caller's path that skips or merges repeats. COPY
// writes a page of rows per heap WAL record and checks no key before each
// row, so it is the cheap path for a batch that usually repeats nothing.
func CopyUnlessRepeated(ctx context.Context, tx pgx.Tx, stream []byte, sql string) (bool, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, err
	}
	_, err = sp.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(stream), sql)
	if IsUniqueViolation(err) {
		return false, sp.Rollback(ctx)
	}
	if err != nil {
		return false, err
	}
	return true, sp.Commit(ctx)
}

// IsUniqueViolation reports whether err is a unique-constraint violation.
func IsUniqueViolation(err error) bool { return HasCode(err, "23505") }

// HasCode reports whether err is a Postgres error of SQLSTATE code.
func HasCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// TxBeginner is a pool or one connection.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// InSnapshot runs fn in one REPEATABLE READ READ ONLY transaction: every
// statement fn sends reads the database as it stood at the first, so a
// check spanning statements (ledger verify: the chain, then the postings,
// then the balances) never sees a transaction committed between two of
// them. Read through a pool, each statement was its own snapshot.
func InSnapshot(ctx context.Context, db TxBeginner, fn func(pgx.Tx) error) error {
	return inTx(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// InTx runs fn in a READ COMMITTED transaction, committing if fn returns nil.
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return inTx(ctx, pool, pgx.TxOptions{}, fn)
}

// inTx runs fn in a transaction of opts, committing if fn returns nil.
func inTx(ctx context.Context, db TxBeginner, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
