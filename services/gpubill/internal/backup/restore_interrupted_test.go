package backup_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/backup"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
)

func gpubill(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = cli.Main(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestRestoreInterruptedBeforeItsLastStep: gpubill restore commits the
// snapshot (pg_restore --single-transaction), then readies it in a second
// transaction (restore's last step). A restore killed between the two
// commits (kill -9, OOM, the SSH session dropped) left a database that
// looked restored: ledger verify said ok, every service started on it with
// no warning, with the snapshot's published messages never sent again
// (usage never charged), payouts never restarted, the bank-file rail not
// held and the source's restore epoch (ids and ETags issued again); a
// second restore was refused (not empty). A marker committed before the
// load and dropped by the last step's transaction now makes every service
// refuse to start (pg.Migrate) and ledger verify fail, both naming the
// remedies, until gpubill after-recovery runs the step. A restore whose
// load failed leaves the marker alone in the database: restoring again
// into it works.
func TestRestoreInterruptedBeforeItsLastStep(t *testing.T) {
	ctx := testkit.Context(t)
	src, srcDSN := recoveredDatabase(t)
	snapshot := recoveredState(t, src)
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := backup.Take(ctx, srcDSN, dir, backup.Tools{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	dst := testkit.NewDatabase(t)
	// Killed in the last step: its transaction never commits.
	restoreHook := backup.FailAfterRestore(func(context.Context) error { return errors.New("killed") })
	_, interrupted := backup.Restore(ctx, dst, dir, backup.Tools{})
	restoreHook()
	if interrupted == nil {
		t.Fatal("a restore interrupted in its last step: no error")
	}
	pool, err := pgxpool.New(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if got := recoveredState(t, pool); got != snapshot {
		t.Fatalf("the interrupted restore's database: %s; want the snapshot as loaded, %s (the kill proved nothing)", got, snapshot)
	}

	// Every service migrates its schema at start (pg.Migrate): refused.
	for _, s := range []string{"metering", "payout"} {
		if err := pg.Migrate(ctx, pool, s, migrations.For(s)); err == nil || !strings.Contains(err.Error(), "after-recovery --services-stopped") {
			t.Fatalf("the %s service starting on the interrupted restore's database: %v; want refused, naming gpubill after-recovery --services-stopped", s, err)
		}
	}
	if _, err := backup.Take(ctx, dst, filepath.Join(t.TempDir(), "of-the-load"), backup.Tools{}, time.Now()); !errors.Is(err, pg.ErrRestorePending) {
		t.Fatalf("a backup of the interrupted restore's database: %v; want refused (it would verify and restore as ready)", err)
	}
	code, out, errOut := gpubill(ctx, "ledger", "verify", "--database-url", dst)
	if code != 1 || !strings.Contains(errOut, "did not finish") || !strings.Contains(errOut, "after-recovery") {
		t.Fatalf("ledger verify on the interrupted restore's database: exit %d, %q %q; want 1, saying the restore did not finish", code, out, errOut)
	}
	code, out, errOut = gpubill(ctx, "restore", dir, "--database-url", dst)
	if code != 1 || !strings.Contains(errOut, "did not finish") || !strings.Contains(errOut, "drop it") {
		t.Fatalf("restore again into the interrupted restore's database: exit %d, %q %q; want 1, saying the restore did not finish", code, out, errOut)
	}

	// after-recovery runs the step and lifts the refusal.
	code, out, errOut = gpubill(ctx, "after-recovery", "--services-stopped", "--database-url", dst)
	if got := recoveredState(t, pool); code != 0 || !strings.HasPrefix(got, "outbox c-1,m-1,m-2 | published  | started  | epochs ") {
		t.Fatalf("after-recovery on the interrupted restore's database: exit %d, %q %q, state %s; want 0 and the step run", code, out, errOut, got)
	}
	for _, s := range []string{"metering", "payout"} {
		if err := pg.Migrate(ctx, pool, s, migrations.For(s)); err != nil {
			t.Fatalf("the %s service starting after after-recovery: %v", s, err)
		}
	}
	if code, out, errOut = gpubill(ctx, "ledger", "verify", "--database-url", dst); code != 0 {
		t.Fatalf("ledger verify after after-recovery: exit %d, %q %q; want 0", code, out, errOut)
	}
	if err := interrupted; !strings.Contains(err.Error(), "drop it and restore again") || !strings.Contains(err.Error(), "after-recovery --services-stopped") {
		t.Errorf("the interrupted restore said %q; want the advice: drop it and restore again, or gpubill after-recovery --services-stopped", err)
	}

	// pg_restore fails (killed in the load): nothing loaded, and the
	// database (the marker alone) takes a restore again.
	dst = testkit.NewDatabase(t)
	failing := t.TempDir()
	if err := os.WriteFile(filepath.Join(failing, "pg_restore"), []byte("#!/bin/sh\nexit 1\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Restore(ctx, dst, dir, backup.Tools{BinDir: failing}); err == nil || !strings.Contains(err.Error(), "restore again") {
		t.Fatalf("a restore whose pg_restore failed: %v; want an error saying to restore again", err)
	}
	if _, err := backup.Restore(ctx, dst, dir, backup.Tools{}); err != nil {
		t.Fatalf("restore again after a failed load: %v; want it loaded", err)
	}
	pool, err = pgxpool.New(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pg.Migrate(ctx, pool, "metering", migrations.For("metering")); err != nil {
		t.Fatalf("the metering service starting after a finished restore: %v", err)
	}
}
