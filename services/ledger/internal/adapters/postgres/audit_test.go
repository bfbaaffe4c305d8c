package postgres

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
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

// migrationsBefore is the ledger's migrations numbered below version.
func migrationsBefore(t *testing.T, version string) fs.FS {
	t.Helper()
	all := migrations.For("ledger")
	files, err := fs.ReadDir(all, ".")
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	for _, f := range files {
		if f.Name() >= version {
			continue
		}
		b, err := fs.ReadFile(all, f.Name())
		if err != nil {
			t.Fatal(err)
		}
		out[f.Name()] = &fstest.MapFile{Data: b}
	}
	return out
}

// Migration ledger/0030 chains the records stored before it, in SQL
// (ledger.audit_hash), and ledger verify recomputes them in Go
// (domain.AuditHash): two renderings of the same bytes, held together
// here on records with the seq gaps the old writer left, text outside
// ASCII, quotes, no resource ids and instants before 1970 and between
// microseconds. The writer then goes on from the migrated head.
func TestAuditChainOfMigratedRecords(t *testing.T) {
	ctx := testkit.Context(t)
	pool, _ := testkit.NewPool(t)
	if err := pg.Migrate(ctx, pool, Schema, migrationsBefore(t, "0030")); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.audit_events (event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr, stored_at)
		values ('old-1', '2026-12-02T10:00:00.123456Z', 'ledger', '/gpubill.ledger.v1.LedgerService/CreateTransaction', 'fin', 'finance',
			'{"transaction_id=t-1","quote=\"x\"","寿司=🍣",""}', 'req-1', 'OK', '192.0.2.7', '2026-12-02T10:00:01.5Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `select setval('ledger.audit_events_seq_seq', 7)`); err != nil { // a failed COPY's gap
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.audit_events (event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr)
		values ('old-2', '1969-12-31T23:59:59.5Z', 'payout', 'm', '', 'admin', '{}', '', 'PermissionDenied', ''),
			('old-3', '2026-12-02T10:00:00Z', 'tax', 'm', 'Zoë', 'finance', '{"a=1"}', 'r', 'OK', '')`); err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(ctx, pool, Schema, migrations.For("ledger")); err != nil {
		t.Fatal(err)
	}
	res, err := Verify(ctx, pool)
	if err != nil || !res.OK || res.AuditChecked != 3 {
		t.Fatalf("migrated log: %+v, %v; want ok, 3 audit records checked", res, err)
	}
	s := NewStore(pool)
	if err := s.StoreAuditEvents(ctx, []domain.AuditEvent{{EventID: "new-1", At: time.Now(), Service: "ledger", Method: "m", Role: "finance", Code: "OK"},
		{EventID: "new-2", At: time.Now(), Service: "ledger", Method: "m", Role: "finance", Code: "OK"}}); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	rows, err := pool.Query(ctx, `select seq from ledger.audit_events order by seq`)
	if err != nil {
		t.Fatal(err)
	}
	if seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seqs, []int64{1, 8, 9, 10, 11}) {
		t.Fatalf("seqs %v; want 1, 8, 9 migrated and 10, 11 after them", seqs)
	}
	if res, err = Verify(ctx, pool); err != nil || !res.OK || res.AuditChecked != 5 {
		t.Fatalf("log after the migrated records: %+v, %v; want ok, 5 audit records checked", res, err)
	}
	// A record deleted from beside the old gap: named by the first seq
	// the chain cannot account for.
	if _, err := pool.Exec(ctx, `alter table ledger.audit_events disable trigger audit_events_immutable;
		delete from ledger.audit_events where event_id = 'old-2';
		alter table ledger.audit_events enable trigger audit_events_immutable`); err != nil {
		t.Fatal(err)
	}
	if res, err = Verify(ctx, pool); err != nil || res.OK || res.FirstBadAuditSeq != 2 {
		t.Fatalf("a migrated record deleted: %+v, %v; want broken from seq 2 (records 2 to 8 unaccounted for)", res, err)
	}
}

// The audit listing by resource (who touched a transaction) reads the GIN
// on resource_ids (migration ledger/0033), as autovacuum leaves the table
// (its pending list merged, statistics taken). A transaction recorded
// since has no statistics: PostgreSQL takes its id for 0.5% of the log,
// and with the listing's order by seq and a limit it walked the primary
// key backwards expecting a page early, reading the whole log for two
// records (Index Scan Backward using audit_events_pkey). A limit of 2 (a
// page of one) shows it on a few thousand records; a page of 100 did on
// 60 000 (auditListQuery).
func TestAuditListingByResourceUsesItsIndex(t *testing.T) {
	ctx, pool, s := migratedStore(t)
	const records = 4000
	evs := make([]domain.AuditEvent, records)
	for i := range evs {
		evs[i] = domain.AuditEvent{EventID: fmt.Sprintf("e-%d", i), At: time.Now(), Service: "ledger",
			Method: "/gpubill.ledger.v1.LedgerService/CreateTransaction", Actor: "fin", Role: "finance", Code: "OK",
			ResourceIDs: []string{fmt.Sprintf("idempotency_key=k-%d", i), fmt.Sprintf("transaction_id=t-%d", i), "currency=CNY", "amount=10.00"}}
	}
	if err := s.StoreAuditEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `vacuum analyze ledger.audit_events`); err != nil {
		t.Fatal(err)
	}
	late := []domain.AuditEvent{evs[0], evs[1]}
	for i := range late {
		late[i].EventID, late[i].ResourceIDs = fmt.Sprintf("late-%d", i), []string{"transaction_id=t-late", "currency=CNY"}
	}
	if err := s.StoreAuditEvents(ctx, late); err != nil {
		t.Fatal(err)
	}
	f := app.AuditFilter{Resource: "transaction_id=t-late", Limit: 2}
	got, err := s.ListAuditEvents(ctx, f)
	if err != nil || len(got) != 2 || got[0].EventID != "late-1" || got[1].EventID != "late-0" {
		t.Fatalf("records of t-late: %d (%v); want late-1, late-0", len(got), err)
	}
	q, args := auditListQuery(f)
	rows, err := pool.Query(ctx, `explain `+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(plan, func(l string) bool { return strings.Contains(l, "Bitmap Index Scan on audit_events_resource_ids") }) {
		t.Errorf("the listing by resource does not read audit_events_resource_ids:\n%s", strings.Join(plan, "\n"))
	}
}
