package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// StatementStore keeps imported bank statements (implemented by
// adapters/postgres).
type StatementStore interface {
	// InsertStatement stores a statement and its lines in one transaction
	// unless its id exists; it returns the stored statement (the existing one
	// when the id was taken) and whether it inserted it.
	InsertStatement(ctx context.Context, st StoredStatement, lines []domain.StatementLine) (StoredStatement, bool, error)
	// ListStatements pages through statements ("" currency or account: any),
	// newest closing first, after the (closing_at, statement_id) cursor when
	// afterClosingAt is not zero.
	ListStatements(ctx context.Context, currency, account string, afterClosingAt time.Time, afterID string, limit int) ([]StoredStatement, error)
	// LatestStatements returns, per account, the latest statement in
	// currency closing at or before asOf.
	LatestStatements(ctx context.Context, currency string, asOf time.Time) ([]StoredStatement, error)
}

// StoredStatement is an imported statement (without its lines).
type StoredStatement = domain.ImportedStatement

// Statements are the bank-statement use cases.
type Statements struct {
	Store StatementStore
	Now   func() time.Time
}

// ImportStatementInput is one statement file as uploaded. Content is the
// request's own text (up to 64 MiB: pkg/server), not a copy of it.
type ImportStatementInput struct {
	StatementID, Currency, Account, Format string
	Content                                string
	ImportedBy                             string
}

// NormalizeStatementFormat maps the names a client may use to a format
// ("" when the content decides: XML is camt.053, anything else CSV).
func NormalizeStatementFormat(format, content string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "csv", "text/csv":
		return domain.StatementCSV, true
	case "camt053", "camt.053", "xml", "application/xml", "text/xml":
		return domain.StatementCamt053, true
	case "":
		if t := strings.TrimSpace(content[:min(len(content), 64)]); strings.HasPrefix(t, "<") {
			return domain.StatementCamt053, true
		}
		return domain.StatementCSV, true
	}
	return "", false
}

// Import parses and stores a statement whole, or nothing: a malformed file
// is an InvalidError naming the line or element at fault. Idempotent by
// statement id: the same file again answers the stored statement; another
// file (or account, or currency) under a stored id is a conflict.
func (s *Statements) Import(ctx context.Context, in ImportStatementInput) (StoredStatement, error) {
	cur, err := money.Lookup(in.Currency)
	if err != nil {
		return StoredStatement{}, apperr.Invalid("currency", "%s", err.Error())
	}
	if len(in.Content) == 0 {
		return StoredStatement{}, apperr.Invalid("content", "empty: the statement file is the request body (or the JSON field content)")
	}
	format, ok := NormalizeStatementFormat(in.Format, in.Content)
	if !ok {
		return StoredStatement{}, apperr.Invalid("format", "%q: want csv or camt053", in.Format)
	}
	st, err := domain.ParseStatement(format, in.StatementID, in.Account, cur, in.Content)
	if err != nil {
		var se *domain.StatementError
		if errors.As(err, &se) {
			field := "content"
			if se.Where == "statement_id" || se.Where == "account" || se.Where == "format" {
				field = se.Where
			}
			return StoredStatement{}, apperr.Invalid(field, "%s", err.Error())
		}
		return StoredStatement{}, err
	}
	if err := checkStatementDates(st, s.Now()); err != nil {
		return StoredStatement{}, err
	}
	want := StoredStatement{BankStatement: *st, LineCount: len(st.Lines), ContentSHA256: sha256Of(in.Content), ImportedAt: s.Now(), ImportedBy: in.ImportedBy}
	want.Lines = nil
	got, _, err := s.Store.InsertStatement(ctx, want, st.Lines)
	if err != nil {
		return StoredStatement{}, fmt.Errorf("import statement %s: %w", st.ID, err)
	}
	if string(got.ContentSHA256) != string(want.ContentSHA256) || got.Account != want.Account || got.Currency != want.Currency {
		return StoredStatement{}, fmt.Errorf("statement %s was imported with another content (sha256 %x, account %s, %s): %w",
			st.ID, got.ContentSHA256, got.Account, got.Currency, apperr.ErrConflict)
	}
	return got, nil
}

