package ledger_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger"
)

// inboxFixture is a ledger reading the bank statement inbox dir, served
// over REST with a finance client.
func inboxFixture(t *testing.T) (*fixture, string, restClient) {
	t.Helper()
	dir := t.TempDir()
	pool, _ := testkit.NewPool(t)
	f := newFixtureOn(t, pool, nil, clock.System{}, ledger.WithStatementInbox(dir))
	base, secret := startServer(t, f)
	tok, err := auth.Issue(secret, auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return f, dir, restClient{t: t, base: base, token: tok, header: map[string]string{"Content-Type": "application/xml"}}
}

// drop writes a file into the inbox as the bank's client does.
func drop(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o640); err != nil {
		t.Fatal(err)
	}
}

// wantFiles fails t unless each path under dir exists, and each of gone
// does not.
func wantFiles(t *testing.T, dir string, there, gone []string) {
	t.Helper()
	for _, p := range there {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range gone {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s is there, want it gone", p)
		}
	}
}

// A camt.053 dropped in the inbox is imported (its currency, id and
// account its own) and moved to processed/; the same file uploaded after
// is answered as the statement the inbox imported, and one uploaded
// before and dropped after is moved without a second statement. A dot
// file is left as unfinished; a malformed one goes to rejected/ with why,
// and the file after it is imported.
func TestStatementInbox(t *testing.T) {
	t.Parallel()
	f, dir, finance := inboxFixture(t)
	xml, err := os.ReadFile("internal/domain/testdata/camt053_cny.xml")
	if err != nil {
		t.Fatal(err)
	}
	other := []byte(strings.Replace(string(xml), "<Id>STMT-20261130</Id>", "<Id>STMT-20261130-B</Id>", 1))
	uploaded := []byte(strings.Replace(string(xml), "<Id>STMT-20261130</Id>", "<Id>STMT-UPLOADED</Id>", 1))
	malformed := []byte(strings.Replace(string(xml), ">1150.50<", ">1150.51<", 1))
	code, before := finance.do("POST", "/v1/bank-statements?currency=CNY", string(uploaded))
	if code != 200 {
		t.Fatalf("upload: %d %s", code, before)
	}
	drop(t, dir, "01-stmt.xml", xml)
	drop(t, dir, "02-malformed.xml", malformed)
	drop(t, dir, "03-other.xml", other)
	drop(t, dir, "04-uploaded.xml", uploaded)
	drop(t, dir, ".05-partial.xml", xml[:100])
	if err := f.svc.ScanStatementInbox(f.ctx); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, dir, []string{"processed/01-stmt.xml", "rejected/02-malformed.xml", "rejected/02-malformed.xml.error",
		"processed/03-other.xml", "processed/04-uploaded.xml", ".05-partial.xml"},
		[]string{"01-stmt.xml", "02-malformed.xml", "03-other.xml", "04-uploaded.xml"})
	why, err := os.ReadFile(filepath.Join(dir, "rejected/02-malformed.xml.error"))
	if err != nil || !strings.Contains(string(why), "Stmt/Bal[CLBD]") {
		t.Errorf("the rejection says %q (%v), want the element at fault", why, err)
	}
	rows, err := f.pool.Query(f.ctx, `select statement_id || ' ' || imported_by || ' ' || line_count || ' ' || closing_balance
		from ledger.bank_statements order by statement_id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"STMT-20261130 inbox:01-stmt.xml 2 1150.5", "STMT-20261130-B inbox:03-other.xml 2 1150.5", "STMT-UPLOADED finance 2 1150.5"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("statements:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The inbox's statement uploaded: the same statement, as the inbox
	// imported it.
	code, body := finance.do("POST", "/v1/bank-statements?currency=CNY&statement_id=STMT-20261130&account=CN-CLIENT-1", string(xml))
	var st map[string]any
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || st["statement_id"] != "STMT-20261130" ||
		st["imported_by"] != "inbox:01-stmt.xml" {
		t.Fatalf("the inbox's statement uploaded: %d %s (%v), want the inbox's", code, body, err)
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.bank_statement_lines where statement_id = 'STMT-20261130'`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d lines of STMT-20261130 (%v), want 2 (its booked entries)", n, err)
	}
}

// One replica reads the inbox at a time: while another holds its lock,
// a pass leaves every file; once released, the next imports them.
func TestStatementInboxOneReplicaAtATime(t *testing.T) {
	t.Parallel()
	f, dir, _ := inboxFixture(t)
	xml, err := os.ReadFile("internal/domain/testdata/camt053_cny.xml")
	if err != nil {
		t.Fatal(err)
	}
	other, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	var held bool
	if err := other.QueryRow(f.ctx, `select pg_try_advisory_lock(hashtext('gpubill.ledger.bank_statement_inbox'))`).Scan(&held); err != nil || !held {
		t.Fatalf("the other replica's lock: %v %v", held, err)
	}
	drop(t, dir, "01-stmt.xml", xml)
	if err := f.svc.ScanStatementInbox(f.ctx); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, dir, []string{"01-stmt.xml"}, []string{"processed/01-stmt.xml"})
	if _, err := other.Exec(f.ctx, `select pg_advisory_unlock(hashtext('gpubill.ledger.bank_statement_inbox'))`); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.ScanStatementInbox(f.ctx); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, dir, []string{"processed/01-stmt.xml"}, []string{"01-stmt.xml"})
}

// inboxCutTransfers is a day's debits past the upload's 64 MiB: 67 000
// payouts of two bank-file cutoffs (payoutCutTransfersMax each) booked on
// one day's camt.053.
const inboxCutTransfers = 67_000

// A day's camt.053 above the upload's 64 MiB (a REST client could not send
// it: 413) is imported whole from the inbox, every line stored.
func TestStatementInboxAboveTheUploadLimit(t *testing.T) {
	f, dir, _ := inboxFixture(t)
	file, closing := fullCutCamt053(inboxCutTransfers, "123.45")
	if len(file) <= statementBodyBytesMax {
		t.Fatalf("the statement is %d bytes, not above the upload's %d", len(file), statementBodyBytesMax)
	}
	drop(t, dir, "stmt-20261130.xml", file)
	stop := peakHeap()
	start := time.Now()
	err := f.svc.ScanStatementInbox(f.ctx)
	took, peak := time.Since(start), stop()
	t.Logf("camt.053 of %d entries, %.1f MiB: imported from the inbox in %s, heap in use at most %.0f MiB above its start (%.1f times the file)",
		inboxCutTransfers, float64(len(file))/(1<<20), took.Round(time.Millisecond), float64(peak)/(1<<20), float64(peak)/float64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	wantFiles(t, dir, []string{"processed/stmt-20261130.xml"}, []string{"stmt-20261130.xml", "rejected/stmt-20261130.xml"})
	var n int
	var sum, closed decimal.Decimal
	if err := f.pool.QueryRow(f.ctx, `select count(*), coalesce(sum(l.amount), 0), coalesce(min(s.closing_balance), 0) from ledger.bank_statement_lines l
		join ledger.bank_statements s using (statement_id) where statement_id = 'STMT-CUT-20261130'`).Scan(&n, &sum, &closed); err != nil {
		t.Fatal(err)
	}
	if want := decimal.RequireFromString("-123.45").Mul(decimal.NewFromInt(inboxCutTransfers)); n != inboxCutTransfers || !sum.Equal(want) || !closed.Equal(closing) {
		t.Fatalf("%d lines summing to %s, closing %s; want %d summing to %s, closing %s", n, sum, closed, inboxCutTransfers, want, closing)
	}
}
