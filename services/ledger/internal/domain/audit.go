package domain

import "time"

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
// highest) and when the ledger stored it.
type StoredAuditEvent struct {
	Seq int64
	AuditEvent
	StoredAt time.Time
}
