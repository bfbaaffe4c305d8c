package tempdev

import (
	"net"
	"os"
	"os/exec"
	"strconv"
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
