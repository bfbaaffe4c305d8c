// Package bankinbox reads a directory a bank's SFTP client drops files
// into (payout's GPUBILL_BANK_INBOX_DIR, the ledger's
// GPUBILL_BANK_STATEMENT_INBOX_DIR): each file imported once, then moved
// out of the way; none dropped without a trace.
package bankinbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// FilesMax bounds one pass over an inbox; the rest wait a tick.
const FilesMax = 100

// ErrTooBig marks a file over its inbox's size limit: moved to rejected/.
var ErrTooBig = errors.New("bank file over the size limit")

// ErrUnreadable marks an inbox file that could not be read (EACCES: the
// inbox itself was listed): left in the inbox.
var ErrUnreadable = errors.New("unreadable")

// Inbox is one inbox directory and what imports its files.
type Inbox struct {
	Dir string
	// What names the inbox in the log ("bank inbox": "bank inbox file
	// rejected", "bank inbox file not imported: …").
	What string
	// Import reads the file at path (ReadFile, ReadString) and imports it;
	// name is the file's own (StoredName for what is recorded). Imported
	// before (a duplicate), it is imported.
	Import func(ctx context.Context, name, path string) error
	// Malformed reports whether an error of Import refuses the file as a
	// whole, for what it holds: no pass will ever import it.
	Malformed func(error) bool
	// Failed counts the files left in place by a failure of their own,
	// each attempt; Rejected the files moved to rejected/, each once.
	Failed, Rejected prometheus.Counter
	Log              *slog.Logger
}

// Scan imports the files in the inbox directory, oldest name first
// (importFile); a failure that is not the file's own (the database down)
// stops the pass, every file left for the next one.
func (in *Inbox) Scan(ctx context.Context) error {
	if in.Dir == "" {
		return nil
	}
	des, err := os.ReadDir(in.Dir)
	if err != nil {
		return fmt.Errorf("%s: %w", in.What, err)
	}
	n := 0
	for _, de := range des {
		if !de.Type().IsRegular() || strings.HasPrefix(de.Name(), ".") {
			continue // subdirectories, and files the bank's client is still writing under a dot name
		}
		if n++; n > FilesMax {
			break
		}
		if err := in.importFile(ctx, de.Name()); err != nil {
			return err
		}
	}
	return nil
}

// importFile imports dir/name: imported (a duplicate too), it moves to
// processed/; malformed or too big, to rejected/ with a .error file saying
// why, counted (Rejected).
// A failure of the file's own (OwnFailure: unreadable, or refused by the
// database for what it holds) is logged and counted (Failed), and the
// file left where it is: the pass goes on to the next file. Returned, it
// stopped every pass at the same file, the directory read in name order:
// no bank file sorted after it was ever imported. Left, not rejected: a
// failure that is no one file's (a schema not migrated) would have
// rejected every file; once its cause is fixed the next pass imports it.
func (in *Inbox) importFile(ctx context.Context, name string) error {
	err := in.Import(ctx, name, filepath.Join(in.Dir, name))
	switch {
	case err == nil:
		return MoveAside(in.Dir, "processed", name, nil)
	case errors.Is(err, ErrTooBig) || (in.Malformed(err) && !errors.Is(err, ErrUnreadable)):
		in.Log.Warn(in.What+" file rejected", "file", StoredName(name), "err", err)
		if err := MoveAside(in.Dir, "rejected", name, []byte(err.Error()+"\n")); err != nil {
			return err
		}
		in.Rejected.Inc() // once: it left the inbox
		return nil
	case OwnFailure(err):
		in.Failed.Inc()
		in.Log.Warn(in.What+" file not imported: left in the inbox, the next files read", "file", StoredName(name), "err", err)
		return nil
	}
	return fmt.Errorf("%s %s: %w", in.What, StoredName(name), err)
}

