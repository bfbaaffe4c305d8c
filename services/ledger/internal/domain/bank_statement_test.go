package domain_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

func TestParseStatementCSV(t *testing.T) {
	cny := money.MustLookup("CNY")
	st, err := domain.ParseStatement(domain.StatementCSV, "st-1", "CN-CLIENT-1", cny,
		"\ufeffDate,Reference,Amount,Balance\n2026-11-29,wx-1,120.50,1120.50\n\n2026-11-30,payout po-1,-20.50,1100.00\n")
	if err != nil {
		t.Fatal(err)
	}
	// Expected from the file: opening = 1120.50 - 120.50; closing = last balance.
	if !st.Opening.Equal(decimal.RequireFromString("1000")) || !st.Closing.Equal(decimal.RequireFromString("1100")) ||
		len(st.Lines) != 2 || st.Lines[1].No != 2 || st.Lines[1].Reference != "payout po-1" ||
		!st.Lines[1].Amount.Equal(decimal.RequireFromString("-20.5")) {
		t.Fatalf("statement: %+v", st)
	}
	if want := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC); !st.ClosingAt.Equal(want) || st.Date.Format(time.DateOnly) != "2026-11-30" {
		t.Fatalf("closing at %s (date %s), want %s", st.ClosingAt, st.Date, want)
	}
}

