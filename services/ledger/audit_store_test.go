package ledger_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A batch of audit events is stored in its order, each event once (a repeat
// in the batch or of a stored event changes nothing), its resource ids
// exactly as sent whatever characters they hold: copied in, or inserted
// when the batch repeats an id.
func TestAuditEventsStoredAsSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	at := time.Date(2026, 12, 2, 10, 0, 0, 123456000, time.UTC)
	ev := func(id string, resources ...string) domain.AuditEvent {
		return domain.AuditEvent{EventID: id, At: at, Service: "ledger", Method: "/gpubill.ledger.v1.LedgerService/CreateTransaction",
			Actor: "fin-" + id, Role: "finance", ResourceIDs: resources, RequestID: "req-" + id, Code: "OK", ClientAddr: "192.0.2.7"}
	}
	if err := f.app.RecordAuditEvents(f.ctx, []domain.AuditEvent{ev("e-0", "transaction_id=t-0")}); err != nil {
		t.Fatal(err)
	}
	odd := []string{`quote="x"`, `back\slash`, `comma,brace{}`, "NULL", "", " spaced ", "寿司=🍣", `\"`}
	batch := []domain.AuditEvent{
		ev("e-2", odd...),
		ev("e-0", "transaction_id=changed"), // stored before: unchanged
		ev("e-1"),                           // no resource ids
		ev("e-2", "repeat"),                 // twice in the batch: the first stays
		ev("e-3", "a=1", "b=2"),
	}
	for range 2 { // and the whole batch redelivered
		if err := f.app.RecordAuditEvents(f.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	// A batch repeating no id is copied in; redelivered, the copy fails on
	// a stored id and the batch is inserted skipping it.
	copied := []domain.AuditEvent{ev("e-4", odd...), ev("e-5"), ev("e-6", "c=3")}
	for range 2 {
		if err := f.app.RecordAuditEvents(f.ctx, copied); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.app.RecordAuditEvents(f.ctx, []domain.AuditEvent{ev("e-7", "d=4"), ev("e-5", "changed")}); err != nil {
		t.Fatal(err)
	}
	rows, err := f.pool.Query(f.ctx, `select event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr
		from ledger.audit_events order by seq`)
	if err != nil {
		t.Fatal(err)
	}
	var got []domain.AuditEvent
	for rows.Next() {
		var e domain.AuditEvent
		if err := rows.Scan(&e.EventID, &e.At, &e.Service, &e.Method, &e.Actor, &e.Role, &e.ResourceIDs, &e.RequestID, &e.Code, &e.ClientAddr); err != nil {
			t.Fatal(err)
		}
		e.At = e.At.UTC()
		got = append(got, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []domain.AuditEvent{ev("e-0", "transaction_id=t-0"), ev("e-2", odd...), ev("e-1"), ev("e-3", "a=1", "b=2"),
		ev("e-4", odd...), ev("e-5"), ev("e-6", "c=3"), ev("e-7", "d=4")}
	want[2].ResourceIDs, want[5].ResourceIDs = []string{}, []string{}
	if !slices.EqualFunc(got, want, func(a, b domain.AuditEvent) bool {
		return a.EventID == b.EventID && a.At.Equal(b.At) && a.Service == b.Service && a.Method == b.Method && a.Actor == b.Actor &&
			a.Role == b.Role && slices.Equal(a.ResourceIDs, b.ResourceIDs) && a.ResourceIDs != nil && a.RequestID == b.RequestID &&
			a.Code == b.Code && a.ClientAddr == b.ClientAddr
	}) {
		t.Fatalf("stored\n%q\nwant\n%q", got, want)
	}
}

// The audit consumer stores the records of a batch message (audit.Join) in
// order, beside single-record messages; a batch holding one record without
// an event id is dead-lettered whole, none of its records stored.
func TestAuditBatchesConsumed(t *testing.T) {
	t.Parallel()
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	f.runService(t)
	at := timestamppb.New(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	msg := func(id string) outbox.Message {
		b, err := proto.Marshal(&eventsv1.AuditRecorded{EventId: id, At: at, Service: "payout", Method: "/gpubill.payout.v1.PayoutService/CreatePayout",
			Role: "finance", ResourceIds: []string{"payout_id=" + id}, Code: "OK"})
		if err != nil {
			t.Fatal(err)
		}
		return outbox.Message{ID: "audit-" + id, Subject: "audit.recorded.payout", Payload: b}
	}
	bad := msg("")
	bad.ID = "audit-bad"
	var sent []outbox.Message
	sent = append(sent, audit.Join([]outbox.Message{msg("b-1"), msg("b-2"), msg("b-3")})...)
	sent = append(sent, msg("s-1"))
	sent = append(sent, audit.Join([]outbox.Message{msg("p-1"), bad, msg("p-2")})...)
	sent = append(sent, msg("s-2"))
	if len(sent) != 4 {
		t.Fatalf("%d messages, want 4", len(sent))
	}
	for _, m := range sent {
		nm := nats.NewMsg(m.Subject)
		nm.Data = m.Payload
		nm.Header.Set(jetstream.MsgIDHeader, m.ID)
		if _, err := js.JS.PublishMsg(f.ctx, nm); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.count(t, `select count(*) from ledger.audit_events`) == 5 && f.count(t, `select count(*) from ledger.dead_letters`) == 1
	}, "five records stored, one message dead-lettered")
	if got := f.texts(t, `select event_id from ledger.audit_events order by seq`); !slices.Equal(got, []string{"b-1", "b-2", "b-3", "s-1", "s-2"}) {
		t.Fatalf("stored %v", got)
	}
	if got := f.texts(t, `select message_id from ledger.dead_letters`); !slices.Equal(got, []string{sent[2].ID}) {
		t.Fatalf("dead letters %v, want %s", got, sent[2].ID)
	}
}

// The method filter matches a method or its last part exactly: a filter
// ending in a backslash (LIKE's escape) made the listing a 500, and % or _
// matched any method.
func TestAuditMethodFilterIsExact(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	if err := f.app.RecordAuditEvents(f.ctx, []domain.AuditEvent{
		{EventID: "e-1", At: at, Service: "ledger", Method: "/gpubill.ledger.v1.LedgerService/CreateTransaction", Actor: "fin", Role: "finance", Code: "OK"},
		{EventID: "e-2", At: at, Service: "ledger", Method: "/gpubill.ledger.v1.LedgerService/CreateDeposit", Actor: "fin", Role: "finance", Code: "OK"},
	}); err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]int{"CreateTransaction": 1, "/gpubill.ledger.v1.LedgerService/CreateDeposit": 1,
		`CreateTransaction\`: 0, "%": 0, "Create%": 0, "CreateTransactio_": 0, "": 2} {
		got, _, err := f.app.ListAuditEvents(f.ctx, app.AuditFilter{Method: method, Limit: 10}, "")
		if err != nil || len(got) != want {
			t.Errorf("method %q: %d events, %v; want %d", method, len(got), err, want)
		}
	}
}

// A payout replica of an earlier version, still serving during a rolling
// upgrade (the ledger goes first), records a provider's payout account
// identifiers in clear; the ledger's consumer stores them masked, as the
// payout service shows them (audit.MaskResourceID), so finance and auditors
// never read a phone number from the append-only log. A value already
// masked stays as it came; other ids are untouched.
func TestAuditConsumerMasksPayoutIdentifiers(t *testing.T) {
	t.Parallel()
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	f.runService(t)
	at := timestamppb.New(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	tests := []struct {
		give []string
		want []string
	}{
		{[]string{"provider_id=p-001", "alipay_id=13800138000"}, []string{"provider_id=p-001", "alipay_id=****8000"}},
		{[]string{"provider_id=p-001", "alipay_id=****8000"}, []string{"provider_id=p-001", "alipay_id=****8000"}},
		{[]string{"wechat_openid=oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"}, []string{"wechat_openid=****eS6o"}},
		{[]string{"account_number=6222 0202 0011 2233 445", "idempotency_key=k-13800138000"},
			[]string{"account_number=****3445", "idempotency_key=k-13800138000"}},
		{[]string{"alipay_id=1380"}, []string{"alipay_id=****"}},
	}
	for i, tt := range tests {
		b, err := proto.Marshal(&eventsv1.AuditRecorded{EventId: fmt.Sprintf("m-%d", i), At: at, Service: "payout",
			Method: payoutv1.PayoutService_PutPayoutMethod_FullMethodName, Actor: "p-001", Role: "provider", ResourceIds: tt.give, Code: "OK"})
		if err != nil {
			t.Fatal(err)
		}
		nm := nats.NewMsg("audit.recorded.payout")
		nm.Data = b
		nm.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("audit-m-%d", i))
		if _, err := js.JS.PublishMsg(f.ctx, nm); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.count(t, `select count(*) from ledger.audit_events`) == len(tests)
	}, "every record stored")
	got, _, err := f.app.ListAuditEvents(f.ctx, app.AuditFilter{Method: "PutPayoutMethod", Limit: 10}, "")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]string{}
	for _, e := range got {
		byID[e.EventID] = e.ResourceIDs
	}
	for i, tt := range tests {
		if id := fmt.Sprintf("m-%d", i); !slices.Equal(byID[id], tt.want) {
			t.Errorf("%s: resource ids %q, want %q", id, byID[id], tt.want)
		}
	}
}

// GET /v1/audit-events?resource=transaction_id=… answers the records
// holding that resource id entry exactly, newest first, in pages whose
// tokens hold to the filter: who touched a transaction or a payout was
// found by paging the whole log. A filter not shaped field=value is a 400
// naming resource.
func TestAuditEventsByResource(t *testing.T) {
	t.Parallel()
	f, c := financeREST(t)
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ev := func(id, actor string, resources ...string) domain.AuditEvent {
		return domain.AuditEvent{EventID: id, At: at, Service: "ledger", Method: "/gpubill.ledger.v1.LedgerService/CreateTransaction",
			Actor: actor, Role: "finance", ResourceIDs: resources, RequestID: "req-" + id, Code: "OK"}
	}
	if err := f.app.RecordAuditEvents(f.ctx, []domain.AuditEvent{
		ev("a-1", "alice", "idempotency_key=k-1", "transaction_id=t-a"),
		ev("b-1", "bob", "idempotency_key=k-2", "transaction_id=t-b"),
		ev("a-2", "carol", "idempotency_key=k-1", "replayed=true", "transaction_id=t-a"),
		ev("ab", "bob", "transaction_id=t-ab", "reason=see transaction_id=t-a"), // near misses
		ev("p-1", "dave", "payout_id=po-1", "status=paid"),
		ev("a-3", "erin", "transaction_id=t-a", "reason=duplicate"),
	}); err != nil {
		t.Fatal(err)
	}
	type page struct {
		Events []struct {
			EventID string `json:"event_id"`
		} `json:"events"`
		Next string `json:"next_page_token"`
	}
	list := func(query string) (int, page, string) {
		t.Helper()
		code, body := c.do("GET", "/v1/audit-events?"+query, "")
		var p page
		if code == 200 {
			if err := json.Unmarshal([]byte(body), &p); err != nil {
				t.Fatalf("?%s: %v: %s", query, err, body)
			}
		}
		return code, p, body
	}
	ids := func(p page) string {
		var out []string
		for _, e := range p.Events {
			out = append(out, e.EventID)
		}
		return strings.Join(out, ",")
	}
	for _, tt := range []struct{ give, want string }{
		{"transaction_id=t-b", "b-1"},
		{"payout_id=po-1", "p-1"},
		{"replayed=true", "a-2"},
		{"transaction_id=t-", ""},
		{"transaction_id=T-A", ""},
	} {
		if code, p, body := list("resource=" + url.QueryEscape(tt.give)); code != 200 || ids(p) != tt.want || p.Next != "" {
			t.Errorf("resource %s: %d %s; want %q", tt.give, code, body, tt.want)
		}
	}
	code, p1, body := list("resource=transaction_id=t-a&page_size=2")
	if code != 200 || ids(p1) != "a-3,a-2" || p1.Next == "" {
		t.Fatalf("transaction t-a, page 1: %d %s; want a-3,a-2 and a token", code, body)
	}
	code, p2, body := list("resource=transaction_id=t-a&page_size=2&page_token=" + p1.Next)
	if code != 200 || ids(p2) != "a-1" || p2.Next != "" {
		t.Fatalf("transaction t-a, page 2: %d %s; want a-1 and no token", code, body)
	}
	// A token is the filter's own.
	for _, other := range []string{"resource=transaction_id=t-b&", "actor=alice&resource=transaction_id=t-a&", ""} {
		if code, _, body := list(other + "page_size=2&page_token=" + p1.Next); code != 400 || !strings.Contains(body, "page_token") {
			t.Errorf("t-a's token with ?%s: %d %s; want 400 naming page_token", other, code, body)
		}
	}
	for _, bad := range []string{"t-a", "=t-a", "Transaction_id=t-a", "transaction id=t-a", "transaction_id", "transaction_id=t\x00a",
		"transaction_id=" + strings.Repeat("x", 1000)} {
		if code, _, body := list("resource=" + url.QueryEscape(bad)); code != 400 || !strings.Contains(body, "resource") {
			t.Errorf("resource %.40q: %d %s; want 400 naming resource", bad, code, body)
		}
	}
}
