package stack

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpubill/gpubill/pkg/config"
)

// TestTemporalDataIsTheOwnersOnly: Temporal's store under the dev data dir
// holds every settlement's history (provider ids, tiers, gross per cycle,
// failure texts); the data dir was created 0755, temporal.log 0644 and
// temporal.db with SQLite's default (0644 under umask 022), readable by
// every local user, where backups are 0700/0600 and reports 0600. A data
// dir and a log an earlier version left readable are made private too.
func TestTemporalDataIsTheOwnersOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil { // as an earlier version left it
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "temporal.log"), []byte("earlier run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Guard: the walk below sees group/other bits where they are (umask 022
	// leaves them on what is created 0644 or 0755).
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm()&0o077 == 0 {
		t.Fatalf("data dir %v, %v: want it created readable by others first", st.Mode(), err)
	}
	if err := openDataDir(dir); err != nil {
		t.Fatal(err)
	}
	s := &Stack{cancel: func() {}}
	t.Cleanup(s.Stop)
	if _, err := s.startTemporal(context.Background(), Config{Common: config.Common{DataDir: dir},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	if err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		seen = append(seen, d.Name())
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s is %v: group or others may read it", path, perm)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "temporal.db")); err != nil {
		t.Fatalf("no Temporal store in the data dir (%v); walked %v", err, seen)
	}
	t.Logf("walked %v", seen)
}

// TestDataDirOfAnotherUseKeepsItsMode: an existing directory no earlier
// gpubill dev filled (--data-dir=/tmp, a home) keeps its mode; only what
// the stack writes in it is private.
func TestDataDirOfAnotherUseKeepsItsMode(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := openDataDir(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("%s after openDataDir: %v, %v; want 0755 kept", dir, st.Mode(), err)
	}
	fresh := filepath.Join(dir, "new")
	if err := openDataDir(fresh); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("%s created: %v, %v; want 0700", fresh, st.Mode(), err)
	}
}