func TestParseStatementCSVNamesTheBadLine(t *testing.T) {
	cny := money.MustLookup("CNY")
	const head = "date,reference,amount,balance\n"
	for _, tc := range []struct {
		name, give, want string
	}{
		{"empty", "", "line 1: empty file"},
		{"header", "day,ref,amount,balance\n2026-11-30,a,1,1\n", "line 1: header column 1"},
		{"no lines", head, "line 2: no lines"},
		{"columns", head + "2026-11-30,a,1,1\n2026-11-30,b,2\n", "line 3: 3 columns"},
		{"date", head + "2026-11-30,a,1,1\n30/11/2026,b,2,3\n", `line 3: date "30/11/2026"`},
		{"amount", head + "2026-11-30,a,1,1\n2026-11-30,b,1.234,2.234\n", "line 3: amount: amount 1.234 has more than 2 decimal places"},
		{"balance chain", head + "2026-11-30,a,1,1\n2026-11-30,b,2,4\n", "line 3: balance 4 does not follow"},
		{"order", head + "2026-11-30,a,1,1\n2026-11-29,b,2,3\n", "line 3: date 2026-11-29 is before"},
		{"quote", head + "2026-11-30,\"a,1,1\n", "line 2:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := domain.ParseStatement(domain.StatementCSV, "st-1", "acc", cny, tc.give)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseCamt053(t *testing.T) {
	b, err := os.ReadFile("testdata/camt053_cny.xml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := domain.ParseStatement(domain.StatementCamt053, "", "", money.MustLookup("CNY"), string(b))
	if err != nil {
		t.Fatal(err)
	}
	// Booked: +200.50, -50.00 (the pending 99.00 is left out): 1000 → 1150.50.
	if st.ID != "STMT-20261130" || st.Account != "CN-CLIENT-1" || len(st.Lines) != 2 ||
		st.Lines[0].Reference != "wx-1" || st.Lines[1].Reference != "BANK-772" ||
		!st.Lines[0].Balance.Equal(decimal.RequireFromString("1200.5")) || !st.Closing.Equal(decimal.RequireFromString("1150.5")) ||
		!st.ClosingAt.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("statement: %+v", st)
	}
	if _, err := domain.ParseStatement(domain.StatementCamt053, "", "OTHER", money.MustLookup("CNY"), string(b)); err == nil ||
		!strings.Contains(err.Error(), "Stmt/Acct/Id") {
		t.Fatalf("another account: %v", err)
	}
	// Another statement id than the file's: refused (it was taken, so the
	// same file imported under two ids counted its lines twice).
	if _, err := domain.ParseStatement(domain.StatementCamt053, "OTHER", "", money.MustLookup("CNY"), string(b)); err == nil ||
		!strings.Contains(err.Error(), "Stmt/Id") {
		t.Fatalf("another statement id: %v", err)
	}
	if st, err := domain.ParseStatement(domain.StatementCamt053, "STMT-20261130", "CN-CLIENT-1", money.MustLookup("CNY"), string(b)); err != nil || st.ID != "STMT-20261130" {
		t.Fatalf("the file's own id and account given: %+v, %v", st, err)
	}
}

// An ISODateTime may come without its offset (2026-11-30T10:15:00): read
// as UTC, as pkg/iso20022 reads one. Such a booking date or closing
// date-time refused the whole statement ("want YYYY-MM-DD").
func TestParseCamt053DateTimeWithoutOffset(t *testing.T) {
	b, err := os.ReadFile("testdata/camt053_cny.xml")
	if err != nil {
		t.Fatal(err)
	}
	const (
		booked  = "<BookgDt><Dt>2026-11-30</Dt></BookgDt>\n        <AcctSvcrRef>BANK-771"
		closing = "<Amt Ccy=\"CNY\">1150.50</Amt><CdtDbtInd>CRDT</CdtDbtInd>\n        <Dt><Dt>2026-11-30</Dt></Dt>"
	)
	for _, tc := range []struct {
		name, old, new string
		closingAt      time.Time
	}{
		{"entry", booked, strings.Replace(booked, "<Dt>2026-11-30</Dt>", "<DtTm>2026-11-30T10:15:00</DtTm>", 1),
			time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"closing balance", closing, strings.Replace(closing, "<Dt><Dt>2026-11-30</Dt></Dt>", "<Dt><DtTm>2026-11-30T23:59:59</DtTm></Dt>", 1),
			time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)},
		{"closing balance, fraction", closing, strings.Replace(closing, "<Dt><Dt>2026-11-30</Dt></Dt>", "<Dt><DtTm>2026-11-30T23:59:59.5</DtTm></Dt>", 1),
			time.Date(2026, 11, 30, 23, 59, 59, 5e8, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			give := strings.Replace(string(b), tc.old, tc.new, 1)
			if give == string(b) {
				t.Fatal("the edit changed nothing")
			}
			st, err := domain.ParseStatement(domain.StatementCamt053, "", "", money.MustLookup("CNY"), give)
			if err != nil {
				t.Fatal(err)
			}
			if !st.ClosingAt.Equal(tc.closingAt) || st.Date.Format(time.DateOnly) != "2026-11-30" || len(st.Lines) != 2 {
				t.Fatalf("closing at %s, date %s, %d lines; want %s, 2026-11-30, 2", st.ClosingAt, st.Date, len(st.Lines), tc.closingAt)
			}
		})
	}
}

func TestParseCamt053NamesTheBadElement(t *testing.T) {
	b, err := os.ReadFile("testdata/camt053_cny.xml")
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"amount", `<Amt Ccy="CNY">99.00</Amt>`, `<Amt Ccy="CNY">99.00</Amt>`, ""},
		{"entry amount", `<Amt Ccy="CNY">50.00</Amt>`, `<Amt Ccy="CNY">5O.00</Amt>`, "Stmt/Ntry[2]/Amt (line 34)"},
		{"entry currency", `<Amt Ccy="CNY">200.50</Amt>`, `<Amt Ccy="USD">200.50</Amt>`, "Stmt/Ntry[0]/Amt (line 20)"},
		{"indicator", `<Amt Ccy="CNY">50.00</Amt><CdtDbtInd>DBIT`, `<Amt Ccy="CNY">50.00</Amt><CdtDbtInd>DEBIT`, "Stmt/Ntry[2]/CdtDbtInd"},
		{"closing", `<Amt Ccy="CNY">1150.50</Amt>`, `<Amt Ccy="CNY">1150.51</Amt>`, "Stmt/Bal[CLBD]: closing balance 1150.51"},
		{"no closing", `<Cd>CLBD</Cd>`, `<Cd>ITBD</Cd>`, "no closing balance"},
		{"booking date", `<BookgDt><Dt>2026-11-30</Dt></BookgDt>
        <AcctSvcrRef>BANK-771`, `<AcctSvcrRef>BANK-771`, "Stmt/Ntry[0]/BookgDt"},
		{"syntax", `</Stmt>`, `</Stmtx>`, "XML (line 42)"},
		{"root", `camt.053.001.08`, `camt.054.001.08`, "want a camt.053 Document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			give := strings.Replace(good, tc.old, tc.new, 1)
			if tc.want != "" && give == good {
				t.Fatal("the break changed nothing")
			}
			_, err := domain.ParseStatement(domain.StatementCamt053, "", "", money.MustLookup("CNY"), give)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// A camt.053 read from the inbox states its own currency: the account's,
// else its first amount's; a document stating none, or not a camt.053,
// is refused naming where.
func TestCamt053Currency(t *testing.T) {
	t.Parallel()
	const doc = `<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt><GrpHdr><MsgId>M</MsgId></GrpHdr><Stmt><Id>S</Id>%s</Stmt></BkToCstmrStmt></Document>`
	for _, tt := range []struct {
		give, want, wantErr string
	}{
		{give: fmt.Sprintf(doc, `<Acct><Id><Othr><Id>A</Id></Othr></Id><Ccy> USD </Ccy></Acct><Bal><Amt Ccy="CNY">1</Amt></Bal>`), want: "USD"},
		{give: fmt.Sprintf(doc, `<Acct><Id><Othr><Id>A</Id></Othr></Id></Acct><Bal><Amt Ccy="CNY">1</Amt></Bal>`), want: "CNY"},
		{give: fmt.Sprintf(doc, `<Acct><Id><Othr><Id>A</Id></Othr></Id></Acct><Ntry><Amt Ccy="JPY">1</Amt></Ntry>`), want: "JPY"},
		{give: fmt.Sprintf(doc, `<Acct><Id><Othr><Id>A</Id></Othr></Id></Acct>`), wantErr: "Stmt/Acct/Ccy: no currency"},
		{give: `<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.054.001.08"/>`, wantErr: "want a camt.053 Document"},
		{give: "date,reference,amount,balance\n", wantErr: "Document"},
	} {
		got, err := domain.Camt053Currency(tt.give)
		if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("Camt053Currency(%.80q) = %q, %v; want %q, %q", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}
