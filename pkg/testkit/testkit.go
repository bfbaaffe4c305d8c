// Package testkit gives every test its own PostgreSQL database and its own
// in-process JetStream server, so tests run in parallel against real
// infrastructure, and an Eventually helper instead of bare sleeps.
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/pg"
)

// BaseDSN is the server tests create their databases on
// (TEST_DATABASE_URL, default the local trust-auth server).
func BaseDSN() string {
	if v := os.Getenv("TEST_DATABASE_URL"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewDatabase creates a fresh database, dropped when the test ends, and
// returns its DSN.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return NewDatabaseOn(t, BaseDSN())
}

// NewDatabaseOn creates a fresh database on the server at baseDSN (one of
// NewCluster or KeptCluster), dropped when the test ends, and returns its DSN.
func NewDatabaseOn(t testing.TB, baseDSN string) string {
	t.Helper()
	ctx := context.Background()
	base, err := url.Parse(baseDSN)
	if err != nil {
		t.Fatal(err)
	}
	name := "gpubill_test_" + randomSuffix()
	admin, err := pgx.Connect(ctx, base.String())
	if err != nil {
		t.Fatalf("connect to test postgres %s: %v (is PostgreSQL running? .ci/run starts it)", base.Redacted(), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "create database "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base.String())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "drop database if exists "+name+" with (force)"); err != nil {
			t.Logf("test database %s left behind: %v", name, err)
		}
	})
	u := *base
	u.Path = "/" + name
	return u.String()
}

// NewPool returns a pool on a fresh database.
func NewPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := NewDatabase(t)
	pool, err := pg.Open(context.Background(), dsn, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, dsn
}

// NewMigratedPool returns a pool on a fresh database holding schema,
// migrated by fsys (a service's migrations.For).
func NewMigratedPool(t testing.TB, schema string, fsys fs.FS) *pgxpool.Pool {
	t.Helper()
	pool, _ := NewPool(t)
	if err := pg.Migrate(context.Background(), pool, schema, fsys); err != nil {
		t.Fatal(err)
	}
	return pool
}

// JetStream is a test's own NATS server.
type JetStream struct {
	URL  string
	Conn *nats.Conn
	JS   jetstream.JetStream
}

// NewJetStream starts an in-process JetStream server with a temp store,
// shut down when the test ends.
func NewJetStream(t testing.TB) *JetStream {
	t.Helper()
	ns, err := natsx.RunEmbedded("127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, js, err := natsx.Connect(ns.ClientURL(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &JetStream{URL: ns.ClientURL(), Conn: nc, JS: js}
}

// Eventually polls cond every 20 ms until it is true or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			msg := "condition not met"
			if len(msgAndArgs) > 0 {
				if f, ok := msgAndArgs[0].(string); ok {
					msg = fmt.Sprintf(f, msgAndArgs[1:]...)
				}
			}
			t.Fatalf("eventually (%s): %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Context returns a context cancelled when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// Name returns a short identifier unique to this test run (for stream or
// consumer names when a test shares a server).
func Name(prefix string) string {
	return strings.ToUpper(prefix) + "_" + randomSuffix()
}
