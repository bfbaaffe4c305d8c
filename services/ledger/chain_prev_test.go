package ledger_test

import (
	"strings"
	"testing"

	"github.com/gpubill/gpubill/services/ledger"
)

// TestVerifyDetectsAlteredPrevHash: a link whose stored prev_hash no longer
// names its predecessor's hash is named, though every hash still matches its
// content (verify recomputes each hash from the running chain, so only the
// prev_hash check sees this edit).
func TestVerifyDetectsAlteredPrevHash(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, ref := range []string{"a", "b", "c"} {
		f.deposit(t, "r-1", "10", "USD", ref)
	}
	chainAll(t, f)
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK {
		t.Fatalf("clean chain: %+v, %v", res, err)
	}
	for _, q := range []string{
		`alter table ledger.journal_chain disable trigger journal_chain_immutable`,
		`update ledger.journal_chain set prev_hash = sha256('forged') where position = 2`,
		`alter table ledger.journal_chain enable trigger journal_chain_immutable`,
	} {
		if _, err := f.pool.Exec(f.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := ledger.VerifyChain(f.ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.FirstBadPosition != 2 || !strings.Contains(res.Reason, "prev_hash") {
		t.Fatalf("prev_hash of position 2 forged: %+v; want position 2 named for its prev_hash", res)
	}
}
