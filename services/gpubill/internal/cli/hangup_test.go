package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/backup"
)

// TestRestoreHangupSaysWhatToDo: the SSH session of a gpubill restore
// dropped (SIGHUP) while pg_restore loads. gpubill did not handle SIGHUP:
// it died where it stood, saying nothing. Now it stops as on SIGINT, and
// says the restore was interrupted and what to do.
func TestRestoreHangupSaysWhatToDo(t *testing.T) {
	dir, _ := binaries(t)
	dsn := testkit.NewDatabase(t)
	snap, bin := t.TempDir(), t.TempDir()
	m, err := json.Marshal(backup.Manifest{Format: backup.FormatVersion})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snap, backup.ManifestFile), m, 0o600); err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(bin, "started")
	if err := os.WriteFile(filepath.Join(bin, "pg_restore"), []byte("#!/bin/sh\ntouch "+started+"\nexec sleep 60\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "gpubill"), "restore", snap, "--database-url", dsn, "--pg-bin", bin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testkit.Eventually(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, "pg_restore started")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("gpubill restore still running 30 s after SIGHUP")
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "restore interrupted") ||
		!strings.Contains(stderr.String(), "restore again") {
		t.Fatalf("gpubill restore after SIGHUP: exit %d (%s), %q %q; want 1, saying it was interrupted and to restore again",
			code, cmd.ProcessState, stdout.String(), stderr.String())
	}
}
