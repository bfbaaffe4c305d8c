package apperr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/reqid"
)

// A database that refuses the work for a while (too many clients at a
// cycle's close, a failover, a serialization conflict) is the request's
// fault no more than a consumer's message's: the client is answered 503,
// retry later, not a 500 it cannot tell from a defect.
func TestToStatusTransientDatabaseIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"too many clients", &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}, codes.Unavailable},
		{"read-only while failing over", &pgconn.PgError{Code: "25006"}, codes.Unavailable},
		{"serialization", &pgconn.PgError{Code: "40001"}, codes.Unavailable},
		{"starting up", &pgconn.PgError{Code: "57P03"}, codes.Unavailable},
		{"connection lost", fmt.Errorf("post: %w", io.ErrUnexpectedEOF), codes.Unavailable},
		{"unique violation stays internal", &pgconn.PgError{Code: "23505"}, codes.Internal},
		{"a defect stays internal", errors.New("nil map"), codes.Internal},
		{"deadline stays a deadline", fmt.Errorf("q: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("post deposit: %w", tc.err)
			if got := status.Code(ToStatus(err)); got != tc.want {
				t.Fatalf("ToStatus: %v, want %v", got, tc.want)
			}
		})
	}
	var log strings.Builder
	err := Public(context.Background(), slog.New(slog.NewTextHandler(&log, nil)), "/ledger/Post",
		fmt.Errorf("post: %w", &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}))
	s, _ := status.FromError(err)
	if s.Code() != codes.Unavailable || strings.Contains(s.Message(), "clients") || !strings.Contains(s.Message(), "retry later") {
		t.Fatalf("Public: %v %q, want Unavailable with the generic retry message", s.Code(), s.Message())
	}
	if !strings.Contains(log.String(), "too many clients") {
		t.Fatalf("the detail is not logged: %s", log.String())
	}
}

// Mask keeps the last four characters, whole: a webhook secret of Chinese
// characters cut inside one was invalid UTF-8, which the answer's encoding
// refused (a 500 after the webhook was stored).
func TestMask(t *testing.T) {
	tests := []struct{ give, want string }{
		{"6222000012340002", "****0002"},
		{"12345", "****2345"},
		{"1234", "****"},
		{"12", "**"},
		{"", ""},
		{"钱包密钥钱包密钥钱包密钥钱包密钥", "****钱包密钥"},
		{"密钥", "**"},
		{"ab密钥cd", "****密钥cd"},
		{"标识😀😀😀", "****识😀😀😀"},
	}
	for _, tt := range tests {
		if got := Mask(tt.give); got != tt.want || !utf8.ValidString(got) {
			t.Errorf("Mask(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// A context's deadline is the caller's own bound, not a dependency refusing
// the work: a statement cut by it may be the work's own doing (like a
// statement timeout, 57014), so a consumer counts it toward dead-lettering.
// context.DeadlineExceeded is a net.Error and a pgconn.Timeout, and was
// taken as an outage: a message whose handler always ran past its bound
// was retried for ever. A database that cannot be reached stays an outage,
// whether it refuses the connection or never answers it before the
// deadline.
func TestTransientDeadlineIsNotAnOutage(t *testing.T) {
	refused, silent := freeAddr(t), silentAddr(t)
	connect := func(addr string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		conn, err := pgconn.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
		if err == nil {
			conn.Close(ctx)
			t.Fatalf("connected to %s", addr)
		}
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a handler's deadline", fmt.Errorf("apply: %w", context.DeadlineExceeded), false},
		{"a statement cut by the deadline", fmt.Errorf("wallet: %w", deadlineStatement(t)), false},
		{"connection refused", connect(refused), true},
		{"connection never answered before the deadline", connect(silent), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.want {
				t.Fatalf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// deadlineStatement is the error of a statement that outran its context
// on a live connection (pg_sleep past a 50 ms deadline).
func deadlineStatement(t *testing.T) error {
	t.Helper()
	conn, err := pgconn.Connect(context.Background(), "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = conn.Exec(ctx, "select pg_sleep(2)").ReadAll()
	if err == nil {
		t.Fatal("pg_sleep(2) finished within 50 ms")
	}
	return err
}

// freeAddr is a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// silentAddr is a loopback address that accepts connections and never
// answers (a database hung at start-up).
func silentAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var conns []net.Conn
		for {
			c, err := l.Accept()
			if err != nil { // closed: the test ended
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	return l.Addr().String()
}

// TestPublicDeadlineExceededCarriesNoDetail: a request cut by its deadline
// (a REST client's Grpc-Timeout, a gRPC deadline) or cancelled answers a
// generic message with the request id, the detail logged. Its status
// carried the whole chain ("wallet r-1: timeout: context deadline
// exceeded"), which names what the service was doing when time ran out.
func TestPublicDeadlineExceededCarriesNoDetail(t *testing.T) {
	for _, tc := range []struct {
		give     error
		wantCode codes.Code
		wantMsg  string
	}{
		{fmt.Errorf("wallet r-1: %w", deadlineStatement(t)), codes.DeadlineExceeded, "deadline exceeded (request id req-1)"},
		{fmt.Errorf("balances of CNY: %w", context.Canceled), codes.Canceled, "request canceled (request id req-1)"},
	} {
		t.Run(tc.wantCode.String(), func(t *testing.T) {
			var log strings.Builder
			s := status.Convert(Public(reqid.With(context.Background(), "req-1"), slog.New(slog.NewTextHandler(&log, nil)), "/ledger/Wallet", tc.give))
			if s.Code() != tc.wantCode || s.Message() != tc.wantMsg {
				t.Errorf("Public: %v %q, want %v %q", s.Code(), s.Message(), tc.wantCode, tc.wantMsg)
			}
			if detail := strings.SplitN(tc.give.Error(), ":", 2)[0]; !strings.Contains(log.String(), detail) || !strings.Contains(log.String(), "req-1") {
				t.Errorf("the detail %q is not logged under the request id: %s", detail, log.String())
			}
		})
	}
}
