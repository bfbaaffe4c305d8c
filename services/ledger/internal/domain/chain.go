package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// GenesisHash is the prev_hash of the first chained transaction.
var GenesisHash = make([]byte, sha256.Size)

// ChainHash is sha256(prev || canonical content). The content covers
// everything a transaction asserts: id, key, kind, description, both times,
// metadata (sorted) and every posting in order. Each field is length-prefixed
// so no two different transactions render the same bytes.
func ChainHash(prev []byte, t Transaction) []byte {
	h := sha256.New()
	h.Write(prev)
	var buf [8]byte
	field := func(s string) {
		binary.BigEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		h.Write([]byte(s))
	}
	field(t.ID)
	field(t.IdempotencyKey)
	field(string(t.Kind))
	field(t.Description)
	field(t.EffectiveAt.UTC().Format(time.RFC3339Nano))
	field(t.CreatedAt.UTC().Format(time.RFC3339Nano))
	keys := sortedKeys(t.Metadata)
	binary.BigEndian.PutUint64(buf[:], uint64(len(keys)))
	h.Write(buf[:])
	for _, k := range keys {
		field(k)
		field(t.Metadata[k])
	}
	binary.BigEndian.PutUint64(buf[:], uint64(len(t.Postings)))
	h.Write(buf[:])
	for _, p := range t.Postings {
		field(p.Account.Address)
		field(string(p.Direction))
		field(p.Amount.String())
		field(p.Currency)
	}
	return h.Sum(nil)
}
