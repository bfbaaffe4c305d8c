package testkit

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/tempdev"
)

// TemporalPG is a test's own Temporal server on PostgreSQL: `temporal
// gpubill-server` (bin/temporal, its own process) with persistence and SQL
// visibility in two databases of the test server (BaseDSN), made and
// schema'd by `temporal gpubill-sql-tool` and dropped when the test ends.
type TemporalPG struct {
	Address string           // frontend host:port
	PG      tempdev.Postgres // where its state is
	bin     string
	config  string
	log     string
	srv     *tempdev.Server
}

// NewTemporalPG creates the databases, sets up their schema with Temporal's
// tool and starts the server. The frontend accepts TCP slightly before the
// default namespace is registered: dial with retries.
func NewTemporalPG(t testing.TB, pg tempdev.Postgres) *TemporalPG {
	t.Helper()
	bin, err := tempdev.FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	base, err := url.Parse(BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	pg.Host = base.Hostname()
	pg.Port = 5432
	if p := base.Port(); p != "" {
		if pg.Port, err = strconv.Atoi(p); err != nil {
			t.Fatalf("port of %s: %v", base.Redacted(), err)
		}
	}
	pg.User = base.User.Username()
	pg.Password, _ = base.User.Password()
	suffix := randomSuffix()
	pg.Database, pg.VisibilityDatabase = "gpubill_test_temporal_"+suffix, "gpubill_test_temporal_vis_"+suffix
	t.Cleanup(func() { // after the server is stopped (cleanups run last first)
		c, err := pgx.Connect(context.Background(), base.String())
		if err != nil {
			t.Logf("Temporal's test databases %s, %s left behind: %v", pg.Database, pg.VisibilityDatabase, err)
			return
		}
		defer c.Close(context.Background())
		for _, db := range []string{pg.Database, pg.VisibilityDatabase} {
			if _, err := c.Exec(context.Background(), "drop database if exists "+db+" with (force)"); err != nil {
				t.Logf("Temporal's test database %s left behind: %v", db, err)
			}
		}
	})
	var toolLog bytes.Buffer
	if err := tempdev.SetupPostgres(Context(t), bin, pg, &toolLog); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf, addr, err := tempdev.PostgresConfig(pg, "127.0.0.1", 0, "warn")
	if err != nil {
		t.Fatal(err)
	}
	p := &TemporalPG{Address: addr, PG: pg, bin: bin, config: filepath.Join(dir, "temporal.yaml"), log: filepath.Join(dir, "temporal.log")}
	if err := os.WriteFile(p.config, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			p.logTail(t)
		}
	})
	p.Start(t)
	return p
}

// Start starts the server on its databases and ports (again, after Kill).
func (p *TemporalPG) Start(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := tempdev.StartServer(Context(t), p.bin, p.config, p.Address, f)
	if err != nil {
		_ = f.Close()
		p.logTail(t)
		t.Fatal(err)
	}
	p.srv = srv
	t.Cleanup(func() {
		srv.Stop()
		if err := f.Close(); err != nil {
			t.Errorf("temporal log: %v", err)
		}
	})
}

// Kill ends the server with SIGKILL and waits until it is gone.
func (p *TemporalPG) Kill(t testing.TB) {
	t.Helper()
	if err := p.srv.Kill(); err != nil {
		t.Fatalf("kill temporal server: %v", err)
	}
}

// DSN is the URL of one of the server's databases on the test server.
func (p *TemporalPG) DSN(t testing.TB, db string) string {
	t.Helper()
	u, err := url.Parse(BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}

// logTail logs the last lines the server wrote (start-up failures, crashes).
func (p *TemporalPG) logTail(t testing.TB) {
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Logf("temporal log: %v", err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("temporal server log (%s), last lines:\n%s", p.log, strings.Join(lines, "\n"))
}
