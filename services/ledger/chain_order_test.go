package ledger_test

import (
	"testing"

	"github.com/gpubill/gpubill/services/ledger"
)

// The chain follows (xid, id) in numeric xid order across a power of ten:
// xids 999 and 1003 (a fresh cluster crosses 1000 early) are chained 999
// first, and the next round finds nothing to chain again. Ordering by the
// text of the xid once chained 1003 before 999, and every later round failed
// on the unique tx_id (the chain stopped for good).
func TestHashChainOrdersXidsNumerically(t *testing.T) {
	f := newFixture(t, nil)
	for _, x := range []struct{ id, xid string }{
		{"01a23000-0000-7000-8000-000000000001", "1003"},
		{"01a23000-0000-7000-8000-000000000002", "999"},
		{"01a23000-0000-7000-8000-000000000003", "1000"},
	} {
		if _, err := f.pool.Exec(f.ctx, `insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at, xid)
			values ($1::uuid, 'chain-order-' || $2, '\x00', 'manual', now(), now(), $2::text::xid8)`, x.id, x.xid); err != nil {
			t.Fatal(err)
		}
	}
	// The service's own chain worker may hold the chain's lock through a
	// round (a round that does not get it chains nothing): chained until
	// none is left, then rounds that find nothing must not fail.
	chainAll(t, f)
	for round := 0; round < 2; round++ {
		if _, err := ledger.ChainOnce(f.ctx, f.pool); err != nil {
			t.Fatalf("chain round %d after all were chained: %v", round, err)
		}
	}
	rows, err := f.pool.Query(f.ctx, `select xid::text from ledger.journal_chain order by position`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var x string
		if err := rows.Scan(&x); err != nil {
			t.Fatal(err)
		}
		got = append(got, x)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != "999" || got[1] != "1000" || got[2] != "1003" {
		t.Fatalf("chain order by xid: %v, want [999 1000 1003]", got)
	}
	res, err := ledger.VerifyChain(f.ctx, f.pool)
	if err != nil || !res.OK || res.Unchained != 0 || res.Checked != 3 {
		t.Fatalf("verify: %+v %v", res, err)
	}
}
