package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// chainHashByFields is ChainHash as it was first written (each length and
// field written to the digest in turn): the journal's existing links were
// hashed by it, so ChainHash must give the same bytes for every transaction.
func chainHashByFields(prev []byte, t Transaction) []byte {
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

// TestChainHashKeepsItsBytes: ChainHash gives what the journal's links were
// hashed with, for transactions of every shape (no metadata, many postings,
// times in other zones and with nanoseconds, text of any length), and one
// transaction's hash is pinned, so the content's layout cannot drift with
// the reference.
func TestChainHashKeepsItsBytes(t *testing.T) {
	acc := func(addr string) Account {
		a, err := ParseAddress(addr)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	pinned := Transaction{ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", IdempotencyKey: "ch-1", Kind: TxCharge, Description: "",
		EffectiveAt: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC), CreatedAt: time.Date(2026, 11, 20, 12, 0, 1, 250_000_000, time.UTC),
		Metadata: map[string]string{"kind": "usage_charge", "lease_id": "lease-1"},
		Postings: []Posting{
			{Account: acc("renter:r-1:wallet"), Direction: Debit, Amount: decimal.RequireFromString("12.34"), Currency: "USD"},
			{Account: acc("provider:p-1:pending:cyc-20261112"), Direction: Credit, Amount: decimal.RequireFromString("12.34"), Currency: "USD"},
		}}
	const want = "e94f181581f4274a483fed07deb92f8d13bf7f736d12beeaefa3252aed52f140"
	if got := hex.EncodeToString(ChainHash(GenesisHash, pinned)); got != want || hex.EncodeToString(chainHashByFields(GenesisHash, pinned)) != want {
		t.Errorf("pinned transaction hashes to %s, want %s", got, want)
	}

	rng := rand.New(rand.NewPCG(7, 16))
	text := func(n int) string {
		var sb strings.Builder
		for range n {
			sb.WriteRune([]rune("aZ09-_:é€😀 ")[rng.IntN(11)])
		}
		return sb.String()
	}
	zones := []*time.Location{time.UTC, time.FixedZone("CST", 8*3600), time.FixedZone("minus", -5*3600-30*60)}
	prev := GenesisHash
	for i := range 2000 {
		tx := Transaction{ID: text(rng.IntN(40)), IdempotencyKey: text(rng.IntN(300)), Kind: []TxKind{TxManual, TxDeposit, TxCharge, TxReversal}[i%4],
			Description: text(rng.IntN(3) * rng.IntN(200)),
			EffectiveAt: time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)*int64(i%2)).In(zones[i%3]),
			CreatedAt:   time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(zones[(i+1)%3])}
		if n := rng.IntN(5); n > 0 {
			tx.Metadata = map[string]string{}
			for range n {
				tx.Metadata[text(1+rng.IntN(12))] = text(rng.IntN(60))
			}
		}
		for k := range rng.IntN(12) {
			tx.Postings = append(tx.Postings, Posting{Account: acc(fmt.Sprintf("renter:r-%d:wallet", rng.IntN(1e6))),
				Direction: []Direction{Debit, Credit}[k%2], Amount: decimal.New(1+rng.Int64N(1e12), -int32(rng.IntN(8))), Currency: text(3)})
		}
		got, want := ChainHash(prev, tx), chainHashByFields(prev, tx)
		if hex.EncodeToString(got) != hex.EncodeToString(want) {
			t.Fatalf("transaction %d: %x, want %x (%+v)", i, got, want, tx)
		}
		prev = got
	}
}
