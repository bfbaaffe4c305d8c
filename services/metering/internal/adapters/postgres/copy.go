package postgres

import (
	"encoding/binary"
	"time"
)

// copyWriter writes PostgreSQL's binary COPY format
// (https://www.postgresql.org/docs/current/sql-copy.html, "Binary Format")
// for the few column types the staging tables use: text, int4 and
// timestamptz. Text is sent as is; the server checks its encoding as it
// does a text parameter's.
type copyWriter struct{ buf []byte }

// Sizes for the first allocation: the header and trailer, and a usage row
// (13 fields of 4-byte lengths, three timestamps, an int and ~120 bytes of
// ids and names).
const (
	copyHeaderBytes  = 19 + 2
	usageRowBytesEst = 2 + 13*4 + 3*8 + 4 + 120
)

// pgEpochMicros is 2000-01-01T00:00:00Z, PostgreSQL's timestamp epoch, in
// microseconds since the Unix epoch.
const pgEpochMicros = 946_684_800 * 1_000_000

func (w *copyWriter) header() {
	w.buf = append(w.buf, "PGCOPY\n\xff\r\n\x00"...)
	w.buf = binary.BigEndian.AppendUint32(w.buf, 0) // flags: no OIDs
	w.buf = binary.BigEndian.AppendUint32(w.buf, 0) // no header extension
}

func (w *copyWriter) trailer() { w.buf = binary.BigEndian.AppendUint16(w.buf, 0xffff) }

// row starts a row of n fields.
func (w *copyWriter) row(n uint16) { w.buf = binary.BigEndian.AppendUint16(w.buf, n) }

func (w *copyWriter) text(s string) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(s)))
	w.buf = append(w.buf, s...)
}

func (w *copyWriter) int4(v int32) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, 4)
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(v))
}

// timestamptz writes t at microsecond resolution (ingest truncates to it).
func (w *copyWriter) timestamptz(t time.Time) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, 8)
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(t.UnixMicro()-pgEpochMicros))
}
