package ports

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// reportJSON writes the report in the JSON shape protojson gives its proto
// (ledgerv1.SegregatedFundsReport with proto field names, every field
// emitted, int64 as a string, timestamps in RFC 3339 with 0, 3, 6 or 9
// fractional digits), straight from the report rather than through a proto
// message per client line: marshalling 100 000 lines reflectively would
// cost most of the report's time. TestReportJSONIsProtojson holds the two
// encodings equal.
func reportJSON(r *app.SegregatedFundsReport, progress func(int, int)) ([]byte, error) {
	f := r.Currency.Format
	w := jsonWriter{b: make([]byte, 0, 4096+160*len(r.Clients)+300*len(r.Breaches))} // a client line is ~120 bytes: one allocation, no regrowth
	w.raw('{')
	w.key("as_of", true)
	w.time(r.AsOf)
	w.field("currency", r.Currency.Code)
	w.field("client_money_requirement", f(r.Requirement))
	w.field("tax_withheld_unremitted", f(r.TaxWithheld))
	w.field("client_money_resource", f(r.Resource))
	bank := ""
	if r.BankStatementBalance != nil {
		bank = f(*r.BankStatementBalance)
	}
	w.field("bank_statement_balance", bank)
	w.field("difference", f(r.Difference))
	w.field("verdict", r.Verdict)
	w.breaches(r.Breaches, f)
	w.field("journal_head_hash", r.JournalHeadHash)
	w.lines(r.Lines, f)
	w.field("journal_head_position", strconv.FormatInt(r.JournalHeadPosition, 10))
	w.field("ledger_difference", f(r.LedgerDifference))
	w.statements(r.Statements, f)
	w.clients(r.Clients, f, progress)
	w.key("breaches_total", false)
	w.b = strconv.AppendInt(w.b, int64(min(r.BreachesTotal, math.MaxInt32)), 10)
	w.raw('}')
	if w.err != nil {
		return nil, w.err
	}
	return w.b, nil
}

// breaches writes the "breaches" array.
func (w *jsonWriter) breaches(bs []domain.RecordedBreach, f func(decimal.Decimal) string) {
	w.key("breaches", false)
	w.raw('[')
	for i, b := range bs {
		w.sep(i)
		w.raw('{')
		w.key("transaction_id", true)
		w.str(b.TransactionID)
		w.key("effective_at", false)
		w.time(b.EffectiveAt)
		w.field("account", b.Account)
		w.field("from_pool", string(b.FromPool))
		w.field("to_pool", string(b.ToPool))
		w.field("amount", f(b.Amount))
		w.field("currency", b.Currency)
		w.field("reason", b.Reason)
		w.raw('}')
	}
	w.raw(']')
}

// lines writes the totals per section, "lines".
func (w *jsonWriter) lines(ls []app.ReportLine, f func(decimal.Decimal) string) {
	w.key("lines", false)
	w.raw('[')
	for i, l := range ls {
		w.sep(i)
		w.raw('{')
		w.key("section", true)
		w.str(l.Section)
		w.field("account", l.Account)
		w.field("description", l.Description)
		w.field("amount", f(l.Amount))
		w.raw('}')
	}
	w.raw(']')
}

// statements writes the "bank_statements" counted.
func (w *jsonWriter) statements(sts []app.StoredStatement, f func(decimal.Decimal) string) {
	w.key("bank_statements", false)
	w.raw('[')
	for i, st := range sts {
		w.sep(i)
		w.raw('{')
		w.key("statement_id", true)
		w.str(st.ID)
		w.field("account", st.Account)
		w.key("closing_at", false)
		w.time(st.ClosingAt)
		w.field("closing_balance", f(st.Closing))
		w.raw('}')
	}
	w.raw(']')
}

// clients writes the "clients" array, telling progress every
// progressEvery lines and at the end.
func (w *jsonWriter) clients(cs []app.ClientLine, f func(decimal.Decimal) string, progress func(int, int)) {
	w.key("clients", false)
	w.raw('[')
	for i, c := range cs {
		w.sep(i)
		cells := ClientCells(c, f)
		w.raw('{')
		w.key("kind", true)
		w.str(c.Kind)
		w.field("client_id", c.ID)
		w.field("wallet", cells.Wallet)
		w.field("pending", cells.Pending)
		w.field("available", cells.Available)
		w.field("in_transit", cells.InTransit)
		w.field("total", cells.Total)
		w.raw('}')
		if (i+1)%progressEvery == 0 {
			progress(i+1, len(cs))
		}
	}
	w.raw(']')
	progress(len(cs), len(cs))
}

// jsonWriter appends compact JSON; the first error (invalid UTF-8 in a
// string, which protojson refuses too) sticks.
type jsonWriter struct {
	b   []byte
	err error
}

func (w *jsonWriter) raw(c ...byte) { w.b = append(w.b, c...) }

func (w *jsonWriter) sep(i int) {
	if i > 0 {
		w.b = append(w.b, ',')
	}
}

// key writes `"name":`, after a comma unless it is the object's first.
func (w *jsonWriter) key(name string, first bool) {
	if !first {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

func (w *jsonWriter) field(name, v string) {
	w.key(name, false)
	w.str(v)
}

// time writes a timestamp as protojson does: UTC, "Z", and 0, 3, 6 or 9
// fractional digits.
func (w *jsonWriter) time(t time.Time) {
	w.b = append(w.b, '"')
	w.b = t.UTC().AppendFormat(w.b, "2006-01-02T15:04:05")
	if ns := t.Nanosecond(); ns != 0 {
		digits := 9
		for ns%1000 == 0 {
			ns /= 1000
			digits -= 3
		}
		w.b = append(w.b, '.')
		s := strconv.Itoa(ns)
		for k := len(s); k < digits; k++ {
			w.b = append(w.b, '0')
		}
		w.b = append(w.b, s...)
	}
	w.b = append(w.b, 'Z', '"')
}

var errInvalidUTF8 = errors.New("invalid UTF-8 in a string of the report")

// str writes a JSON string escaped as protojson escapes it: '"', '\\' and
// control characters only.
func (w *jsonWriter) str(s string) {
	w.b = append(w.b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 && w.err == nil {
				w.err = errInvalidUTF8
			}
			i += n
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' {
			i++
			continue
		}
		w.b = append(w.b, s[start:i]...)
		w.b = append(w.b, '\\')
		switch c {
		case '"', '\\':
			w.b = append(w.b, c)
		case '\b':
			w.b = append(w.b, 'b')
		case '\f':
			w.b = append(w.b, 'f')
		case '\n':
			w.b = append(w.b, 'n')
		case '\r':
			w.b = append(w.b, 'r')
		case '\t':
			w.b = append(w.b, 't')
		default:
			w.b = append(w.b, 'u')
			w.b = append(w.b, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			w.b = strconv.AppendUint(w.b, uint64(c), 16)
		}
		i++
		start = i
	}
	w.b = append(w.b, s[start:]...)
	w.b = append(w.b, '"')
}
