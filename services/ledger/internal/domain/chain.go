package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"time"

	"github.com/gpubill/gpubill/pkg/money"
)

// GenesisHash is the prev_hash of the first chained transaction.
var GenesisHash = make([]byte, sha256.Size)

// ChainHash is sha256(prev || canonical content). The content covers
// everything a transaction asserts: id, key, kind, description, both times,
// metadata (sorted) and every posting in order. Each field is length-prefixed
// so no two different transactions render the same bytes.
//
// The content is laid out in one buffer and hashed once. Writing each field
// and its length to the digest in turn (two writes through the hash.Hash
// interface per field, each string copied to a []byte) made ChainHash 8 % of
// the ledger_postings bench's process CPU; for a charge this takes 1.1-1.3
// µs against 1.7-1.9. TestChainHashKeepsItsBytes holds it to the old bytes.
func ChainHash(prev []byte, t Transaction) []byte {
	b := make([]byte, 0, 512) // a charge's content is ~300 bytes: on the stack unless it grows
	b = append(b, prev...)
	field := func(s string) {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	instant := func(at time.Time) {
		at0 := len(b)
		b = binary.BigEndian.AppendUint64(b, 0) // its length, once known
		b = at.UTC().AppendFormat(b, time.RFC3339Nano)
		binary.BigEndian.PutUint64(b[at0:], uint64(len(b)-at0-8))
	}
	field(t.ID)
	field(t.IdempotencyKey)
	field(string(t.Kind))
	field(t.Description)
	instant(t.EffectiveAt)
	instant(t.CreatedAt)
	keys := sortedKeys(t.Metadata)
	b = binary.BigEndian.AppendUint64(b, uint64(len(keys)))
	for _, k := range keys {
		field(k)
		field(t.Metadata[k])
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(t.Postings)))
	for _, p := range t.Postings {
		field(p.Account.Address)
		field(string(p.Direction))
		field(money.DecimalString(p.Amount))
		field(p.Currency)
	}
	sum := sha256.Sum256(b)
	return sum[:]
}
