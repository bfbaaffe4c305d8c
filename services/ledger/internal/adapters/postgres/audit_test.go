package postgres

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// The audit log is listed newest first by seq, a page's token the seq it
// ended at: a record committed after a page was read must sort above it.
// Two replicas' consumers each store a batch (one COPY each); a batch
// committed after another whose seqs were taken later listed below a page
// already read, and an auditor paging down (or reading down to the newest
// record seen before) never saw it. Two writers store batches side by
// side while a reader checks, between every two of its reads, that no
// record appeared at or below the highest seq it had seen.
func TestAuditRecordsCommitInSeqOrder(t *testing.T) {
	ctx, pool, s := migratedStore(t)
	const writers, batches, batch = 2, 40, 400
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				evs := make([]domain.AuditEvent, batch)
				for i := range evs {
					evs[i] = domain.AuditEvent{EventID: fmt.Sprintf("w%d-b%d-%d", w, b, i), At: time.Now(), Service: "ledger",
						Method: "/gpubill.ledger.v1.LedgerService/CreateTransaction", Role: "finance", Code: "OK"}
				}
				if err := s.StoreAuditEvents(ctx, evs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	var maxSeen, countSeen int64
	for reads := 0; ; reads++ {
		finished := false
		select {
		case <-done:
			finished = true
		default:
		}
		var below int64
		if err := pool.QueryRow(ctx, `select count(*) from ledger.audit_events where seq <= $1`, maxSeen).Scan(&below); err != nil {
			t.Fatal(err)
		}
		if below != countSeen {
			t.Errorf("read %d: %d records at or below seq %d, %d when it was the highest seen: records committed below a listed page",
				reads, below, maxSeen, countSeen)
			<-done
			return
		}
		if err := pool.QueryRow(ctx, `select coalesce(max(seq), 0), count(*) from ledger.audit_events`).Scan(&maxSeen, &countSeen); err != nil {
			t.Fatal(err)
		}
		if finished {
			break
		}
	}
	if countSeen != writers*batches*batch {
		t.Fatalf("%d records stored, want %d", countSeen, writers*batches*batch)
	}
}
