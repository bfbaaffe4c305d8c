package ledger_test

import (
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
)

// Through REST: a CSV statement as the raw body, a camt.053 as the raw body
// and a CSV in the JSON form are imported; the same file again answers the
// same statement; another file under the same id is a 409; a malformed file
// is a 400 naming the line and stores nothing; an auditor lists but may not
// import.
func TestRESTBankStatements(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	tok := func(role string) string {
		s, err := auth.Issue(secret, role, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	finance := restClient{t: t, base: base, token: tok(auth.RoleFinance), header: map[string]string{"Content-Type": "text/csv"}}
	const csv = "date,reference,amount,balance\n2026-11-29,wx-1,120.50,1120.50\n2026-11-30,po-1,-20.50,1100.00\n"
	q := "?statement_id=st-1&currency=CNY&account=CN-CLIENT-1"
	code, first := finance.do("POST", "/v1/bank-statements"+q, csv)
	if code != 200 {
		t.Fatalf("import csv: %d %s", code, first)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(first), &st); err != nil {
		t.Fatal(err)
	}
	if st["statement_id"] != "st-1" || st["format"] != "csv" || st["opening_balance"] != "1000.00" || st["closing_balance"] != "1100.00" ||
		st["line_count"] != float64(2) || st["statement_date"] != "2026-11-30" || st["imported_by"] != "finance" {
		t.Fatalf("imported: %s", first)
	}
	code, again := finance.do("POST", "/v1/bank-statements"+q, csv)
	if code != 200 || again != first {
		t.Fatalf("the same file again: %d %s, want the first answer %s", code, again, first)
	}
	code, body := finance.do("POST", "/v1/bank-statements"+q, strings.Replace(csv, "-20.50,1100.00", "-20.00,1100.50", 1))
	if code != 409 {
		t.Fatalf("another file under st-1: %d %s, want 409", code, body)
	}
	// Malformed: the third line's balance does not follow; nothing is stored.
	bad := "date,reference,amount,balance\n2026-11-30,a,1.00,1.00\n2026-11-30,b,2.00,4.00\n"
	code, body = finance.do("POST", "/v1/bank-statements?statement_id=st-bad&currency=CNY&account=CN-CLIENT-1", bad)
	if code != 400 || !strings.Contains(body, "line 3") || !strings.Contains(body, `"field":"content"`) {
		t.Fatalf("malformed: %d %s, want 400 naming line 3", code, body)
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.bank_statements where statement_id = 'st-bad'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a malformed statement left %d rows (%v)", n, err)
	}
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.bank_statement_lines where statement_id = 'st-bad'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a malformed statement left %d lines (%v)", n, err)
	}

	xml, err := os.ReadFile("internal/domain/testdata/camt053_cny.xml")
	if err != nil {
		t.Fatal(err)
	}
	finance.header["Content-Type"] = "application/xml"
	code, body = finance.do("POST", "/v1/bank-statements?currency=CNY", string(xml))
	if code != 200 || !strings.Contains(body, `"statement_id":"STMT-20261130"`) || !strings.Contains(body, `"closing_balance":"1150.50"`) ||
		!strings.Contains(body, `"format":"camt053"`) {
		t.Fatalf("import camt.053: %d %s", code, body)
	}
	finance.header["Content-Type"] = "application/json"
	js, err := json.Marshal(map[string]string{"statement_id": "st-2", "currency": "CNY", "account": "CN-CLIENT-1", "format": "csv",
		"content": "date,reference,amount,balance\n2026-12-01,wx-2,10.00,1110.00\n"})
	if err != nil {
		t.Fatal(err)
	}
	code, body = finance.do("POST", "/v1/bank-statements", string(js))
	if code != 200 || !strings.Contains(body, `"closing_balance":"1110.00"`) {
		t.Fatalf("import JSON form: %d %s", code, body)
	}
	var lines int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.bank_statement_lines`).Scan(&lines); err != nil || lines != 2+2+1 {
		t.Fatalf("%d statement lines stored (%v), want 5", lines, err)
	}

	auditor := restClient{t: t, base: base, token: tok(auth.RoleAuditor)}
	code, body = auditor.do("GET", "/v1/bank-statements?currency=CNY&page_size=2", "")
	var page struct {
		Statements []struct {
			StatementID string `json:"statement_id"`
		} `json:"statements"`
		Next string `json:"next_page_token"`
	}
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil || len(page.Statements) != 2 ||
		page.Statements[0].StatementID != "st-2" || page.Next == "" {
		t.Fatalf("list: %d %s", code, body)
	}
	code, body = auditor.do("GET", "/v1/bank-statements?currency=CNY&page_size=2&page_token="+url.QueryEscape(page.Next), "")
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil || len(page.Statements) != 1 || page.Next != "" {
		t.Fatalf("list page 2: %d %s", code, body)
	}
	code, body = auditor.do("POST", "/v1/bank-statements", string(js))
	if code != 403 {
		t.Fatalf("an auditor imported: %d %s", code, body)
	}
}
