package pg

import (
	"encoding/binary"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// CopyWriter writes PostgreSQL's binary COPY format
// (https://www.postgresql.org/docs/current/sql-copy.html, "Binary Format")
// for the column types the hot inserts use, without the per-value
// interface boxing and encode plans of pgx.CopyFrom: a batch is one buffer,
// sent with PgConn().CopyFrom(…, "copy … from stdin (format binary)").
// Text is sent as is; the server checks its encoding as it does a text
// parameter's.
type CopyWriter struct{ Buf []byte }

// copyHeaderBytes is the size of the header and trailer, for a first
// allocation.
const copyHeaderBytes = 19 + 2

// pgEpochMicros is 2000-01-01T00:00:00Z, PostgreSQL's timestamp epoch, in
// microseconds since the Unix epoch.
const pgEpochMicros = 946_684_800 * 1_000_000

// NewCopyWriter starts a stream with room for size bytes.
func NewCopyWriter(size int) *CopyWriter {
	w := &CopyWriter{Buf: make([]byte, 0, copyHeaderBytes+size)}
	w.Buf = append(w.Buf, "PGCOPY\n\xff\r\n\x00"...)
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 0) // flags: no OIDs
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 0) // no header extension
	return w
}

// Done ends the stream and returns it.
func (w *CopyWriter) Done() []byte {
	w.Buf = binary.BigEndian.AppendUint16(w.Buf, 0xffff)
	return w.Buf
}

// Row starts a row of n fields.
func (w *CopyWriter) Row(n uint16) { w.Buf = binary.BigEndian.AppendUint16(w.Buf, n) }

// Text writes a text (or varchar) field.
func (w *CopyWriter) Text(s string) {
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, uint32(len(s)))
	w.Buf = append(w.Buf, s...)
}

// JSONB writes a jsonb field from JSON text.
func (w *CopyWriter) JSONB(js []byte) {
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, uint32(1+len(js)))
	w.Buf = append(w.Buf, 1) // jsonb's binary format version
	w.Buf = append(w.Buf, js...)
}

// Bytea writes a bytea field.
func (w *CopyWriter) Bytea(b []byte) {
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, uint32(len(b)))
	w.Buf = append(w.Buf, b...)
}

// UUID writes a uuid field.
func (w *CopyWriter) UUID(u [16]byte) {
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 16)
	w.Buf = append(w.Buf, u[:]...)
}

// Int4 writes an int4 field.
func (w *CopyWriter) Int4(v int32) {
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 4)
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, uint32(v))
}

// Int8 writes an int8 (bigint) field.
func (w *CopyWriter) Int8(v int64) {
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 8)
	w.Buf = binary.BigEndian.AppendUint64(w.Buf, uint64(v))
}

// Timestamptz writes t at microsecond resolution (finer is truncated).
func (w *CopyWriter) Timestamptz(t time.Time) {
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 8)
	w.Buf = binary.BigEndian.AppendUint64(w.Buf, uint64(t.UnixMicro()-pgEpochMicros))
}

// Date writes a date field: t's UTC calendar day.
func (w *CopyWriter) Date(t time.Time) {
	secs := t.Unix() - pgEpochMicros/1_000_000
	days := secs / 86_400
	if secs < 0 && secs%86_400 != 0 {
		days-- // floor: a day before 2000 starts before its midnight's multiple
	}
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 4)
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, uint32(int32(days)))
}

// textOID is pg_type's oid of text, an array's element type.
const textOID = 25

// TextArray writes a one-dimensional text[] field without nulls.
func (w *CopyWriter) TextArray(ss []string) {
	size := 12
	if len(ss) > 0 {
		size += 8
	}
	for _, s := range ss {
		size += 4 + len(s)
	}
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, uint32(size))
	if len(ss) == 0 {
		w.Buf = binary.BigEndian.AppendUint32(w.Buf, 0) // no dimensions
		w.Buf = binary.BigEndian.AppendUint32(w.Buf, 0) // no nulls
		w.Buf = binary.BigEndian.AppendUint32(w.Buf, textOID)
		return
	}
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 1) // one dimension
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 0) // no nulls
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, textOID)
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, uint32(len(ss)))
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, 1) // lower bound
	for _, s := range ss {
		w.Text(s)
	}
}

// numericNeg is numeric's sign word of a negative value.
const numericNeg = 0x4000

// Numeric writes d exactly, with d's scale as the display scale (as pgx
// writes a decimal.Decimal: 1.50 stays 1.50). The binary form is base-10000
// digits, most significant first, with the weight of the first.
func (w *CopyWriter) Numeric(d decimal.Decimal) {
	scale := int32(0)
	if e := d.Exponent(); e < 0 {
		scale = -e
	}
	w.numericText(d.StringFixed(scale))
}

// NumericTrimmed writes d exactly without trailing fractional zeros as its
// display scale (d.String(): 1.50 is stored as 1.5, 0.00 as 0).
func (w *CopyWriter) NumericTrimmed(d decimal.Decimal) { w.numericText(money.DecimalString(d)) }

// numericText writes a decimal given as the plain text a decimal.Decimal
// prints, [-]digits[.digits] (never an exponent), with the digits after its
// point as the display scale. Only Numeric and NumericTrimmed call it: any
// other byte than a digit would make a wrong base-10000 digit, so the text
// never comes from outside.
func (w *CopyWriter) numericText(s string) {
	sign := uint16(0)
	if strings.HasPrefix(s, "-") {
		sign, s = numericNeg, s[1:]
	}
	intPart, frac := s, ""
	if i := strings.IndexByte(s, '.'); i >= 0 {
		intPart, frac = s[:i], s[i+1:]
	}
	dscale := len(frac)
	// The digits as one string, padded to whole groups of four on both
	// sides of the point.
	lead := (4 - len(intPart)%4) % 4
	trail := (4 - len(frac)%4) % 4
	n := lead + len(intPart) + len(frac) + trail
	digit := func(k int) int { // the k-th decimal digit of the padded string
		switch {
		case k < lead:
			return 0
		case k < lead+len(intPart):
			return int(intPart[k-lead] - '0')
		case k < lead+len(intPart)+len(frac):
			return int(frac[k-lead-len(intPart)] - '0')
		}
		return 0
	}
	groups := n / 4
	weight := (lead+len(intPart))/4 - 1
	group := func(g int) uint16 {
		k := 4 * g
		return uint16(digit(k)*1000 + digit(k+1)*100 + digit(k+2)*10 + digit(k+3))
	}
	first, last := 0, groups // strip zero groups: PostgreSQL's own form
	for first < last && group(first) == 0 {
		first++
	}
	for last > first && group(last-1) == 0 {
		last--
	}
	if first == last { // zero
		sign, weight = 0, 0
	} else {
		weight -= first
	}
	ndigits := last - first
	w.Buf = binary.BigEndian.AppendUint32(w.Buf, uint32(8+2*ndigits))
	w.Buf = binary.BigEndian.AppendUint16(w.Buf, uint16(ndigits))
	w.Buf = binary.BigEndian.AppendUint16(w.Buf, uint16(int16(weight)))
	w.Buf = binary.BigEndian.AppendUint16(w.Buf, sign)
	w.Buf = binary.BigEndian.AppendUint16(w.Buf, uint16(dscale))
	for g := first; g < last; g++ {
		w.Buf = binary.BigEndian.AppendUint16(w.Buf, group(g))
	}
}
