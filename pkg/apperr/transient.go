package apperr

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Transient reports whether err says a dependency could not be reached or
// did not accept the work (the database down, starting up or restarting,
// read-only while it fails over, out of disk or memory, a connection lost
// or refused (a network's errno: a file's EACCES or ENOENT is none), a
// peer service unavailable, a serialization conflict, a lock held
// elsewhere). A context's deadline is not one: whatever ran past it may
// have been the request's or the message's own doing.
// Such a failure is not the request's or the message's fault, however often
// it repeats: a client is answered 503, retry later (ToStatus), and a
// consumer never counts it toward dead-lettering (natsx.Unavailable).
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"): // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // shutdown, crash, starting up
			return true
		case strings.HasPrefix(pe.Code, "53"): // insufficient resources: disk full, out of memory, too many connections
			return true
		case pe.Code == "40001", pe.Code == "40P01": // serialization, deadlock
			return true
		case pe.Code == "25006": // read-only transaction: a standby, or a primary failing over
			return true
		case pe.Code == "55P03": // lock not available (lock_timeout): another transaction holds it
			return true
		case pe.Code == "58030": // I/O error
			return true
		}
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The caller's own deadline (a request's, a consumer's HandleWithin),
		// not a dependency refusing the work: what outran it may be the
		// work's own doing, like a statement timeout (57014). A context's
		// deadline is a net.Error and a pgconn.Timeout, and was taken for
		// an outage: a message whose handler always ran past its bound was
		// redelivered for ever, never dead-lettered. A connection the
		// database never answered before the deadline is a ConnectError,
		// an outage, above.
		return false
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		// A syscall.Errno is a net.Error too (Timeout, Temporary), a
		// file's EACCES, ENOENT or EISDIR as well as a peer's ECONNRESET:
		// any errno was taken for an outage, and a handler failing on a
		// file was redelivered for ever. An errno in the chain decides; a
		// net.Error without one (an I/O timeout, a closed connection, a
		// DNS failure) is the network's.
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return outageErrno[errno]
		}
		return true
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable {
		return true
	}
	return false
}

// outageErrno are the errnos of a network or a peer that could not be
// reached or dropped the work: a retry may find it back. EAGAIN (also
// EWOULDBLOCK) is a resource busy for now (a lock held elsewhere, a
// non-blocking socket's buffer full), as 55P03 is above; EINTR, a call a
// signal interrupted before it completed. Any other errno (EACCES, ENOENT,
// EISDIR, EROFS, ENOSPC, EMFILE...) is a file's or this process's own
// state, which no redelivery mends: dead-lettered, answered 500.
var outageErrno = map[syscall.Errno]bool{
	syscall.ECONNREFUSED: true, syscall.ECONNRESET: true, syscall.ECONNABORTED: true,
	syscall.ETIMEDOUT: true, syscall.EPIPE: true, syscall.ENOTCONN: true,
	syscall.ENETUNREACH: true, syscall.EHOSTUNREACH: true, syscall.ENETDOWN: true,
	syscall.EHOSTDOWN: true, syscall.ENETRESET: true, syscall.EADDRNOTAVAIL: true,
	syscall.EAGAIN: true, syscall.EINTR: true,
}
