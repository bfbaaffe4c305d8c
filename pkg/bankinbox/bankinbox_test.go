package bankinbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Only a file's own failures are skipped: the database down (a
// connection refused) stops the pass, and the file stays for the next.
func TestInboxFailureIsTheFiles(t *testing.T) {
	t.Parallel()
	for i, c := range []struct {
		err  error
		file bool
	}{
		{fmt.Errorf("%w: %w", ErrUnreadable, &os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}), true},
		{Unreadable(&os.PathError{Op: "read", Path: "x", Err: syscall.EINTR}), true},                // a file's errno an outage would have
		{fmt.Errorf("import: %w", &os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}), true}, // unmarked too: an errno of a file is no outage
		{fmt.Errorf("import: %w", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), false},
		{fmt.Errorf("import: %w", &pgconn.PgError{Code: "23514"}), true},
		{fmt.Errorf("import: %w", &pgconn.PgError{Code: "22021"}), true},
		{fmt.Errorf("import: %w", &pgconn.PgError{Code: "57P03"}), false},
		{fmt.Errorf("import: %w", &pgconn.ConnectError{}), false},
		{fmt.Errorf("import: %w", context.Canceled), false},
	} {
		if got := OwnFailure(c.err); got != c.file {
			t.Errorf("case %d: OwnFailure = %v, want %v", i, got, c.file)
		}
	}
}

// A file is read whole up to its limit and refused (ErrTooBig) one byte
// over it, as bytes and as text; a file missing is unreadable.
func TestReadLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	at, over := filepath.Join(dir, "at"), filepath.Join(dir, "over")
	if err := os.WriteFile(at, []byte("0123456789"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(over, []byte("0123456789A"), 0o640); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(at, 10); err != nil || string(b) != "0123456789" {
		t.Errorf("ReadFile at the limit: %q %v", b, err)
	}
	if s, err := ReadString(at, 10); err != nil || s != "0123456789" {
		t.Errorf("ReadString at the limit: %q %v", s, err)
	}
	if _, err := ReadFile(over, 10); !errors.Is(err, ErrTooBig) {
		t.Errorf("ReadFile over the limit: %v, want ErrTooBig", err)
	}
	if _, err := ReadString(over, 10); !errors.Is(err, ErrTooBig) {
		t.Errorf("ReadString over the limit: %v, want ErrTooBig", err)
	}
	if _, err := ReadString(filepath.Join(dir, "missing"), 10); !errors.Is(err, ErrUnreadable) {
		t.Errorf("ReadString of a missing file: %v, want ErrUnreadable", err)
	}
}

// A pass imports the files in name order and moves them to processed/,
// skips dot files, moves a malformed file to rejected/ (counted once),
// leaves a file failing for its own reason (counted each pass) and reads
// the files after both; an outage stops the pass.
func TestScan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, n := range []string{"01-ok", "02-bad", "03-fails", "04-ok", ".05-partial"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	errBad := errors.New("malformed")
	var imported []string
	failed, rejected := prometheus.NewCounter(prometheus.CounterOpts{Name: "f"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "r"})
	in := Inbox{Dir: dir, What: "test inbox", Failed: failed, Rejected: rejected, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Malformed: func(err error) bool { return errors.Is(err, errBad) },
		Import: func(_ context.Context, name, path string) error {
			b, err := ReadString(path, 100)
			switch {
			case err != nil:
				return err
			case b == "02-bad":
				return errBad
			case b == "03-fails":
				return &pgconn.PgError{Code: "23514"}
			}
			imported = append(imported, name)
			return nil
		}}
	for range 2 {
		if err := in.Scan(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(imported) != "[01-ok 04-ok]" {
		t.Errorf("imported %v, want [01-ok 04-ok]", imported)
	}
	for _, p := range []string{"processed/01-ok", "processed/04-ok", "rejected/02-bad", "rejected/02-bad.error", "03-fails", ".05-partial"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Error(err)
		}
	}
	if f, r := testutil.ToFloat64(failed), testutil.ToFloat64(rejected); f != 2 || r != 1 {
		t.Errorf("failed %v rejected %v, want 2 (each pass) and 1 (once)", f, r)
	}
	in.Import = func(context.Context, string, string) error { return &pgconn.ConnectError{} }
	if err := in.Scan(context.Background()); err == nil {
		t.Error("a database down did not stop the pass")
	}
}
