package ledger_test

import (
	"testing"
	"time"

	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/ports"
)

// The service's chain worker hashes what its store wrote, not what it reads
// back: every kind of transaction (deposit, manual with description,
// metadata and a sub-second effective time, charges with GPU lines,
// reversal) verifies against the journal's content; and a row altered after
// the commit but before it was chained does not verify (read back, it would
// have been chained as altered and verified clean).
func TestChainHashesWhatWasWritten(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	dep := f.deposit(t, "r-1", "100.50", "USD", "top")
	eff := time.Date(2026, 11, 21, 8, 30, 1, 123456789, time.UTC)
	in := transfer("man-1", "bank:client", "renter:r-1:wallet", "1.10", "USD")
	in.Description, in.Metadata, in.EffectiveAt = "a manual one, ünïcode", map[string]string{"ticket": "FIN-7", "note": "a \"quoted\" <b>"}, &eff
	man, err := f.app.CreateTransaction(f.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	c := charge("ch-w1", "r-1", "p-1", "", "2.50")
	c.Lines = []*eventsv1.ChargeLine{{Kind: "usage", GpuModel: "H100", GpuHours: "0.75"}, {Kind: "usage", GpuModel: "A100", GpuHours: "1.5"}}
	if _, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "w-1", c, charge("ch-w2", "r-2", "p-2", "", "0.10"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: man.ID, Description: "undo"}); err != nil {
		t.Fatal(err)
	}
	chainWritten(t, f)
	res, err := ledger.VerifyChain(f.ctx, f.pool)
	if err != nil || !res.OK || res.Checked != 5 || res.Unchained != 0 {
		t.Fatalf("chain from what was written: %+v, %v", res, err)
	}

	late := f.deposit(t, "r-1", "7", "USD", "late")
	editJournalRow(t, f, late.ID)
	chainWritten(t, f)
	res, err = ledger.VerifyChain(f.ctx, f.pool)
	if err != nil || res.OK || res.FirstBadTransaction != late.ID || res.FirstBadPosition != 6 {
		t.Fatalf("altered before chained: %+v, %v; want transaction %s at position 6 named (deposit %s first)", res, err, late.ID, dep.ID)
	}
}

// chainWritten chains every transaction the way the service's worker does.
// editJournalRow changes a journal row's description behind the
// immutability trigger's back, as someone with the database's keys could.
func editJournalRow(t testing.TB, f *fixture, id string) {
	t.Helper()
	for _, q := range []string{
		`alter table ledger.transactions disable trigger transactions_immutable`,
		`update ledger.transactions set description = 'edited before chained' where id = '` + id + `'`,
		`alter table ledger.transactions enable trigger transactions_immutable`,
	} {
		if _, err := f.pool.Exec(f.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

func chainWritten(t testing.TB, f *fixture) {
	t.Helper()
	for i := 0; ; i++ {
		if f.count(t, `select count(*) from ledger.transactions t
			where not exists (select 1 from ledger.journal_chain c where c.tx_id = t.id)`) == 0 {
			return
		}
		if i == 500 {
			t.Fatal("transactions left unchained")
		}
		if _, err := f.svc.ChainOnce(f.ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
