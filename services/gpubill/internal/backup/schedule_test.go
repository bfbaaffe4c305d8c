package backup

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
