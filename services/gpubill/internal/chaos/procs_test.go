package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/testkit"
)

// proc is one child process the test starts, kills and starts again. Its
// output goes to a log file kept in the test's directory.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string
	cred *syscall.Credential // run as another user (postgres refuses root)
	// deathSig is sent to the child if the test process dies, so a killed
	// test leaves nothing running.
	deathSig syscall.Signal

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	state  *os.ProcessState
	starts int
	pids   []int
}

// Pdeathsig fires when the OS thread that started the child exits, not the
// process; Go may end a thread under a goroutine, so every child is started
// from one goroutine locked to its thread for the life of the test binary.
var spawns = make(chan spawnReq)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for r := range spawns {
			r.done <- r.cmd.Start()
		}
	}()
}

func spawn(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawns <- spawnReq{cmd: cmd, done: done}
	return <-done
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "\n==== start %d at %s ====\n", p.starts+1, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		f.Close()
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	sig := p.deathSig
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: sig, Credential: p.cred}
	if err := spawn(cmd); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.state = cmd, done, nil
	p.starts++
	p.pids = append(p.pids, cmd.Process.Pid)
	go func() {
		_ = cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the current child has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// wait waits for the current child to exit and returns how it ended.
func (p *proc) wait(within time.Duration) (*os.ProcessState, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.state, nil
	case <-time.After(within):
		return nil, fmt.Errorf("%s (pid %d) still running after %s", p.name, p.cmd.Process.Pid, within)
	}
}

// kill9 sends SIGKILL and proves the child died of it.
func (p *proc) kill9() error {
	if !p.running() {
		return fmt.Errorf("%s is not running (it exited on its own: see %s)", p.name, p.log)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	return p.expectSignal(syscall.SIGKILL)
}

// expectSignal waits for the child to exit and checks it died of sig.
func (p *proc) expectSignal(sig syscall.Signal) error {
	st, err := p.wait(30 * time.Second)
	if err != nil {
		return err
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != sig {
		return fmt.Errorf("%s ended with %v, want death by %v", p.name, st, sig)
	}
	return nil
}

// stop asks the child to end (SIGTERM), then kills it.
func (p *proc) stop() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if _, err := p.wait(15 * time.Second); err != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(15 * time.Second) //nolint:errcheck // killed: nothing is left to try
	}
}

// exitState describes how the current child ended (nil while running).
func (p *proc) exitState() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// pid is the current child's process id.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// lastRun returns the log of the current (last started) child.
func (p *proc) lastRun() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	s := string(b)
	if i := strings.LastIndex(s, "\n==== start "); i >= 0 {
		s = s[i:]
	}
	return s
}

// tail returns the last n lines of the child's log, for failure messages.
func (p *proc) tail(n int) string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// portOpen reports whether something accepts TCP connections on addr.
func portOpen(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// httpOK reports whether GET url answers 200.
func httpOK(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// repoRoot is the directory holding go.work, above the test's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.work not found above the test directory")
		}
		dir = parent
	}
}

// serviceBinaries returns a directory holding every service's binary and
// the nats-server the cluster runs (the version pkg/go.mod names, which the
// rest of the suite embeds): GPUBILL_CHAOS_BIN when set (`make test` points
// it at the bin/ that `make build` just refreshed), else a fresh `go build`
// into dir.
func serviceBinaries(t *testing.T, dir string) string {
	t.Helper()
	if d := os.Getenv("GPUBILL_CHAOS_BIN"); d != "" {
		for _, s := range append([]string{"nats-server"}, serviceNames...) {
			if _, err := os.Stat(filepath.Join(d, s)); err != nil {
				t.Fatalf("GPUBILL_CHAOS_BIN=%s: %v (run make build)", d, err)
			}
		}
		return d
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH to build the services (or set GPUBILL_CHAOS_BIN): %v", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator), natsServerPkg}
	for _, s := range serviceNames {
		args = append(args, "./services/"+s+"/cmd/"+s)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = repoRoot(t)
	began := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the services: %v\n%s", err, out)
	}
	t.Logf("built nats-server and %d service binaries in %s", len(serviceNames), time.Since(began).Round(time.Millisecond))
	return dir
}

// natsServerPkg is the nats-server the chaos tests run (Makefile: NATS_SERVER).
const natsServerPkg = "github.com/nats-io/nats-server/v2"

// postgresCred returns the credential PostgreSQL's tools need when the test
// runs as root (testkit.PostgresCred), and chowns dir to it.
func postgresCred(t *testing.T, dir string) *syscall.Credential {
	t.Helper()
	cred := testkit.PostgresCred(t)
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	return cred
}

// runAs runs a command to completion (as cred when set).
func runAs(cred *syscall.Credential, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return nil
}
