package ledger_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// countingStore counts the records the interceptor stores itself.
type countingStore struct {
	audit.PoolStore
	n atomic.Int64
}

func (s *countingStore) Insert(ctx context.Context, schema string, recs []*eventsv1.AuditRecorded) error {
	s.n.Add(int64(len(recs)))
	return s.PoolStore.Insert(ctx, schema, recs)
}

// auditedCreate is an audit record of CreateTransaction in the ledger's
// outbox, with the transaction that wrote its row.
type auditedCreate struct {
	rec  *eventsv1.AuditRecorded
	xmin string
}

func auditedCreates(t *testing.T, f *fixture) []auditedCreate {
	t.Helper()
	return auditedRecords(t, f, "/gpubill.ledger.v1.LedgerService/CreateTransaction")
}

// auditedRecords are method's single audit records in the ledger's outbox.
func auditedRecords(t *testing.T, f *fixture, method string) []auditedCreate {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `select xmin::text, payload from ledger.outbox where subject = 'audit.recorded.ledger' order by seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditedCreate
	for rows.Next() {
		var a auditedCreate
		var b []byte
		if err := rows.Scan(&a.xmin, &b); err != nil {
			t.Fatal(err)
		}
		a.rec = &eventsv1.AuditRecorded{}
		if err := proto.Unmarshal(b, a.rec); err != nil {
			t.Fatal(err)
		}
		if a.rec.Method == method {
			out = append(out, a)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A manual entry posted by the API's group commit in one round trip carries
// its audit record in the same transaction: the record the interceptor would
// have stored (actor, role, request id, code OK, the request's and the new
// transaction's ids), committed with the journal row. A replay of it and a
// refused entry are recorded by the interceptor as before, each once; the
// replay marked replayed=true (it read as a second entry, identical but
// for its event and request ids).
func TestAuditRecordCommitsWithTheWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	store := &countingStore{PoolStore: audit.PoolStore{Pool: f.pool}}
	base, secret := startServer(t, f, func(o *server.Options) {
		o.Audit = audit.New(store, slog.Default(), "ledger")
	})
	tok, err := auth.Issue(secret, auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := restClient{t: t, base: base, token: tok}
	entry := `{"idempotency_key":"m-1","postings":[
		{"account":"bank:client","direction":"debit","amount":"1.00","currency":"USD"},
		{"account":"renter:r-1:wallet","direction":"credit","amount":"1.00","currency":"USD"}]}`
	var ids []string
	for range 2 { // the entry, then its replay
		code, body := c.do("POST", "/v1/transactions", entry)
		var tx struct {
			TransactionID string `json:"transaction_id"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &tx) != nil {
			t.Fatalf("POST /v1/transactions: %d %s", code, body)
		}
		ids = append(ids, tx.TransactionID)
	}
	if ids[0] != ids[1] {
		t.Fatalf("replay answered %s, the entry %s", ids[1], ids[0])
	}
	code, body := c.do("POST", "/v1/transactions", `{"idempotency_key":"od-1","postings":[
		{"account":"provider:p-1:available","direction":"debit","amount":"1.00","currency":"USD"},
		{"account":"renter:r-1:wallet","direction":"credit","amount":"1.00","currency":"USD"}]}`)
	if code != 400 {
		t.Fatalf("overdraft: %d %s", code, body)
	}

	var journalXmin string
	if err := f.pool.QueryRow(f.ctx, `select xmin::text from ledger.transactions where id = $1`, ids[0]).Scan(&journalXmin); err != nil {
		t.Fatal(err)
	}
	recs := auditedCreates(t, f)
	if len(recs) != 3 {
		t.Fatalf("%d CreateTransaction records, want 3 (entry, replay, refusal)", len(recs))
	}
	wantIDs := []string{"idempotency_key=m-1", "transaction_id=" + ids[0]}
	for i, want := range []struct {
		code, key string
		ids       []string
		withWrite bool
	}{
		{"OK", "m-1", wantIDs, true},
		{"OK", "m-1", append(slices.Clone(wantIDs), "replayed=true"), false},
		{"InvalidArgument", "od-1", []string{"idempotency_key=od-1"}, false},
	} {
		r := recs[i]
		if r.rec.Code != want.code || !slices.Equal(r.rec.ResourceIds, want.ids) || r.rec.Actor != recs[0].rec.Actor || r.rec.Role != auth.RoleFinance ||
			r.rec.RequestId == "" || r.rec.Service != "ledger" || r.rec.ClientAddr == "" || r.rec.At == nil {
			t.Fatalf("record %d: %+v; want code %s, ids %v", i, r.rec, want.code, want.ids)
		}
		if got := r.xmin == journalXmin; got != want.withWrite {
			t.Fatalf("record %d committed with the journal row: %v, want %v", i, got, want.withWrite)
		}
	}
	// The interceptor stored the replay's and the refusal's, not the
	// entry's again.
	if n := store.n.Load(); n != 2 {
		t.Fatalf("the interceptor stored %d records, want 2", n)
	}
}

