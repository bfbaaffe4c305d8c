package ledger_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// A reversal puts ledger.reversed.{the reversed transaction} into the
// ledger's outbox with itself (one message per reversal, its LedgerPosted):
// payout learns of the reversal of an entry a payout was settled outside
// by from it, at once, where it read every claim ever made from the ledger
// every five minutes to find one. A replay of the reversal adds nothing.
func TestReversalPublishesLedgerReversed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	man, err := f.app.CreateTransaction(f.ctx, transfer("rev-ev-1", "bank:client", "renter:r-1:wallet", "10.00", "USD"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second a replay
		if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: man.ID, Description: "undo"}); err != nil {
			t.Fatal(err)
		}
	}
	man, err = f.app.GetTransaction(f.ctx, man.ID)
	if err != nil || man.ReversedBy == "" {
		t.Fatalf("the reversed transaction read back: %v, reversed by %q", err, man.ReversedBy)
	}
	rev := man.ReversedBy
	rows, err := f.pool.Query(f.ctx, `select id, payload from ledger.outbox where subject = $1
		union all select id, payload from ledger.outbox_published where subject = $1`, subjects.LedgerReversed.Of(man.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id string
		var payload []byte
		if err := rows.Scan(&id, &payload); err != nil {
			t.Fatal(err)
		}
		var ev eventsv1.LedgerPosted
		if err := proto.Unmarshal(payload, &ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, id+" "+ev.TransactionId)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "ledger-reversed-" + rev + " " + rev; len(got) != 1 || got[0] != want {
		t.Fatalf("ledger.reversed.%s in the outbox: %q; want [%q]", man.ID, got, want)
	}
}
