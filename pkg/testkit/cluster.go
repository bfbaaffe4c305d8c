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
	var cred *syscall.Credential
	if os.Geteuid() == 0 { // PostgreSQL's tools refuse to run as root
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
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	run := func(name string, args ...string) error {
		cmd := exec.Command(filepath.Join(PGBinDir, name), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %v: %w\n%s", name, args, err, out)
		}
		return nil
	}
	if err := run("initdb", "-D", dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatal(err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := run("pg_ctl", "start", "-D", dir, "-w", "-l", filepath.Join(dir, "log"), "-o",
		fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", port, dir)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := run("pg_ctl", "stop", "-D", dir, "-m", "fast", "-w"); err != nil {
			t.Errorf("stop the test's PostgreSQL: %v", err)
		}
	})
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d", port)
}
