package pg_test

import (
	"context"
	"net/url"
	"os"
	"testing"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// Every pool asks the server to drop the session of a client it can no
// longer reach within about 30 s (an outbox relay's lock held by a
// partitioned leader kept every other replica from publishing for the OS
// default, 2 h 11 min): the server takes the parameters on a TCP
// connection, and DATABASE_URL overrides them. On a Unix socket the server
// ignores them (0).
func TestPoolsBoundADeadClientsSession(t *testing.T) {
	ctx := context.Background()
	show := func(dsn string) map[string]string {
		t.Helper()
		pool, err := pg.OpenReadOnly(ctx, dsn, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		got := map[string]string{}
		for _, k := range []string{"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout"} {
			var v string
			if err := pool.QueryRow(ctx, "show "+k).Scan(&v); err != nil {
				t.Fatal(err)
			}
			got[k] = v
		}
		return got
	}
	u, err := url.Parse(testkit.BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3", "tcp_user_timeout": "30000"}
	if got := show(u.String()); !equal(got, want) {
		t.Errorf("over TCP (%s): %v, want %v", u.Host, got, want)
	}
	q := u.Query()
	q.Set("tcp_keepalives_idle", "60")
	u.RawQuery = q.Encode()
	want["tcp_keepalives_idle"] = "60"
	if got := show(u.String()); !equal(got, want) {
		t.Errorf("DATABASE_URL setting tcp_keepalives_idle=60: %v, want %v", got, want)
	}
	if _, err := os.Stat("/var/run/postgresql/.s.PGSQL.5432"); err == nil {
		u.RawQuery = "host=/var/run/postgresql&sslmode=disable"
		u.Host = ""
		t.Logf("over a Unix socket (the server ignores them there): %v", show(u.String()))
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
