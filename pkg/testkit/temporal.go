package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TemporalBinary finds the Temporal CLI built by `make bin/temporal`
// (GPUBILL_TEMPORAL_BIN, else bin/temporal in the repository root).
func TemporalBinary() (string, error) {
	if p := os.Getenv("GPUBILL_TEMPORAL_BIN"); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "bin", "temporal")
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("%s missing: run `make bin/temporal`", p)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("bin/temporal not found above %s", dir)
		}
		dir = parent
	}
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// TemporalDevServer is a real Temporal dev server run as a child process.
type TemporalDevServer struct {
	Address string
	cmd     *exec.Cmd
}

// StartTemporalDevServer runs `temporal server start-dev` with its SQLite
// file at dbFile ("" = in memory) and waits until its frontend accepts
// connections.
func StartTemporalDevServer(ctx context.Context, bin, dbFile string, port int, logw *os.File) (*TemporalDevServer, error) {
	args := []string{"server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", fmt.Sprint(port),
		"--log-level", "error", "--namespace", "default"}
	if dbFile != "" {
		args = append(args, "--db-filename", dbFile)
	}
	mport, err := FreePort()
	if err != nil {
		return nil, err
	}
	hport, err := FreePort()
	if err != nil {
		return nil, err
	}
	args = append(args, "--metrics-port", fmt.Sprint(mport), "--http-port", fmt.Sprint(hport))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start temporal dev server: %w", err)
	}
	s := &TemporalDevServer{Address: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.Address, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.Stop()
	return nil, fmt.Errorf("temporal dev server on %s not ready in 60s", s.Address)
}

// Stop kills the server and waits for it.
func (s *TemporalDevServer) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// NewTemporal starts a dev server for one test (in-memory store).
func NewTemporal(t testing.TB) string {
	t.Helper()
	bin, err := TemporalBinary()
	if err != nil {
		t.Fatal(err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartTemporalDevServer(context.Background(), bin, "", port, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.Address
}
