package cli_test

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestServiceBinariesDrainOnHangup: a service run alone (bin/ledger, …)
// from an operator's SSH session died where it stood when the session
// dropped (SIGHUP): no drain of its listeners, its consumers or its
// workers, which SIGTERM gets. Each now stops as on SIGTERM: it exits 0,
// having returned through its shutdown, rather than being killed by the
// signal.
func TestServiceBinariesDrainOnHangup(t *testing.T) {
	dir, names := binaries(t)
	dsn := testkit.NewDatabase(t)
	js := testkit.NewJetStream(t)
	env := []string{
		"DATABASE_URL=" + dsn,
		"NATS_URL=" + js.URL,
		"TEMPORAL_ADDRESS=" + testkit.NewTemporal(t),
		"GPUBILL_AUTH_SECRET=clitest-secret-0123456789abcdef0123456789",
		"GPUBILL_DATA_DIR=" + t.TempDir(),
		// Payout alone needs its rail chosen and its webhook key given.
		"GPUBILL_PAYOUT_RAIL_BANK=sandbox",
		"GPUBILL_WEBHOOK_KEY=clitest-webhook-key-0123456789abcdef",
		"GPUBILL_LOG_LEVEL=info",
		"GPUBILL_HTTP_ADDR=127.0.0.1:0",
		"GPUBILL_GRPC_ADDR=127.0.0.1:0",
	}
	services := 0
	for _, name := range names {
		if name == "gpubill" { // its own test: TestRestoreHangupSaysWhatToDo
			continue
		}
		services++
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(dir, name))
			cmd.Env = append(cmd.Environ(), env...)
			var stdout, stderr syncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			waited := false // done received: the process is gone
			t.Cleanup(func() {
				if !waited {
					_ = cmd.Process.Kill()
					t.Logf("%s killed: %v", name, <-done)
				}
			})
			serving := false
			for deadline := time.After(2 * time.Minute); !serving; {
				select {
				case err := <-done:
					waited = true
					t.Fatalf("%s exited before serving: %v\n%s", name, err, stderr.String())
				case <-deadline:
					t.Fatalf("%s not serving after 2 min:\n%s", name, stderr.String())
				case <-time.After(50 * time.Millisecond):
					serving = strings.Contains(stderr.String(), `"serving"`)
				}
			}
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				waited = true
				var exitErr *exec.ExitError
				if err != nil && !errors.As(err, &exitErr) {
					t.Fatal(err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("%s still running a minute after SIGHUP", name)
			}
			if st := cmd.ProcessState; st.ExitCode() != 0 {
				t.Fatalf("%s after SIGHUP: %s (exit %d); want a drain and exit 0, as on SIGTERM\n%s",
					name, st, st.ExitCode(), tail(stderr.String(), 2000))
			}
		})
	}
	if services < 6 {
		t.Fatalf("tested %d service binaries, want the 6 under services/*/cmd besides gpubill: %v", services, names)
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("…%s", s[len(s)-n:])
}
