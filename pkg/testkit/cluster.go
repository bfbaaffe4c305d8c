package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// PGBinDir holds the PostgreSQL server binaries tests start clusters with.
const PGBinDir = "/usr/lib/postgresql/15/bin"

// NewCluster initdb's and starts a PostgreSQL cluster of the test's own on
// a free port (fsync off; stopped and removed at cleanup) and returns its
// base URL without a database ("postgres://postgres@127.0.0.1:PORT"). For
// tests that must not share the server's transaction-id horizon or counter
// with other tests (the journal's hash chain waits for every older
// transaction on the server to end).
func NewCluster(t testing.TB) string {
	t.Helper()
	// Not under t.TempDir(): its parents are private to root, and the
	// server runs as postgres.
	dir, err := os.MkdirTemp("", "gpubill-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("cluster directory %s left behind: %v", dir, err)
		}
	})
	return startCluster(t, dir, "fsync=off")
}

// KeptCluster starts the PostgreSQL cluster kept in dir, initdb'ing it there
// first when dir holds none, on a free port with the given settings
// ("name=value", passed as -c), and stops it when the test ends, leaving dir
// (and its databases) for the next run. It returns the base URL without a
// database. For benchmarks whose fixture is too large to rebuild every run
// and whose bulk load must not hold back the shared server's transaction
// horizon (see NewCluster). A server left running by a killed run is
// stopped first.
func KeptCluster(t testing.TB, dir string, settings ...string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		if !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	} else if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); err == nil {
		// pg_ctl stop fails when the pid is stale; start then copes with it.
		if err := pgCommand(t, "pg_ctl", "stop", "-D", dir, "-m", "fast", "-w"); err != nil {
			t.Logf("no server left running in %s: %v", dir, err)
		}
	}
	return startCluster(t, dir, settings...)
}

// pgCommand runs one of PostgreSQL's server tools (as postgres when this
// process is root: they refuse to run as root).
func pgCommand(t testing.TB, name string, args ...string) error {
	t.Helper()
	cmd := exec.Command(filepath.Join(PGBinDir, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: PostgresCred(t)}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %w\n%s", name, args, err, out)
	}
	return nil
}

// PostgresCred is the postgres user's credential when this process is root
// (initdb, pg_ctl and postgres refuse root), else nil.
func PostgresCred(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root and no postgres user: %v", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		t.Fatalf("postgres uid %q: %v", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		t.Fatalf("postgres gid %q: %v", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// startCluster initdb's dir unless it holds a cluster, starts it on a free
// port and stops it at cleanup.
func startCluster(t testing.TB, dir string, settings ...string) string {
	t.Helper()
	if cred := PostgresCred(t); cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); os.IsNotExist(err) {
		if err := pgCommand(t, "initdb", "-D", dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
			t.Fatal(err)
		}
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200", port, dir)
	for _, s := range settings {
		opts += " -c " + s
	}
	if err := pgCommand(t, "pg_ctl", "start", "-D", dir, "-w", "-t", "600", "-l", filepath.Join(dir, "log"), "-o", opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pgCommand(t, "pg_ctl", "stop", "-D", dir, "-m", "fast", "-w"); err != nil {
			t.Errorf("stop the test's PostgreSQL: %v", err)
		}
	})
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d", port)
}
