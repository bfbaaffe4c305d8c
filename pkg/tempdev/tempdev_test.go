package tempdev

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Readiness is our child listening on the port, not any server answering
// there: a port held by another process is not ours.
func TestListensOnTellsWhoseSocketItIs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	if ours, err := listensOn(os.Getpid(), port); err != nil || !ours {
		t.Fatalf("own listener on %s: %v, %v; want true", port, ours, err)
	}
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if ours, err := listensOn(other.Process.Pid, port); err != nil || ours {
		t.Fatalf("another process on %s: %v, %v; want false", port, ours, err)
	}
}

// FreePort's port is reserved: the probe's server side closed first, so the
// port sits in TIME_WAIT (which bind(:0) and connect(2) skip), and an
// explicit listen on it still succeeds.
func TestFreePortLeavesItsPortReservedButBindable(t *testing.T) {
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	want, reserved := fmt.Sprintf("0100007F:%04X", p), false
	for _, line := range strings.Split(string(b), "\n")[1:] {
		fs := strings.Fields(line)
		if len(fs) >= 4 && fs[1] == want && fs[3] == "06" { // TIME_WAIT
			reserved = true
		}
	}
	if !reserved {
		t.Fatalf("no TIME_WAIT socket on 127.0.0.1:%d after FreePort", p)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatalf("listen on FreePort's port: %v", err)
	}
	l.Close()
}

// A dev server whose ports Start picked and which exits during start-up is
// started again on other ports, and the log says so; with a port the caller
// named there is no second try, and the error quotes the child's output.
func TestStartTriesAgainWhenTheChildExitsDuringStartUp(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(fakeServerEnv, filepath.Join(t.TempDir(), "attempts"))
	var log strings.Builder
	s, err := Start(context.Background(), exe, "127.0.0.1:0", "", &log)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	s.Stop()
	if n := strings.Count(log.String(), "starting it again on other ports"); n != 1 {
		t.Fatalf("log tells of %d second tries, want 1:\n%s", n, log.String())
	}

	t.Setenv(fakeServerEnv, filepath.Join(t.TempDir(), "attempts"))
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), exe, fmt.Sprintf("127.0.0.1:%d", p), "", nil)
	if err == nil || !strings.Contains(err.Error(), "bind: address already in use (fake)") {
		t.Fatalf("Start on a named port: %v; want the child's first failure, quoted", err)
	}
}

// fakeServerEnv, when set, makes this test binary a stand-in dev server
// (TestMain): its first start (no file at the path) prints a bind failure
// and exits 2, as Temporal's frontend does on a taken port; later ones
// listen on --port until signalled.
const fakeServerEnv = "GPUBILL_TEMPDEV_FAKE_SERVER"

func TestMain(m *testing.M) {
	if path := os.Getenv(fakeServerEnv); path != "" && len(os.Args) > 1 && os.Args[1] == "gpubill-dev-server" {
		os.Exit(fakeServer(path, os.Args[2:]))
	}
	os.Exit(m.Run())
}

func fakeServer(path string, args []string) int {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(path, []byte("1"), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "listen tcp: bind: address already in use (fake)")
		return 2
	}
	var port string
	for i, a := range args {
		if a == "--port" && i+1 < len(args) {
			port = args[i+1]
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer l.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	return 0
}

// The real server on a taken port says "address already in use" (what
// Start's second try looks for) and Start's error quotes it.
func TestStartOnATakenPortQuotesTheServer(t *testing.T) {
	bin, err := FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := Start(context.Background(), bin, l.Addr().String(), "", nil)
	if err == nil {
		s.Stop()
		t.Fatal("Start on a taken port succeeded")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start on a taken port: %v; want the server's bind failure quoted", err)
	}
}