// OwnFailure reports whether err, met importing one inbox file, is that
// file's own: unreadable, or anything but the database or the network
// refusing the work (apperr.Transient) and the inbox stopping (ctx
// ended). Those stop the pass: every other file would meet them too.
// Unreadable first: a read that failed is the file's own failure whatever
// its errno (apperr.Transient takes a network's, EAGAIN or EINTR for an
// outage, and one of those on a file would stop the pass).
func OwnFailure(err error) bool {
	if errors.Is(err, ErrUnreadable) {
		return true
	}
	return !apperr.Transient(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// Unreadable marks err, met reading an inbox file, as ErrUnreadable
// (ErrTooBig, or an error marked already, as it is).
func Unreadable(err error) error {
	if err == nil || errors.Is(err, ErrTooBig) || errors.Is(err, ErrUnreadable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnreadable, err)
}

// StoredName is the name a bank file is recorded under (text): its own
// when it is UTF-8 without NUL, else its bytes escaped, every one outside
// printable ASCII (and the backslash) as \xNN: 01-\xbb\xd8\xb5\xa5.xml
// for GBK 01-回单.xml, what printf(1) turns back into the name of the file
// in processed/. PostgreSQL refuses the bytes themselves (22021): a GBK
// name from a Chinese bank's SFTP client failed every import of its file.
// Every byte, not strconv.Quote's runes: GBK bytes that happen to be
// UTF-8 came out as an Arabic letter.
func StoredName(name string) string {
	if utf8.ValidString(name) && !strings.ContainsRune(name, 0) {
		return name
	}
	var b strings.Builder
	for i := range len(name) {
		if c := name[i]; c >= 0x20 && c < 0x7f && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	return b.String()
}

// ReadFile reads the inbox file at path, up to bytesMax bytes (ErrTooBig
// past them; any other failure ErrUnreadable).
func ReadFile(path string, bytesMax int64) ([]byte, error) {
	var b []byte
	err := read(path, bytesMax, func(size int64, r io.Reader) error {
		b = make([]byte, 0, size)
		w := bytesWriter{&b}
		_, err := io.Copy(w, r)
		return err
	})
	return b, err
}

// ReadString is ReadFile into a string, read once: converting ReadFile's
// bytes copied the file again (a statement is parsed from its text).
func ReadString(path string, bytesMax int64) (string, error) {
	var b strings.Builder
	err := read(path, bytesMax, func(size int64, r io.Reader) error {
		b.Grow(int(size))
		_, err := io.Copy(&b, r)
		return err
	})
	return b.String(), err
}

type bytesWriter struct{ b *[]byte }

func (w bytesWriter) Write(p []byte) (int, error) {
	*w.b = append(*w.b, p...)
	return len(p), nil
}

// read opens path and hands fill its size and a reader of it, refusing a
// file over bytesMax (read through a limit too: one that grew past its
// size as read is refused, not read whole).
func read(path string, bytesMax int64, fill func(size int64, r io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return Unreadable(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Unreadable(err)
	}
	if st.Size() > bytesMax {
		return fmt.Errorf("%s: %d bytes, over %d: %w", path, st.Size(), bytesMax, ErrTooBig)
	}
	lr := &io.LimitedReader{R: f, N: bytesMax + 1}
	if err := fill(st.Size(), lr); err != nil {
		return Unreadable(err)
	}
	if lr.N == 0 {
		return fmt.Errorf("%s: over %d bytes as read: %w", path, bytesMax, ErrTooBig)
	}
	return nil
}

// MoveAside moves dir/name into dir/sub (a name taken gets a time suffix),
// with an optional note beside it (name.error).
func MoveAside(dir, sub, name string, note []byte) error {
	to := filepath.Join(dir, sub)
	if err := os.MkdirAll(to, 0o750); err != nil {
		return err
	}
	dst := filepath.Join(to, name)
	if _, err := os.Stat(dst); err == nil {
		dst = filepath.Join(to, fmt.Sprintf("%s.%d", name, time.Now().UnixNano()))
	}
	if note != nil {
		if err := os.WriteFile(dst+".error", note, 0o640); err != nil {
			return err
		}
	}
	return os.Rename(filepath.Join(dir, name), dst)
}
