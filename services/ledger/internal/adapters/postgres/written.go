package postgres

import (
	"maps"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// writtenMax bounds the transactions Written holds for the chain worker
// (a process whose chain worker is not the leader would grow it forever):
// past it, it starts afresh and the chain reads the rest back. A charge
// held costs ~0.9 KB of heap (measured), so at most ~30 MB: six fetched
// batches of 5 000 charges, more than the chain lags behind when it keeps up.
const writtenMax = 1 << 15

// Written holds, by id, the content of the transactions this process has
// committed and the hash chain has not linked yet, as they were written:
// the chain worker hashes them from here instead of reading every
// transaction and its postings back (what it did not write, e.g. after a
// restart or on another replica, it still reads). A link then hashes what
// the writer put in the journal, so a row altered before it was chained no
// longer verifies either.
type Written struct {
	mu sync.Mutex
	m  map[string]*domain.Transaction
}

// NewWritten returns an empty Written.
func NewWritten() *Written { return &Written{m: map[string]*domain.Transaction{}} }

// writtenCopy is t's content as the journal holds it (what ChainHash
// reads: times at the microsecond in UTC, the metadata and postings
// copied), or nil when the journal might hold it otherwise (metadata that
// is not valid UTF-8, which the JSON encoding replaces): the chain reads
// that one back.
func writtenCopy(t *domain.Transaction) *domain.Transaction {
	for k, v := range t.Metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil
		}
	}
	md := maps.Clone(t.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	return &domain.Transaction{ID: t.ID, IdempotencyKey: t.IdempotencyKey, Kind: t.Kind, Description: t.Description,
		EffectiveAt: t.EffectiveAt.UTC().Truncate(time.Microsecond), CreatedAt: t.CreatedAt.UTC().Truncate(time.Microsecond),
		Metadata: md, Postings: slices.Clone(t.Postings)}
}

// put keeps committed transactions (copies made when they were written).
func (w *Written) put(txs []*domain.Transaction) {
	if w == nil || len(txs) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m)+len(txs) > writtenMax {
		w.m = map[string]*domain.Transaction{}
	}
	for _, t := range txs {
		w.m[t.ID] = t
	}
}

// take returns the held transactions of ids, by id, and the ids it does
// not hold.
func (w *Written) take(ids []string) (map[string]*domain.Transaction, []string) {
	held := make(map[string]*domain.Transaction, len(ids))
	if w == nil {
		return held, ids
	}
	var missing []string
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if t, ok := w.m[id]; ok {
			held[id] = t
		} else {
			missing = append(missing, id)
		}
	}
	return held, missing
}

// drop forgets chained transactions (after the chain's commit).
func (w *Written) drop(ids []string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		delete(w.m, id)
	}
}
