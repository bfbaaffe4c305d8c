package backup

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestScheduleEverySixHoursKeepsSeventyTwo walks a clock through four days:
// a snapshot when none exists, the next only once the newest is 6 h old
// (also across a restart: the schedule counts from the directory), and
// snapshots older than 72 h removed (the newest always kept).
func TestScheduleEverySixHoursKeepsSeventyTwo(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool, dsn := testkit.NewPool(t)
	if err := pg.Migrate(ctx, pool, "ledger", migrations.For("ledger")); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	s := Schedule{DSN: dsn, Dir: filepath.Join(t.TempDir(), "backups"), Every: 6 * time.Hour, Keep: 72 * time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	step := func(at time.Duration, wantWait time.Duration, wantCount int) {
		t.Helper()
		now = t0.Add(at)
		wait, err := s.step(context.Background())
		if err != nil {
			t.Fatalf("at +%s: %v", at, err)
		}
		snaps, err := List(s.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if wait != wantWait || len(snaps) != wantCount {
			t.Fatalf("at +%s: next in %s with %d snapshots; want %s with %d", at, wait, len(snaps), wantWait, wantCount)
		}
	}
	step(0, 6*time.Hour, 1)           // none yet: one now
	step(time.Hour, 5*time.Hour, 1)   // restart an hour later: the next is still due at +6 h
	step(6*time.Hour, 6*time.Hour, 2) // due
	step(7*time.Hour, 5*time.Hour, 2)
	for h := 12; h <= 72; h += 6 {
		step(time.Duration(h)*time.Hour, 6*time.Hour, h/6+1)
	}
	// At +78 h the +0 h snapshot is 78 h old: removed; 13 of +6 … +78 h left.
	step(78*time.Hour, 6*time.Hour, 13)
	snaps, err := List(s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if !snaps[0].At.Equal(t0.Add(6 * time.Hour)) {
		t.Fatalf("oldest kept %s; want %s", snaps[0].At, t0.Add(6*time.Hour))
	}
	// A long stop: the newest is never removed, however old.
	now = t0.Add(30 * 24 * time.Hour)
	if err := s.prune(now); err != nil {
		t.Fatal(err)
	}
	if snaps, err := List(s.Dir); err != nil || len(snaps) != 1 || !snaps[0].At.Equal(t0.Add(78*time.Hour)) {
		t.Fatalf("after a month: %v, %v; want only the newest", snaps, err)
	}
}

// A backup directory that cannot be made is a failed snapshot, counted and
// retried: it ended the schedule after one log line, no snapshot ever
// taken and none counted as failed.
func TestScheduleCountsADirectoryItCannotMake(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(backupsTaken.WithLabelValues("failed"))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	s := Schedule{DSN: "postgres://127.0.0.1:1/none", Dir: filepath.Join(file, "backups"), Every: time.Hour, Keep: time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run: %v, want it to go on until its context ends", err)
	}
	if got := testutil.ToFloat64(backupsTaken.WithLabelValues("failed")); got != before+1 {
		t.Fatalf("failed snapshots counted %v → %v, want one more", before, got)
	}
}

// completeSnapshot makes a complete snapshot (a manifest) in dir taken at at.
func completeSnapshot(t *testing.T, dir string, at time.Time) string {
	t.Helper()
	p := filepath.Join(dir, namePrefix+at.UTC().Format(nameLayout))
	if err := os.MkdirAll(filepath.Join(p, DumpDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, ManifestFile), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A failed snapshot leaves no partial directory, and the expired snapshots
// and stale partials are removed all the same: each failure left its
// DIR.partial (the retry 5 minutes later under a new name), and a failed
// attempt returned before pruning, so on a full disk nothing was ever
// removed again.
func TestScheduleFailedSnapshotStillPrunes(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool, dsn := testkit.NewPool(t)
	if err := pg.Migrate(ctx, pool, "ledger", migrations.For("ledger")); err != nil {
		t.Fatal(err)
	}
	// A pg_dump that writes part of its dump, then fails as on a full disk.
	bin := t.TempDir()
	script := `#!/bin/sh
for a in "$@"; do case "$a" in --file=*) d="${a#--file=}";; esac; done
mkdir -p "$d" && echo part > "$d/toc.dat"
echo "pg_dump: error: could not write to file: No space left on device" >&2
exit 1
`
	if err := os.WriteFile(filepath.Join(bin, "pg_dump"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	// The clock is the real one: the failed attempt's partial is new, so
	// only Take can have removed it (prune takes partials older than Every).
	now := time.Now().UTC().Truncate(time.Second)
	s := Schedule{DSN: dsn, Dir: filepath.Join(t.TempDir(), "backups"), Every: 6 * time.Hour, Keep: 72 * time.Hour, Tools: Tools{BinDir: bin},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }}
	expired := completeSnapshot(t, s.Dir, now.Add(-80*time.Hour))
	// 7 h old: the next is due.
	newest := completeSnapshot(t, s.Dir, now.Add(-7*time.Hour))
	// A killed run's, 20 h old.
	stale := filepath.Join(s.Dir, namePrefix+now.Add(-20*time.Hour).Format(nameLayout)+partialSuffix)
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(stale, now.Add(-20*time.Hour), now.Add(-20*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.step(ctx); err == nil || !strings.Contains(err.Error(), "No space left on device") {
		t.Fatalf("step with a failing pg_dump: %v; want its error", err)
	}
	if left, err := filepath.Glob(filepath.Join(s.Dir, "*"+partialSuffix)); err != nil || len(left) > 0 {
		t.Errorf("partial snapshots left after a failed attempt: %v %v", left, err)
	}
	if _, err := os.Stat(expired); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("expired snapshot %s after a failed attempt: %v; want removed", expired, err)
	}
	if _, err := os.Stat(newest); err != nil {
		t.Errorf("newest snapshot: %v; want kept", err)
	}
}

// A snapshot that cannot be removed is logged at ERROR and counted as a
// prune failure, not as a failed snapshot, and the others are still
// removed: the error was returned as the attempt's, so every step counted
// a failed snapshot (GpubillBackupFailed firing while snapshots were
// fine), and the first failed removal stopped all pruning.
func TestSchedulePruneFailureIsNotAFailedSnapshot(t *testing.T) {
	now := time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)
	var log strings.Builder
	dir := filepath.Join(t.TempDir(), "backups")
	stuck := completeSnapshot(t, dir, now.Add(-100*time.Hour))
	old := []string{completeSnapshot(t, dir, now.Add(-90*time.Hour)), completeSnapshot(t, dir, now.Add(-80*time.Hour))}
	newest := completeSnapshot(t, dir, now.Add(-time.Hour)) // the next due in 5 h: no snapshot is taken
	s := Schedule{DSN: "postgres://127.0.0.1:1/none", Dir: dir, Every: 6 * time.Hour, Keep: 72 * time.Hour,
		Log: slog.New(slog.NewTextHandler(&log, nil)), Now: func() time.Time { return now },
		removeAll: func(p string) error {
			if p == stuck {
				return errors.New("remove " + p + ": input/output error")
			}
			return os.RemoveAll(p)
		}}
	failedBefore := testutil.ToFloat64(backupsTaken.WithLabelValues("failed"))
	pruneBefore := testutil.ToFloat64(backupPruneFailures)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := testutil.ToFloat64(backupsTaken.WithLabelValues("failed")); got != failedBefore {
		t.Errorf("failed snapshots counted %v → %v; want none (no snapshot was due)", failedBefore, got)
	}
	if got := testutil.ToFloat64(backupPruneFailures); got != pruneBefore+1 {
		t.Errorf("prune failures counted %v → %v; want one more", pruneBefore, got)
	}
	if got := testutil.ToFloat64(backupPruneFailing); got != 1 {
		t.Errorf("gpubill_backup_prune_failing %v; want 1 until a prune removes all (the alert reads it)", got)
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "input/output error") ||
		strings.Contains(log.String(), "scheduled backup failed") {
		t.Errorf("log %q; want the removal's error at ERROR, not a failed backup", log.String())
	}
	for _, p := range old {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("expired snapshot %s after another could not be removed: %v; want removed", p, err)
		}
	}
	for _, p := range []string{stuck, newest} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it there", p, err)
		}
	}
}

// After a restart the last-success gauge is the newest complete snapshot
// in the directory: it read 0 until the next snapshot, up to 6 h, though a
// good one was there.
func TestScheduleLastSuccessFromTheDirectory(t *testing.T) {
	now := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	dir := filepath.Join(t.TempDir(), "backups")
	completeSnapshot(t, dir, now.Add(-26*time.Hour))
	completeSnapshot(t, dir, now.Add(-2*time.Hour))
	// Newer, but not complete: not a good snapshot.
	if err := os.MkdirAll(filepath.Join(dir, namePrefix+now.Add(-time.Hour).Format(nameLayout)), 0o700); err != nil {
		t.Fatal(err)
	}
	backupLast.Set(0) // as at start
	s := Schedule{DSN: "postgres://127.0.0.1:1/none", Dir: dir, Every: 6 * time.Hour, Keep: 72 * time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got, want := testutil.ToFloat64(backupLast), float64(now.Add(-2*time.Hour).Unix()); got != want {
		t.Errorf("last success %v; want %v, the newest complete snapshot's", got, want)
	}
}
