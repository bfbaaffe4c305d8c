package natsx

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Unavailable reports whether err says a dependency could not be reached or
// did not accept the work (the database down, starting up or restarting, a
// connection lost, a peer service unavailable, a serialization conflict).
// Such a failure is not the message's fault, however often it repeats: it
// never counts toward dead-lettering, or a message that failed through an
// outage would be dead-lettered the moment the database came back (the
// chaos test saw a usage batch dead-lettered with "the database system is
// not yet accepting connections").
func Unavailable(err error) bool {
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
		case pe.Code == "53300", pe.Code == "40001", pe.Code == "40P01": // too many connections, serialization, deadlock
			return true
		}
		return false
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
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
