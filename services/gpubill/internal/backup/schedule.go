package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Snapshot directory names in a Schedule's directory sort by time.
const (
	namePrefix  = "gpubill-"
	nameLayout  = "20060102T150405Z"
	retryFailed = 5 * time.Minute // after a failed snapshot, try again this soon
)

var (
	backupsTaken = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_backups_total", Help: "Scheduled snapshots attempted by the single-binary edition, by result.",
	}, []string{"result"})
	backupLast = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "gpubill_backup_last_success_timestamp_seconds", Help: "Unix time of the last complete scheduled snapshot (0: none yet).",
	})
	backupPruneFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "gpubill_backup_prune_failures_total", Help: "Expired snapshots or stale partial ones the schedule failed to remove.",
	})
	// The alert reads this, not the counter: the schedule prunes once per
	// step, and after a snapshot the next step is GPUBILL_BACKUP_EVERY away
	// (6 h), so an increase over an hour fired for one hour in six while
	// the directory kept growing.
	backupPruneFailing = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "gpubill_backup_prune_failing", Help: "Removals that failed at the schedule's latest prune (0: it removed all it should).",
	})
)

func init() {
	for _, r := range []string{"ok", "failed"} {
		backupsTaken.WithLabelValues(r)
	}
}

// Schedule keeps snapshots of the database in Dir: one every Every
// (counted from the newest one there, so a restart does not reset it), and
// removes those older than Keep. Every ≤ 0 disables it.
type Schedule struct {
	DSN   string
	Dir   string
	Every time.Duration
	Keep  time.Duration
	Tools Tools
	Log   *slog.Logger
	Now   func() time.Time
	// removeAll is os.RemoveAll but in a test that makes a removal fail
	// (no file mode stops root, whom tests may run as).
	removeAll func(string) error
}

// Snapshot is one complete snapshot in a Schedule's directory.
type Snapshot struct {
	Path string
	At   time.Time
}

// List returns the complete snapshots in dir, oldest first.
func List(dir string) ([]Snapshot, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, e := range ents {
		stamp, ok := strings.CutPrefix(e.Name(), namePrefix)
		if !e.IsDir() || !ok {
			continue
		}
		at, err := time.Parse(nameLayout, stamp)
		if err != nil {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(p, ManifestFile)); err != nil {
			continue
		}
		out = append(out, Snapshot{Path: p, At: at})
	}
	slices.SortFunc(out, func(a, b Snapshot) int { return a.At.Compare(b.At) })
	return out, nil
}

// Run takes and prunes snapshots until ctx ends. A failed snapshot is
// logged, counted (gpubill_backups_total{result="failed"}) and retried
// after retryFailed; it never stops the stack.
func (s Schedule) Run(ctx context.Context) error {
	if s.Every <= 0 {
		s.Log.Info("scheduled backups off (GPUBILL_BACKUP_EVERY=0)")
		return nil
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	s.Log.Info("scheduled backups", "dir", s.Dir, "every", s.Every, "keep", s.Keep)
	for {
		wait, err := s.step(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backupsTaken.WithLabelValues("failed").Inc()
			s.Log.Error("scheduled backup failed", "dir", s.Dir, "err", err, "retry_in", min(retryFailed, s.Every))
			wait = min(retryFailed, s.Every)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// step takes a snapshot if the newest is Every old (or there is none),
// prunes, and returns how long until the next one is due. Its error is the
// snapshot's alone: pruning runs whatever the attempt's outcome (after a
// failed one it returned first, so on a full disk nothing was removed
// again) and reports its own failures (see pruneLogged).
func (s Schedule) step(ctx context.Context) (time.Duration, error) {
	// Made here, each time: a directory that cannot be made is a failed
	// snapshot, counted and retried (made once before the loop, its
	// failure ended the schedule after one log line, no snapshot ever
	// taken and none counted as failed).
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return 0, fmt.Errorf("backup dir: %w", err)
	}
	snaps, err := List(s.Dir)
	if err != nil {
		return 0, err
	}
	now := s.Now().UTC()
	if len(snaps) > 0 {
		// The newest complete snapshot is the last good one, also after a
		// restart: the gauge read 0 until the next was taken, up to Every.
		newest := snaps[len(snaps)-1]
		backupLast.Set(float64(newest.At.Unix()))
		if due := newest.At.Add(s.Every); due.After(now) {
			s.pruneLogged(now)
			return due.Sub(now), nil
		}
	}
	at := now.Truncate(time.Second)
	m, err := Take(ctx, s.DSN, filepath.Join(s.Dir, namePrefix+at.Format(nameLayout)), s.Tools, at)
	s.pruneLogged(now)
	if err != nil {
		return 0, err
	}
	backupsTaken.WithLabelValues("ok").Inc()
	backupLast.Set(float64(at.Unix()))
	s.Log.Info("backup taken", "dir", s.Dir, "at", at, "journal_head_hash", m.Ledger.HeadHash, "transactions", m.Ledger.Transactions)
	return s.Every, nil
}

// pruneLogged prunes, logging each removal that failed at ERROR and
// counting it in gpubill_backup_prune_failures_total. Returned as the
// attempt's error, a prune failure counted a failed snapshot every retry
// while snapshots were fine (GpubillBackupFailed firing for it) and hid
// the schedule's real state.
func (s Schedule) pruneLogged(now time.Time) {
	errs := s.prune(now)
	backupPruneFailing.Set(float64(len(errs)))
	for _, err := range errs {
		backupPruneFailures.Inc()
		s.Log.Error("old backup not removed", "dir", s.Dir, "err", err)
	}
}

// prune removes complete snapshots older than Keep (never the newest) and
// partial ones left by an interrupted run, and returns the removals that
// failed: one that fails does not stop the others (the first failure
// stopped all pruning, for good if it failed each time).
func (s Schedule) prune(now time.Time) []error {
	remove := s.removeAll
	if remove == nil {
		remove = os.RemoveAll
	}
	snaps, err := List(s.Dir)
	if err != nil {
		return []error{fmt.Errorf("list backups: %w", err)}
	}
	var errs []error
	for i, sn := range snaps {
		if i == len(snaps)-1 || now.Sub(sn.At) <= s.Keep {
			continue
		}
		if err := remove(sn.Path); err != nil {
			errs = append(errs, fmt.Errorf("remove old backup: %w", err))
			continue
		}
		s.Log.Info("old backup removed", "path", sn.Path)
	}
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return append(errs, fmt.Errorf("list partial backups: %w", err))
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), namePrefix) || !strings.HasSuffix(e.Name(), partialSuffix) {
			continue
		}
		p := filepath.Join(s.Dir, e.Name())
		fi, err := e.Info()
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("stat partial backup: %w", err))
			continue
		}
		// Only older than Every: a newer one may be a gpubill backup -o
		// into this directory, still being written.
		if now.Sub(fi.ModTime()) <= s.Every {
			continue
		}
		if err := remove(p); err != nil {
			errs = append(errs, fmt.Errorf("remove partial backup: %w", err))
			continue
		}
		s.Log.Info("partial backup removed", "path", p)
	}
	return errs
}
