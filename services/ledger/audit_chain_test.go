package ledger_test

import (
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// The audit log is hash-chained as the journal is, and ledger verify walks
// it: the role every service connects as owns ledger.audit_events and may
// disable its append-only trigger, and a record deleted, an actor edited or
// two records swapped (then the trigger enabled again) left nothing to
// notice (a deleted record's seq looked like the gap a failed COPY
// leaves). Verify names the first record whose link breaks: for a deleted
// one, its own seq (the writer gives consecutive seqs).
func TestAuditChainDetectsTampering(t *testing.T) {
	t.Parallel()
	const disable, enable = `alter table ledger.audit_events disable trigger audit_events_immutable;`,
		`; alter table ledger.audit_events enable trigger audit_events_immutable`
	tests := []struct {
		name   string
		give   string // run with the trigger disabled; "" leaves the log alone
		wantOK bool
		want   string // the event whose seq verify names
	}{
		{name: "untouched", wantOK: true},
		{name: "middle record deleted", give: `delete from ledger.audit_events where event_id = 'e-3'`, want: "e-3"},
		{name: "actor edited", give: `update ledger.audit_events set actor = 'bob' where event_id = 'e-4'`, want: "e-4"},
		{name: "records reordered", give: `update ledger.audit_events a set seq = -b.seq from ledger.audit_events b
			where a.event_id in ('e-2', 'e-3') and b.event_id in ('e-2', 'e-3') and a.event_id <> b.event_id;
			update ledger.audit_events set seq = -seq where seq < 0`, want: "e-2"}, // e-3 at e-2's seq
		{name: "first record's actor edited", give: `update ledger.audit_events set actor = 'bob' where event_id = 'e-1'`, want: "e-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			at := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC) // finer than Postgres keeps
			ev := func(id string) domain.AuditEvent {
				return domain.AuditEvent{EventID: id, At: at, Service: "ledger", Method: "/gpubill.ledger.v1.LedgerService/CreateTransaction",
					Actor: "fin-" + id, Role: "finance", ResourceIDs: []string{"transaction_id=t-" + id}, RequestID: "req-" + id, Code: "OK"}
			}
			// Copied in, then a redelivery repeating a stored id (the copy
			// fails, the batch is stored skipping it).
			for _, batch := range [][]domain.AuditEvent{{ev("e-1"), ev("e-2")}, {ev("e-2"), ev("e-3"), ev("e-4"), ev("e-5")}} {
				if err := f.app.RecordAuditEvents(f.ctx, batch); err != nil {
					t.Fatal(err)
				}
			}
			seqOf := map[string]int64{}
			for _, id := range []string{"e-1", "e-2", "e-3", "e-4", "e-5"} {
				var seq int64
				if err := f.pool.QueryRow(f.ctx, `select seq from ledger.audit_events where event_id = $1`, id).Scan(&seq); err != nil {
					t.Fatal(err)
				}
				seqOf[id] = seq
			}
			if tt.give != "" {
				if _, err := f.pool.Exec(f.ctx, disable+tt.give+enable); err != nil {
					t.Fatal(err)
				}
			}
			res, err := ledger.VerifyChain(f.ctx, f.pool)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantOK {
				if !res.OK || res.AuditChecked != 5 || len(res.AuditHeadHash) != 64 {
					t.Fatalf("untouched log: %+v; want ok, 5 audit records checked and a head", res)
				}
				return
			}
			if res.OK || res.FirstBadAuditSeq != seqOf[tt.want] {
				t.Fatalf("%s: %+v; want broken at seq %d (%s)", tt.name, res, seqOf[tt.want], tt.want)
			}
		})
	}
}
