package backup

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// recordingTool writes a fake PostgreSQL client tool into bin that records
// its arguments and PGPASSWORD in record, then fails (the test needs
// nothing it would have written).
func recordingTool(t *testing.T, bin, name, record string) {
	t.Helper()
	script := "#!/bin/sh\n" +
		`for a in "$@"; do echo "arg $a"; done > "` + record + "\"\n" +
		`echo "PGPASSWORD=${PGPASSWORD-unset}" >> "` + record + "\"\n" +
		"exit 1\n"
	if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
}

// withPassword is dsn carrying password (the test server trusts every
// connection, so it is sent and ignored).
func withPassword(t *testing.T, dsn, password string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

// pg_dump and pg_restore get DATABASE_URL's password in PGPASSWORD, not on
// their command line, where ps shows it to every user of the host for as
// long as the dump runs.
func TestDumpAndRestoreKeepThePasswordOffTheCommandLine(t *testing.T) {
	t.Parallel()
	const password = "s3cr3t-pass"
	ctx := testkit.Context(t)
	pool, dsn := testkit.NewPool(t)
	if err := pg.Migrate(ctx, pool, "ledger", migrations.For("ledger")); err != nil {
		t.Fatal(err)
	}
	bin, records := t.TempDir(), t.TempDir()
	recordingTool(t, bin, "pg_dump", filepath.Join(records, "pg_dump"))
	recordingTool(t, bin, "pg_restore", filepath.Join(records, "pg_restore"))
	tools := Tools{BinDir: bin}

	if _, err := Take(ctx, withPassword(t, dsn, password), filepath.Join(t.TempDir(), "snap"), tools, time.Now()); err == nil {
		t.Fatal("Take with a failing pg_dump succeeded")
	}
	snap := t.TempDir()
	if err := writeManifest(filepath.Join(snap, ManifestFile), &Manifest{Format: FormatVersion}); err != nil {
		t.Fatal(err)
	}
	empty := testkit.NewDatabase(t)
	if _, err := Restore(ctx, withPassword(t, empty, password), snap, tools); err == nil || !strings.Contains(err.Error(), "pg_restore") {
		t.Fatalf("Restore with a failing pg_restore: %v; want pg_restore's failure", err)
	}
	for _, name := range []string{"pg_dump", "pg_restore"} {
		b, err := os.ReadFile(filepath.Join(records, name))
		if err != nil {
			t.Fatalf("%s did not run: %v", name, err)
		}
		args, env, _ := strings.Cut(string(b), "PGPASSWORD=")
		if strings.Contains(args, password) {
			t.Errorf("%s's command line carries the password:\n%s", name, args)
		}
		if !strings.Contains(args, "--dbname=") {
			t.Errorf("%s got no --dbname:\n%s", name, args)
		}
		if got := strings.TrimSpace(env); got != password {
			t.Errorf("%s's PGPASSWORD = %q; want the URL's password", name, got)
		}
	}
}

// splitPassword takes the password out of both forms of DATABASE_URL,
// leaving the rest as libpq reads it.
func TestSplitPassword(t *testing.T) {
	tests := []struct {
		give         string
		wantRest     string
		wantPassword string
	}{
		{give: "postgres://app:s3cr3t@db:5432/gpubill?sslmode=require", wantRest: "postgres://app@db:5432/gpubill?sslmode=require", wantPassword: "s3cr3t"},
		{give: "postgresql://app@db/gpubill?password=s3cr3t&sslmode=disable", wantRest: "postgresql://app@db/gpubill?sslmode=disable", wantPassword: "s3cr3t"},
		{give: "postgres://app@db/gpubill", wantRest: "postgres://app@db/gpubill"},
		{give: "host=db user=app password=s3cr3t dbname=gpubill", wantRest: "host=db user=app dbname=gpubill", wantPassword: "s3cr3t"},
		{give: "password = 'x y' host=db", wantRest: "host=db", wantPassword: "x y"},
		{give: "host=db password='a b\\'c' dbname='my db'", wantRest: "host=db dbname='my db'", wantPassword: "a b'c"},
		{give: "host=db dbname=gpubill", wantRest: "host=db dbname=gpubill"},
	}
	for _, tt := range tests {
		rest, password, err := splitPassword(tt.give)
		if err != nil || rest != tt.wantRest || password != tt.wantPassword {
			t.Errorf("splitPassword(%q) = %q, %q, %v; want %q, %q", tt.give, rest, password, err, tt.wantRest, tt.wantPassword)
		}
	}
}
