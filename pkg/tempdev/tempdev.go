// Package tempdev runs a real Temporal dev server (`temporal
// gpubill-dev-server`: the Temporal CLI's dev server as built into
// bin/temporal from tools/temporal, with a trimmed visibility schema and no
// metrics endpoint) as a child process, for `gpubill dev` and for tests.
package tempdev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const readyTimeout = 90 * time.Second

// FindBinary locates gpubill's build of the Temporal CLI (an upstream
// `temporal` on PATH lacks gpubill-dev-server): GPUBILL_TEMPORAL_BIN, then
// `temporal` beside the running executable, then bin/temporal in the current
// directory or any parent holding go.work.
func FindBinary() (string, error) {
	if p := os.Getenv("GPUBILL_TEMPORAL_BIN"); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "temporal")
		if isFile(p) {
			return p, nil
		}
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			if p := filepath.Join(dir, "bin", "temporal"); isFile(p) {
				return p, nil
			}
			if isFile(filepath.Join(dir, "go.work")) {
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("temporal dev server binary not found: run `make bin/temporal`, or set TEMPORAL_ADDRESS to an external server")
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// FreePort returns a free TCP port on 127.0.0.1, reserved for a minute
// against the kernel handing it out again. A port is free only between
// closing the probe listener and the child's bind; meanwhile any listener
// on port 0 or outgoing connection on the machine (parallel test packages
// make thousands) may take it, and the child then fails to bind and exits.
// So, as the Temporal CLI's devserver.GetFreePort does, the probe accepts
// one loopback connection and closes it from the server's side first: that
// leaves the port in TIME_WAIT, which bind(:0) skips for 60 s while an
// explicit bind with SO_REUSEADDR (Go's default for listeners) still
// succeeds. (Whether the kernel also keeps an outgoing connection's local
// port off it was not checked here.)
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr := l.Addr().(*net.TCPAddr)
	client, err := net.DialTCP("tcp", nil, addr)
	if err != nil {
		return 0, fmt.Errorf("reserve port %d: %w", addr.Port, err)
	}
	server, err := l.Accept()
	if err != nil {
		return 0, fmt.Errorf("reserve port %d: %w", addr.Port, errors.Join(err, client.Close()))
	}
	if err := server.Close(); err != nil { // server side first: its end waits
		return 0, fmt.Errorf("reserve port %d: %w", addr.Port, errors.Join(err, client.Close()))
	}
	if err := client.Close(); err != nil {
		return 0, fmt.Errorf("reserve port %d: %w", addr.Port, err)
	}
	return addr.Port, nil
}

// DynamicConfig is the dev server's dynamic configuration on top of the
// CLI's defaults (`--dynamic-config-value KEY=JSON`). Each entry is safe for
// a single-process development server and measurably cuts the server's work
// per workflow (settlement's close starts one workflow per provider):
//   - system.forceSearchAttributesCacheRefreshOnRead: the CLI turns it on so
//     a custom search attribute is visible the moment it is created; it
//     costs ~5 extra SQLite reads per workflow (cluster metadata and
//     namespace on every visibility write and start). gpubill registers no
//     search attributes.
//   - matching.numTaskqueue{Read,Write}Partitions: one partition per task
//     queue (the default is 4, built for many matching hosts): tasks and
//     polls meet in one place instead of being forwarded between
//     partitions, so more tasks match in memory and fewer go through
//     SQLite.
//   - history.{transfer,visibility,timer}ProcessorUpdateAckInterval: how
//     often a history queue checkpoints. Until then every task it has
//     completed stays in its in-memory tracker, and each new batch of tasks
//     walks the whole tracker (queues.executableTracker.split): with the
//     default 30 s that walk dominates the server's CPU while a cycle
//     closes (DEVELOPERS.md). A checkpoint is one small write.
var DynamicConfig = map[string]string{
	"system.forceSearchAttributesCacheRefreshOnRead": "false",
	"matching.numTaskqueueReadPartitions":            "1",
	"matching.numTaskqueueWritePartitions":           "1",
	"history.transferProcessorUpdateAckInterval":     `"1s"`,
	"history.visibilityProcessorUpdateAckInterval":   `"1s"`,
	"history.timerProcessorUpdateAckInterval":        `"1s"`,
}

// Server is a running dev server.
type Server struct {
	Address string
	cmd     *exec.Cmd
	done    chan struct{}
	exit    error // how the child ended; set before done closes
}

// startAttempts is how often Start tries a dev server whose ports it picked
// itself: a child that exits during start-up because a port was taken is
// started again on new ports (each failure written to the log), in case
// another process took one between FreePort and the child's bind. The
// server logs "Failed to start gRPC listener … bind: address already in
// use" and then panics on a nil listener (exit status 2).
const startAttempts = 3

// Start runs `temporal gpubill-dev-server` on addr ("127.0.0.1:0" picks a
// port), with its SQLite store at dbFile ("" = in memory; its owner's only,
// storeMode), and waits until the frontend accepts connections. The child
// dies with the parent.
func Start(ctx context.Context, bin, addr, dbFile string, logw io.Writer) (*Server, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("temporal addr %q: %w", addr, err)
	}
	if logw == nil {
		logw = io.Discard
	}
	attempts := 1
	if port == "0" || port == "" {
		attempts = startAttempts
	}
	for attempt := 1; ; attempt++ {
		s, err := start(ctx, bin, host, port, dbFile, logw)
		if err == nil && dbFile != "" {
			if err := privateStore(dbFile); err != nil {
				s.Stop()
				return nil, err
			}
		}
		var early *exitedEarly
		if err == nil || !errors.As(err, &early) || !strings.Contains(early.output, "address already in use") || attempt == attempts {
			return s, err
		}
		if _, werr := fmt.Fprintf(logw, "gpubill: %v; starting it again on other ports (attempt %d of %d)\n", err, attempt+1, attempts); werr != nil {
			return nil, fmt.Errorf("%w (and its log: %v)", err, werr)
		}
	}
}

