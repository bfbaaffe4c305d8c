package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// AuditEvent is one API call as a service recorded it (audit.recorded.*),
// kept by the ledger for good.
type AuditEvent struct {
	EventID     string
	At          time.Time
	Service     string // the service that served the call
	Method      string // full gRPC method
	Actor       string // token subject ("" for staff tokens without one)
	Role        string
	ResourceIDs []string // "field=value"
	RequestID   string
	Code        string // gRPC code name of the result
	ClientAddr  string
}

// StoredAuditEvent is an audit event as stored: its sequence (newest is
// highest; consecutive since migration ledger/0030) and when the ledger
// stored it, chained to the record before it (AuditHash).
type StoredAuditEvent struct {
	Seq int64
	AuditEvent
	StoredAt time.Time
	PrevHash []byte
	Hash     []byte
}

// AuditGenesisHash is the prev_hash of the audit log's first record.
var AuditGenesisHash = make([]byte, sha256.Size)

// AuditHash is sha256(prev || canonical content) of a stored audit record:
// its seq, every field as stored, and when it was stored. Strings are
// length-prefixed (8 bytes, big-endian, then the UTF-8 bytes), instants
// are microseconds since the Unix epoch (what Postgres keeps; a finer At
// is truncated, as the store's COPY writes it), the resource ids a count
// then each id. Migration ledger/0030 renders the same bytes in SQL
// (ledger.audit_hash) to chain the records stored before it;
// TestAuditChainOfMigratedRecords holds the two together.
func AuditHash(prev []byte, e StoredAuditEvent) []byte {
	b := make([]byte, 0, 512) // a record's content is ~250 bytes: on the stack unless it grows
	b = append(b, prev...)
	field := func(s string) {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(e.Seq))
	field(e.EventID)
	b = binary.BigEndian.AppendUint64(b, uint64(e.At.UnixMicro()))
	field(e.Service)
	field(e.Method)
	field(e.Actor)
	field(e.Role)
	b = binary.BigEndian.AppendUint64(b, uint64(len(e.ResourceIDs)))
	for _, id := range e.ResourceIDs {
		field(id)
	}
	field(e.RequestID)
	field(e.Code)
	field(e.ClientAddr)
	b = binary.BigEndian.AppendUint64(b, uint64(e.StoredAt.UnixMicro()))
	sum := sha256.Sum256(b)
	return sum[:]
}