// auditLog is what the ledger's audit log would hold of method's records in
// the ledger's outbox once its consumer stored them (in outbox order, a
// repeated event id kept once), oldest first.
func auditLog(t *testing.T, f *fixture, method string) []domain.StoredAuditEvent {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `select payload from ledger.outbox where subject = 'audit.recorded.ledger' order by seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var evs []domain.AuditEvent
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		one, batch := &eventsv1.AuditRecorded{}, &eventsv1.AuditRecordedBatch{}
		recs := []*eventsv1.AuditRecorded{one}
		if err := proto.Unmarshal(b, one); err != nil {
			t.Fatal(err)
		}
		if one.EventId == "" {
			if err := proto.Unmarshal(b, batch); err != nil {
				t.Fatal(err)
			}
			recs = batch.Records
		}
		for _, r := range recs {
			evs = append(evs, domain.AuditEvent{EventID: r.EventId, At: r.At.AsTime(), Service: r.Service, Method: r.Method,
				Actor: r.Actor, Role: r.Role, ResourceIDs: r.ResourceIds, RequestID: r.RequestId, Code: r.Code, ClientAddr: r.ClientAddr})
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.app.RecordAuditEvents(f.ctx, evs); err != nil {
		t.Fatal(err)
	}
	got, _, err := f.app.ListAuditEvents(f.ctx, app.AuditFilter{Method: method, Limit: 100}, "")
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(got)
	return got
}

// A write whose caller stopped waiting while the group commit holding it
// was busy, and which the group then committed, is in the audit log as what
// it did: code OK, with its transaction id, under the caller's name. A
// deposit was recorded only as the caller's Canceled, without the
// transaction (it took no audit record; and a write's own record, sharing
// the event id of the interceptor's stored first, was dropped as its
// repeat); so was a manual entry to a cycle's pending account, which the
// group posts in a transaction of its own (postOne) that took no record.
func TestAuditRecordOfAWriteItsCallerLeft(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, method, path, body, key string
		give, then                    []string // resource ids the OK record names before and after its transaction's
	}{
		{"deposit", "CreateDeposit", "/v1/deposits", `{"renter_id":"r-1","amount":"100.00","currency":"USD","external_ref":"dep-1"}`,
			"deposit:dep-1", []string{"renter_id=r-1", "amount=100.00", "currency=USD", "external_ref=dep-1"}, []string{"idempotency_key=deposit:dep-1"}},
		{"entry to a cycle", "CreateTransaction", "/v1/transactions", `{"idempotency_key":"m-1","postings":[
			{"account":"bank:client","direction":"debit","amount":"100.00","currency":"USD"},
			{"account":"provider:p-1:pending:cyc-20261112","direction":"credit","amount":"100.00","currency":"USD"}]}`,
			"m-1", []string{"idempotency_key=m-1"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			f.app.GroupTimeout = 20 * time.Second // far above the caller's deadline
			store := &countingStore{PoolStore: audit.PoolStore{Pool: f.pool}}
			base, secret := startServer(t, f, func(o *server.Options) {
				o.Audit = audit.New(store, slog.Default(), "ledger")
			})
			tok, err := auth.Issue(secret, auth.RoleFinance, "alice", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			release := lockTable(t, f, "ledger.transactions")
			req, err := http.NewRequest("POST", base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			client := &http.Client{Timeout: 300 * time.Millisecond}
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
				release()
				t.Fatalf("POST %s answered %d while the journal was locked; want the client's timeout", tt.path, resp.StatusCode)
			}
			testkit.Eventually(t, 5*time.Second, func() bool { return store.n.Load() > 0 }, "the interceptor recorded the caller's answer")
			release()
			testkit.Eventually(t, 10*time.Second, func() bool {
				return f.count(t, `select count(*) from ledger.transactions where idempotency_key = $1`, tt.key) == 1
			}, "the group committed the write")
			var txID string
			if err := f.pool.QueryRow(f.ctx, `select id from ledger.transactions where idempotency_key = $1`, tt.key).Scan(&txID); err != nil {
				t.Fatal(err)
			}

			var ok []domain.StoredAuditEvent
			log := auditLog(t, f, tt.method)
			for _, e := range log {
				t.Logf("%s actor=%s code=%s ids=%v request=%s", e.Method, e.Actor, e.Code, e.ResourceIDs, e.RequestID)
				if e.Code == "OK" {
					ok = append(ok, e)
				}
			}
			want := append(append(slices.Clone(tt.give), "transaction_id="+txID), tt.then...)
			// The request's ids in any order (protobuf ranges over fields in
			// an order of its own), then what the write made.
			if len(ok) != 1 || ok[0].Actor != "alice" || !slices.Equal(slices.Sorted(slices.Values(ok[0].ResourceIDs)), slices.Sorted(slices.Values(want))) ||
				!slices.Equal(ok[0].ResourceIDs[len(tt.give):], want[len(tt.give):]) {
				t.Fatalf("audit log: %+v; want one record code OK by alice naming %v", log, want)
			}
		})
	}
}

// A reversal's audit record commits in the reversal's transaction (code OK,
// the original's and the reversal's ids), as a manual entry's does; its
// replay is recorded by the interceptor, marked replayed=true. A reversal committed whose answer
// was lost was recorded only as the error its caller got.
func TestAuditRecordCommitsWithTheReversal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	store := &countingStore{PoolStore: audit.PoolStore{Pool: f.pool}}
	base, secret := startServer(t, f, func(o *server.Options) {
		o.Audit = audit.New(store, slog.Default(), "ledger")
	})
	tok, err := auth.Issue(secret, auth.RoleFinance, "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := restClient{t: t, base: base, token: tok}
	orig := f.deposit(t, "r-1", "5.00", "USD", "dep-r")
	var revIDs []string
	for range 2 { // the reversal, then its replay
		code, body := c.do("POST", "/v1/transactions/"+orig.ID+":reverse", `{}`)
		var tx struct {
			TransactionID string `json:"transaction_id"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &tx) != nil {
			t.Fatalf("reverse: %d %s", code, body)
		}
		revIDs = append(revIDs, tx.TransactionID)
	}
	var journalXmin string
	if err := f.pool.QueryRow(f.ctx, `select xmin::text from ledger.transactions where id = $1`, revIDs[0]).Scan(&journalXmin); err != nil {
		t.Fatal(err)
	}
	var withWrite []bool
	for i, r := range auditedRecords(t, f, "/gpubill.ledger.v1.LedgerService/ReverseTransaction") {
		want := []string{"transaction_id=" + orig.ID, "transaction_id=" + revIDs[0], "idempotency_key=reverse:" + orig.ID}
		if i == 1 {
			want = append(want, "replayed=true")
		}
		if r.rec.Code != "OK" || r.rec.Actor != "alice" || !slices.Equal(r.rec.ResourceIds, want) {
			t.Fatalf("record %+v; want OK by alice naming %v", r.rec, want)
		}
		withWrite = append(withWrite, r.xmin == journalXmin)
	}
	if !slices.Equal(withWrite, []bool{true, false}) {
		t.Fatalf("reversal records committed with the reversal: %v, want [true false] (the reversal's, its replay's)", withWrite)
	}
}