// ImportCamt053 imports a camt.053 that came with no importer to name its
// currency (a file of the bank statement inbox, by): the currency it
// states (domain.Camt053Currency), its id and account its own. The same
// import as an upload's: the same file uploaded too is one statement.
func (s *Statements) ImportCamt053(ctx context.Context, content, by string) (StoredStatement, error) {
	if format, _ := NormalizeStatementFormat("", content); format != domain.StatementCamt053 {
		return StoredStatement{}, apperr.Invalid("content", "not XML: the inbox reads camt.053 (a CSV statement is uploaded with its currency and account)")
	}
	ccy, err := domain.Camt053Currency(content)
	if err != nil {
		return StoredStatement{}, apperr.Invalid("content", "%s", err.Error())
	}
	return s.Import(ctx, ImportStatementInput{Currency: ccy, Format: domain.StatementCamt053, Content: content, ImportedBy: by})
}

// sha256ChunkBytes is how much of a statement sha256Of copies at a time.
const sha256ChunkBytes = 64 << 10

// sha256Of is the SHA-256 of s, hashed a chunk at a time: sha256.Sum256
// takes bytes, and converting the whole file copied it.
func sha256Of(s string) []byte {
	h := sha256.New()
	buf := make([]byte, 0, min(len(s), sha256ChunkBytes))
	for len(s) > 0 {
		n := min(len(s), sha256ChunkBytes)
		buf = append(buf[:0], s[:n]...)
		h.Write(buf) // a hash.Hash's Write never fails
		s = s[n:]
	}
	return h.Sum(nil)
}

// statementDaysFirst is the earliest day a statement may describe.
var statementDaysFirst = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

// statementCloseAhead is how far past now a statement may close (one of
// today closes at tomorrow's start, in any time zone).
const statementCloseAhead = 48 * time.Hour

// checkStatementDates refuses a statement describing days before 1970 or
// closing after now: stored (statements are never changed), a line dated
// year 0 made every listing holding it a 500 (its close no Timestamp),
// and a year mistyped 2062 was every later reconciliation run's latest
// statement of its account.
func checkStatementDates(st *domain.BankStatement, now time.Time) error {
	if st.ClosingAt.After(now.Add(statementCloseAhead)) {
		return apperr.Invalid("content", "the statement closes at %s, after now: a statement describes days past",
			st.ClosingAt.Format(time.RFC3339))
	}
	if st.Date.Before(statementDaysFirst) {
		return apperr.Invalid("content", "the statement's date %s is before 1970", st.Date.Format(time.DateOnly))
	}
	for _, l := range st.Lines {
		if l.BookedOn.Before(statementDaysFirst) || l.BookedOn.After(now.Add(statementCloseAhead)) {
			return apperr.Invalid("content", "line %d is booked on %s: before 1970 or after now", l.No, l.BookedOn.Format(time.DateOnly))
		}
	}
	return nil
}

// statementPageMax bounds one page of statements.
const statementPageMax = 500

// bankStatementsListing names the listing in its page tokens (pkg/cursor).
const bankStatementsListing = "ledger.bank_statements"

// List pages through the imported statements, newest closing first.
func (s *Statements) List(ctx context.Context, currency, account string, size int32, token string) ([]StoredStatement, string, error) {
	if currency != "" {
		// Stored as its code: ?currency=cny matched nothing, ?currency=XYZ
		// answered an empty listing.
		cur, err := money.Lookup(currency)
		if err != nil {
			return nil, "", apperr.Invalid("currency", "%s", err.Error())
		}
		currency = cur.Code
	}
	n := min(pageSize(size), statementPageMax)
	listing := cursor.Scoped(bankStatementsListing, currency, account)
	var afterAt time.Time
	afterID := ""
	if token != "" {
		pos, err := cursor.Decode(listing, token, 2)
		if err != nil {
			return nil, "", err
		}
		if afterAt, err = pos.Time(0); err != nil {
			return nil, "", err
		}
		if afterID = pos.String(1); afterID == "" {
			return nil, "", cursor.Malformed()
		}
	}
	sts, err := s.Store.ListStatements(ctx, currency, account, afterAt, afterID, n+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(sts) > n {
		sts = sts[:n]
		last := sts[n-1]
		next = cursor.Encode(listing, cursor.FormatTime(last.ClosingAt), last.ID)
	}
	return sts, next, nil
}
