package apperr

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"testing"
)

// A syscall.Errno is a net.Error (it has Timeout and Temporary), and every
// one was taken for an outage: a handler failing on a file it may not read
// (EACCES), a path that is not there (ENOENT) or a directory (EISDIR) was
// redelivered for ever instead of dead-lettered, and a client answered 503,
// retry, for what no retry mends. Only a network's or a peer's errno is an
// outage; an I/O timeout stays one however it is wrapped.
func TestTransientErrnoOnlyForANetworkOutage(t *testing.T) {
	path := func(op string, errno syscall.Errno) error {
		return &os.PathError{Op: op, Path: "/srv/inbox/01.xml", Err: errno}
	}
	opErr := func(op string, err error) error {
		return &net.OpError{Op: op, Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 5432}, Err: err}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		// A file's own failure: no retry mends it.
		{"EACCES in a PathError", path("open", syscall.EACCES), false},
		{"ENOENT in a PathError", path("open", syscall.ENOENT), false},
		{"EISDIR in a PathError", path("read", syscall.EISDIR), false},
		{"EACCES wrapped by %w", fmt.Errorf("bank inbox: %w", path("open", syscall.EACCES)), false},
		{"ENOENT bare", syscall.ENOENT, false},
		{"EROFS", fmt.Errorf("write: %w", path("write", syscall.EROFS)), false},
		{"fs.ErrPermission", fmt.Errorf("x: %w", fs.ErrPermission), false},
		// A network's or a peer's: an outage.
		{"ECONNREFUSED in an OpError", opErr("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED)), true},
		{"ECONNRESET in an OpError, wrapped", fmt.Errorf("post: %w", opErr("read", os.NewSyscallError("read", syscall.ECONNRESET))), true},
		{"EPIPE in an OpError", opErr("write", os.NewSyscallError("write", syscall.EPIPE)), true},
		{"ETIMEDOUT bare", fmt.Errorf("x: %w", syscall.ETIMEDOUT), true},
		{"EHOSTUNREACH", fmt.Errorf("x: %w", syscall.EHOSTUNREACH), true},
		{"ENETUNREACH", opErr("dial", os.NewSyscallError("connect", syscall.ENETUNREACH)), true},
		{"ECONNABORTED", syscall.ECONNABORTED, true},
		{"EAGAIN (a lock held elsewhere, a resource for now)", path("flock", syscall.EAGAIN), true},
		// An I/O timeout stays an outage however it comes: on a socket read
		// as a file (a PathError), in an OpError.
		{"I/O timeout in a PathError", &os.PathError{Op: "read", Path: "/dev/tcp", Err: os.ErrDeadlineExceeded}, true},
		{"I/O timeout in an OpError", fmt.Errorf("x: %w", opErr("read", os.ErrDeadlineExceeded)), true},
		{"DNS failure", &net.DNSError{Err: "server misbehaving", Name: "db", IsTemporary: true}, true},
		// A network call refused for the process's own reason is no outage.
		{"EACCES in an OpError (a socket it may not open)", opErr("dial", os.NewSyscallError("connect", syscall.EACCES)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.want {
				t.Fatalf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
