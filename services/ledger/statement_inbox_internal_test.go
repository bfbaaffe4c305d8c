package ledger

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubill/gpubill/pkg/bankinbox"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// counterValue is the value of the process's counter name (0 when absent).
func counterValue(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// A statement that fails for its own reason (unreadable: EACCES; root
// reads any mode, so the read is made to fail) is left in the inbox and
// counted at every pass, and the statement after it imported in the same
// pass; one over the inbox's size limit (lowered here) goes to rejected/
// with why, counted once. Not parallel: the reader and the counters are
// the process's.
func TestStatementInboxLeavesAFileThatFails(t *testing.T) {
	dir := t.TempDir()
	pool, _ := testkit.NewPool(t)
	ctx := testkit.Context(t)
	s, err := New(ctx, svc.Deps{Pool: pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.System{}, Calendar: cycles.Default()},
		WithStatementInbox(dir))
	if err != nil {
		t.Fatal(err)
	}
	xml, err := os.ReadFile("internal/domain/testdata/camt053_cny.xml")
	if err != nil {
		t.Fatal(err)
	}
	const limit = 4 << 10
	big := strings.Replace(string(xml), "<Id>STMT-20261130</Id>", "<Id>STMT-BIG</Id>"+strings.Repeat(" ", limit), 1)
	read := readStatementInboxFile
	t.Cleanup(func() { readStatementInboxFile = read })
	readStatementInboxFile = func(path string) (string, error) {
		if filepath.Base(path) == "01-locked.xml" {
			return "", &os.PathError{Op: "open", Path: path, Err: syscall.EACCES}
		}
		return bankinbox.ReadString(path, limit)
	}
	for name, b := range map[string]string{"01-locked.xml": string(xml), "02-big.xml": big, "03-stmt.xml": string(xml)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	failed, rejected := counterValue(t, "gpubill_bank_statement_inbox_files_failed_total"), counterValue(t, "gpubill_bank_statement_inbox_files_rejected_total")
	for range 2 {
		if err := s.ScanStatementInbox(ctx); err != nil {
			t.Fatalf("scan: %v", err)
		}
	}
	for _, p := range []string{"01-locked.xml", "rejected/02-big.xml", "rejected/02-big.xml.error", "processed/03-stmt.xml"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if why, err := os.ReadFile(filepath.Join(dir, "rejected/02-big.xml.error")); err != nil || !strings.Contains(string(why), bankinbox.ErrTooBig.Error()) {
		t.Errorf("the rejection says %q (%v), want %q", why, err, bankinbox.ErrTooBig)
	}
	if n := counterValue(t, "gpubill_bank_statement_inbox_files_failed_total") - failed; n != 2 {
		t.Errorf("gpubill_bank_statement_inbox_files_failed_total rose by %v over two passes, want 2", n)
	}
	if n := counterValue(t, "gpubill_bank_statement_inbox_files_rejected_total") - rejected; n != 1 {
		t.Errorf("gpubill_bank_statement_inbox_files_rejected_total rose by %v, want 1 (the file, once)", n)
	}
	var by string
	if err := pool.QueryRow(ctx, `select string_agg(statement_id || ' ' || imported_by, ',') from ledger.bank_statements`).Scan(&by); err != nil {
		t.Fatal(err)
	}
	if by != "STMT-20261130 inbox:03-stmt.xml" {
		t.Errorf("statements %q, want STMT-20261130 from 03-stmt.xml alone", by)
	}

	// Readable again: imported at the next pass (the same statement as
	// 03-stmt.xml's), and moved.
	readStatementInboxFile = read
	if err := s.ScanStatementInbox(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "processed/01-locked.xml")); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "01-locked.xml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("01-locked.xml still in the inbox: %v", err)
	}
}
