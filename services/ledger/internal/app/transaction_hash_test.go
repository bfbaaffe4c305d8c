package app

import (
	"math/rand/v2"
	"testing"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// The hand-built request hash of a manual transaction is byte for byte the
// map-built one (hashes stored for earlier requests still match their
// replays): for plain strings and for every kind encoding/json escapes or
// replaces, metadata absent, empty or not, postings none or several.
func TestTransactionRequestHashMatchesMap(t *testing.T) {
	strs := []string{"", "manual", "FIN-7", "2026-12-01T10:00:00.5Z", "bank:client|debit|12.34|USD", "a<b>&c", `say "hi"`, `back\slash`,
		"tab\t", "ctl\x01", "ünïcödé", "line\u2028sep", "bad \xff utf8"}
	r := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return strs[r.IntN(len(strs))] }
	for i := range 5000 {
		var md map[string]string
		if r.IntN(3) > 0 {
			md = map[string]string{}
			for range r.IntN(4) {
				md[pick()] = pick()
			}
		}
		var ps []string
		if r.IntN(5) > 0 {
			ps = []string{}
			for range r.IntN(4) {
				ps = append(ps, pick())
			}
		}
		desc, eff := pick(), pick()
		want, err := domain.RequestHash("transaction", map[string]any{"description": desc, "effective_at": eff, "metadata": md, "postings": ps})
		if err != nil {
			t.Fatal(err)
		}
		got, err := transactionRequestHash(desc, eff, md, ps)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("case %d (%q, %q, %#v, %#v): hash differs from domain.RequestHash", i, desc, eff, md, ps)
		}
	}
}
