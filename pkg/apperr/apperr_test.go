package apperr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
