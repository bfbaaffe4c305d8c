package domain

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/money"
)

// Statement formats.
const (
	StatementCSV     = "csv"
	StatementCamt053 = "camt053"
)

// Limits on an imported statement.
const (
	statementLinesMax     = 100_000
	statementReferenceMax = 256
	statementIDMax        = 128
	statementAccountMax   = 64
)

// BankStatement is a statement of the segregated client bank account: the
// bank's own record of the client money it holds.
type BankStatement struct {
	ID       string
	Account  string
	Currency string
	Format   string
	Date     time.Time // the closing balance's date (00:00 UTC)
	// ClosingAt is the instant the closing balance holds at: the end of Date
	// (UTC), or the closing balance's date-time when the bank gives one (one
	// without its offset read as UTC, iso20022.ParseDateTime).
	ClosingAt time.Time
	Opening   decimal.Decimal // signed: + is money held
	Closing   decimal.Decimal
	Lines     []StatementLine
}

// ImportedStatement is a statement as stored (its lines apart).
type ImportedStatement struct {
	BankStatement
	LineCount     int
	ContentSHA256 []byte
	ImportedAt    time.Time
	ImportedBy    string
}

// StatementLine is one booked movement of the account.
type StatementLine struct {
	No        int // 1-based, file order
	BookedOn  time.Time
	Reference string
	Amount    decimal.Decimal // + money in, − money out
	Balance   decimal.Decimal // after this line
}

// StatementError says where a statement file is malformed: a CSV line
// ("line 4") or a camt.053 element ("Stmt/Ntry[2]/Amt (line 41)").
type StatementError struct {
	Where  string
	Reason string
}

func (e *StatementError) Error() string { return e.Where + ": " + e.Reason }

func stmtErr(where, format string, args ...any) error {
	return &StatementError{Where: where, Reason: fmt.Sprintf(format, args...)}
}

// CheckStatementID checks an importer-given statement id (also an account id).
func CheckStatementID(field, s string, max int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return fmt.Errorf("%s is required", field)
	case len(s) > max:
		return fmt.Errorf("%s is longer than %d bytes", field, max)
	}
	for _, r := range s {
		if r < 0x21 || r == 0x7f {
			return fmt.Errorf("%s may not contain spaces or control characters", field)
		}
	}
	return nil
}

// ParseStatement parses a statement file in format for currency cur. id and
// account may be empty for camt.053, which carries both; when given they must
// agree with the file.
func ParseStatement(format, id, account string, cur money.Currency, content string) (*BankStatement, error) {
	if !utf8.ValidString(content) {
		return nil, stmtErr("content", "not valid UTF-8")
	}
	var st *BankStatement
	var err error
	switch format {
	case StatementCSV:
		st, err = parseStatementCSV(cur, content)
	case StatementCamt053:
		st, err = parseCamt053(cur, content)
	default:
		return nil, stmtErr("format", "%q: want csv or camt053", format)
	}
	if err != nil {
		return nil, err
	}
	st.Format, st.Currency = format, cur.Code
	if id != "" {
		// camt.053 names its statement (Stmt/Id): another id took the same
		// file twice, under two ids, its lines twice in reconciliation.
		if st.ID != "" && st.ID != id {
			return nil, stmtErr("Stmt/Id", "the statement is %q, not %q", st.ID, id)
		}
		st.ID = id
	}
	if account != "" {
		if st.Account != "" && st.Account != account {
			return nil, stmtErr("Stmt/Acct/Id", "the statement is of account %q, not %q", st.Account, account)
		}
		st.Account = account
	}
	if err := CheckStatementID("statement_id", st.ID, statementIDMax); err != nil {
		return nil, stmtErr("statement_id", "%s", err.Error())
	}
	if err := CheckStatementID("account", st.Account, statementAccountMax); err != nil {
		return nil, stmtErr("account", "%s", err.Error())
	}
	return st, st.check()
}

// check asserts what every statement must satisfy whatever its format: the
// lines take the opening balance to the closing one.
func (s *BankStatement) check() error {
	bal := s.Opening
	for _, l := range s.Lines {
		bal = bal.Add(l.Amount)
		if !bal.Equal(l.Balance) {
			return stmtErr(fmt.Sprintf("entry %d", l.No), "balance %s does not follow from the previous balance and amount (%s)", l.Balance, bal)
		}
	}
	if !bal.Equal(s.Closing) {
		return stmtErr("closing balance", "%s, but the opening balance %s and the lines make %s", s.Closing, s.Opening, bal)
	}
	return nil
}