// storeMode is the mode of a SQLite store: it holds workflow histories
// (gpubill's: provider ids, amounts, failure texts), its owner's only. The
// server creates it with SQLite's default (0644 under umask 022), and a
// child's umask cannot be set without setting the parent's.
const storeMode = 0o600

// privateStore gives the store at dbFile and its journal, WAL and shared
// memory files storeMode. SQLite creates those with the database's mode,
// so the ones it creates later (a WAL after a restart) follow.
func privateStore(dbFile string) error {
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		if err := os.Chmod(dbFile+suffix, storeMode); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("temporal store: %w", err)
		}
	}
	return nil
}

// start is one attempt of Start; port "0" or "" picks a free one.
func start(ctx context.Context, bin, host, port, dbFile string, logw io.Writer) (*Server, error) {
	if port == "0" || port == "" {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		port = fmt.Sprint(p)
	}
	hport, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{"gpubill-dev-server", "--ip", host, "--port", port,
		"--http-port", fmt.Sprint(hport), "--log-level", "error"}
	if dbFile != "" {
		args = append(args, "--db-filename", dbFile)
	}
	keys := make([]string, 0, len(DynamicConfig))
	for k := range DynamicConfig {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--dynamic-config-value", k+"="+DynamicConfig[k])
	}
	return startProcess(ctx, bin, args, net.JoinHostPort(host, port), port, logw)
}

// startProcess runs bin with args and waits until it listens on port (its
// frontend at address). The child dies with the parent.
func startProcess(ctx context.Context, bin string, args []string, address, port string, logw io.Writer) (*Server, error) {
	cmd := exec.Command(bin, args...)
	if logw == nil {
		logw = io.Discard
	}
	sample := &sampleWriter{max: 1024}
	out := io.MultiWriter(logw, sample) // one writer: exec copies both streams in one goroutine
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start temporal server: %w", err)
	}
	s := &Server{Address: address, cmd: cmd, done: make(chan struct{})}
	go func() { s.exit = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.Address, 200*time.Millisecond)
		if err == nil {
			c.Close()
			// FreePort closed its listener before the child bound the port:
			// a server started in parallel may hold it. Ready means OUR child
			// listens there (its socket inode); otherwise it will fail to
			// bind and exit, and the wait below sees that.
			ours, err := listensOn(cmd.Process.Pid, port)
			if err != nil {
				select {
				case <-s.done: // exited while we looked (its /proc entry with it)
					return nil, &exitedEarly{exit: s.exit, output: sample.String()}
				case <-time.After(time.Second): // not yet reaped
				}
				s.Stop()
				return nil, fmt.Errorf("temporal server on %s: %w", s.Address, err)
			}
			if ours {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-s.done:
			return nil, &exitedEarly{exit: s.exit, output: sample.String()}
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.Stop()
	return nil, fmt.Errorf("temporal server on %s not ready in %s", s.Address, readyTimeout)
}

// Pid is the server process's id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Kill ends the server the crash way (SIGKILL: no shutdown, nothing
// flushed) and waits until it is gone.
func (s *Server) Kill() error {
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-s.done
	return nil
}

// Stop terminates the server (SIGTERM, then SIGKILL) and waits for it.
func (s *Server) Stop() {
	if s.cmd.Process == nil {
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err == nil {
		select {
		case <-s.done:
			return
		case <-time.After(10 * time.Second):
		}
	}
	// Still running after SIGTERM, or SIGTERM could not be sent.
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return // cannot be signalled at all; Pdeathsig ends it with this process
	}
	<-s.done
}

// listensOn reports whether process pid holds a listening TCP socket on port
// (Linux: the socket inodes of /proc/net/tcp{,6} in state LISTEN against the
// process's file descriptors).
func listensOn(pid int, port string) (bool, error) {
	p, err := strconv.Atoi(port)
	if err != nil {
		return false, fmt.Errorf("port %q: %w", port, err)
	}
	want := fmt.Sprintf(":%04X", p)
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return false, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
			if len(fs) >= 10 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[l] {
			return true, nil
		}
	}
	return false, nil
}

// exitedEarly is a server child that ended before it listened.
type exitedEarly struct {
	exit   error
	output string // the start and the end of its output
}

func (e *exitedEarly) Error() string {
	return fmt.Sprintf("temporal server exited during start-up (%v); its output:\n%s", e.exit, e.output)
}

// sampleWriter keeps the first and the last max bytes written to it: a
// server's reason to exit is in its first lines (a Go panic's message
// precedes its stack) or its last.
type sampleWriter struct {
	mu         sync.Mutex
	max        int
	head, tail []byte
	skipped    int
}

func (w *sampleWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if room := w.max - len(w.head); room > 0 {
		k := min(room, len(p))
		w.head, p = append(w.head, p[:k]...), p[k:]
	}
	w.tail = append(w.tail, p...)
	if over := len(w.tail) - w.max; over > 0 {
		w.tail = append(w.tail[:0], w.tail[over:]...)
		w.skipped += over
	}
	return n, nil
}

func (w *sampleWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.skipped == 0 {
		return string(w.head) + string(w.tail)
	}
	return fmt.Sprintf("%s\n[… %d bytes …]\n%s", w.head, w.skipped, w.tail)
}