func parseDate(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		return d, nil
	}
	t, ok := iso20022.ParseDateTime(s) // its date where it was written
	if !ok {
		return time.Time{}, fmt.Errorf("date %q: want YYYY-MM-DD or an ISO date-time", s)
	}
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC), nil
}

func checkReference(s string) error {
	if len(s) > statementReferenceMax {
		return fmt.Errorf("reference longer than %d bytes", statementReferenceMax)
	}
	if strings.ContainsRune(s, 0) {
		return errors.New("reference contains a NUL byte")
	}
	return nil
}

var csvHeader = []string{"date", "reference", "amount", "balance"}

// parseStatementCSV reads `date,reference,amount,balance`: one booked line
// per row, amount signed (+ in, − out), balance after the row. The opening
// balance is the first row's balance less its amount.
func parseStatementCSV(cur money.Currency, content string) (*BankStatement, error) {
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(content, "\ufeff")))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	if err := readCSVHeader(r); err != nil {
		return nil, err
	}
	st := &BankStatement{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvErr(err)
		}
		fileLine, _ := r.FieldPos(0)
		where := fmt.Sprintf("line %d", fileLine)
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // a blank line
		}
		if len(rec) != len(csvHeader) {
			return nil, stmtErr(where, "%d columns: want 4 (date,reference,amount,balance)", len(rec))
		}
		if err := st.addCSVRow(cur, rec, where); err != nil {
			return nil, err
		}
	}
	if len(st.Lines) == 0 {
		return nil, stmtErr("line 2", "no lines: a CSV statement carries its balance on its lines")
	}
	last := st.Lines[len(st.Lines)-1]
	st.Closing, st.Date = last.Balance, last.BookedOn
	st.ClosingAt = st.Date.Add(24 * time.Hour)
	return st, nil
}

// readCSVHeader reads and checks the header row.
func readCSVHeader(r *csv.Reader) error {
	head, err := r.Read()
	if errors.Is(err, io.EOF) {
		return stmtErr("line 1", "empty file: want the header date,reference,amount,balance")
	}
	if err != nil {
		return csvErr(err)
	}
	if len(head) != len(csvHeader) {
		return stmtErr("line 1", "header has %d columns: want date,reference,amount,balance", len(head))
	}
	for i, h := range head {
		if !strings.EqualFold(strings.TrimSpace(h), csvHeader[i]) {
			return stmtErr("line 1", "header column %d is %q: want date,reference,amount,balance", i+1, h)
		}
	}
	return nil
}

// addCSVRow appends one row (4 columns) as a line: dates in order, each
// balance the previous one plus the row's amount (the first row sets the
// opening balance).
func (st *BankStatement) addCSVRow(cur money.Currency, rec []string, where string) error {
	if len(st.Lines) >= statementLinesMax {
		return stmtErr(where, "more than %d lines in one statement", statementLinesMax)
	}
	day, err := parseDate(rec[0])
	if err != nil {
		return stmtErr(where, "%s", err.Error())
	}
	if n := len(st.Lines); n > 0 && day.Before(st.Lines[n-1].BookedOn) {
		return stmtErr(where, "date %s is before the previous line's %s: lines must be in date order", rec[0], st.Lines[n-1].BookedOn.Format(time.DateOnly))
	}
	ref := strings.TrimSpace(rec[1])
	if err := checkReference(ref); err != nil {
		return stmtErr(where, "%s", err.Error())
	}
	amt, err := cur.Parse(strings.TrimSpace(rec[2]))
	if err != nil {
		return stmtErr(where, "amount: %s", err.Error())
	}
	bal, err := cur.Parse(strings.TrimSpace(rec[3]))
	if err != nil {
		return stmtErr(where, "balance: %s", err.Error())
	}
	if len(st.Lines) == 0 {
		st.Opening = bal.Sub(amt)
	} else if want := st.Lines[len(st.Lines)-1].Balance.Add(amt); !want.Equal(bal) {
		return stmtErr(where, "balance %s does not follow from the previous balance %s and amount %s (want %s)",
			rec[3], st.Lines[len(st.Lines)-1].Balance, amt, want)
	}
	st.Lines = append(st.Lines, StatementLine{No: len(st.Lines) + 1, BookedOn: day, Reference: ref, Amount: amt, Balance: bal})
	return nil
}

func csvErr(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return stmtErr(fmt.Sprintf("line %d", pe.Line), "%s", pe.Err.Error())
	}
	return stmtErr("content", "%s", err.Error())
}
