// Package audit records every write a gpubill API serves (DESIGN §7: who,
// role, what, which resources, when, request id, result) without a shared
// table: the interceptor queues an AuditRecorded event in the serving
// service's own outbox (<schema>.outbox, relayed to audit.recorded.{service}
// like every other event), and the ledger stores the events append-only
// and serves GET /v1/audit-events. A write that commits in a transaction of
// its own may take its record from the interceptor (Claim) and store it in
// that transaction: the ledger's API group commit does.
//
// No write's record is silently lost: the answer to a write waits until its
// record is committed to the outbox; if the outbox cannot be written, the
// record is kept in memory and retried, the failure is logged with the whole
// record, and further writes are refused (Unavailable, before their handler
// runs) until the backlog is stored.
package audit

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/group"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
)

// Limits.
const (
	recordTimeout    = 5 * time.Second // how long a write's answer waits for its record
	storeBatchMax    = 512             // records stored in one insert
	retryEvery       = time.Second     // backlog retries while the outbox is unwritable
	resourceIDsMax   = 32              // resource ids kept per record
	resourceValueMax = 200             // bytes kept per id value (and per note: Note)
)

// notWrites are non-GET RPCs that change nothing (pure calculations).
var notWrites = map[string]bool{"/gpubill.pricing.v1.PricingService/CreateQuote": true}

// Store writes records into a service schema's outbox.
type Store interface {
	Insert(ctx context.Context, schema string, recs []*eventsv1.AuditRecorded) error
}

// PoolStore is the Postgres Store: one statement per batch, into
// <schema>.outbox.
type PoolStore struct{ Pool *pgxpool.Pool }

// Insert implements Store: the records of one service go in as one message
// (Join).
func (s PoolStore) Insert(ctx context.Context, schema string, recs []*eventsv1.AuditRecorded) error {
	msgs := make([]outbox.Message, len(recs))
	for i, r := range recs {
		b, err := proto.Marshal(r)
		if err != nil {
			return err
		}
		msgs[i] = outbox.Message{ID: recordID(r), Subject: subjects.AuditRecorded.Of(r.Service), Payload: b}
	}
	msgs = Join(msgs)
	ids, subjs, payloads := make([]string, len(msgs)), make([]string, len(msgs)), make([][]byte, len(msgs))
	for i, m := range msgs {
		ids[i], subjs[i], payloads[i] = m.ID, m.Subject, m.Payload
	}
	q := outbox.InsertInto(schema) + ` select * from unnest($1::text[], $2::text[], $3::bytea[]) on conflict (id) do nothing`
	if _, err := s.Pool.Exec(ctx, q, ids, subjs, payloads); err != nil {
		return fmt.Errorf("audit outbox %s: %w", schema, err)
	}
	outbox.Wake(schema)
	return nil
}

// Recorder is the audit interceptor of one server.
type Recorder struct {
	store    Store
	schemas  map[string]bool // services whose writes this process serves
	log      *slog.Logger
	now      func() time.Time
	mu       sync.Mutex
	fallback string    // the outbox of writes by a component without a schema of its own (ops)
	backlog  []pending // records not yet stored, oldest first
	failing  atomic.Bool
	writeOps sync.Map // method → bool (is a write)

	queue *group.Queue[*queued] // records waiting to be stored
}

type pending struct {
	schema string
	rec    *eventsv1.AuditRecorded
}

// queued is a record waiting to be stored with the others of its moment.
type queued struct {
	pending
	err error
}

// New returns a recorder for the named services (their schemas hold the
// outboxes). Writes served by a component of the process that has no schema
// of its own (the dead-letter operations, gpubill.ops.v1) are queued in the
// first service's outbox.
func New(store Store, log *slog.Logger, services ...string) *Recorder {
	r := &Recorder{store: store, log: log, now: time.Now, schemas: map[string]bool{}}
	r.queue = &group.Queue[*queued]{Max: storeBatchMax, Run: r.storeBatch}
	for _, s := range services {
		r.schemas[s] = true
	}
	if len(services) > 0 {
		r.fallback = services[0]
	}
	return r
}

// Run retries the backlog until ctx ends (a record whose outbox write failed
// is stored as soon as the database answers again).
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(retryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.failing.Load() {
				if err := r.flush(ctx); err != nil {
					// Still failing: the records stay in the backlog and writes
					// stay refused; say so at each retry.
					r.log.Warn("audit: backlog still not stored", "err", err, "left", r.backlogLen())
				}
			}
		}
	}
}

// Backlog is the number of records waiting to be stored.
func (r *Recorder) Backlog() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.backlog)
}

// IsWrite says whether a method changes state: every RPC whose REST route
// is not a GET, except pure calculations (quotes).
func (r *Recorder) IsWrite(method string) bool {
	if v, ok := r.writeOps.Load(method); ok {
		return v.(bool)
	}
	w := isWrite(method)
	r.writeOps.Store(method, w)
	return w
}

func isWrite(method string) bool {
	if notWrites[method] || auth.IsPublic(method) {
		return false
	}
	svc, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return true // unknown: audit rather than miss
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return true
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return true
	}
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	return rule == nil || rule.GetGet() == ""
}

// serviceOf is "ledger" for "/gpubill.ledger.v1.LedgerService/X".
func serviceOf(method string) string {
	parts := strings.SplitN(strings.TrimPrefix(method, "/"), ".", 3)
	if len(parts) == 3 && parts[0] == "gpubill" {
		return parts[1]
	}
	return ""
}

// Caller is how the interceptor learns who calls and from where (the
// server's auth.Guard).
type Caller interface {
	Principal(ctx context.Context) (auth.Principal, error)
	ClientAddr(ctx context.Context) netip.Addr
}

// UnaryInterceptor records every write by an authenticated caller, refused
// or not, with its result code. It runs outside the authorisation check (so
// a refused attempt is recorded too) and outside the error mapping (so the
// code is the one the client gets). Calls without a valid token are not
// recorded: they name nobody.
func (r *Recorder) UnaryInterceptor(who Caller, requestID func(context.Context) string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !r.IsWrite(info.FullMethod) {
			return handler(ctx, req)
		}
		p, err := who.Principal(ctx)
		if err != nil {
			return handler(ctx, req) // the guard answers 401
		}
		service := serviceOf(info.FullMethod)
		schema := r.schemaOf(service)
		if schema == "" {
			r.log.Error("audit: no outbox for this write; refused", "method", info.FullMethod)
			return nil, status.Error(codes.Unavailable, "this write cannot be audited here")
		}
		if r.failing.Load() {
			if err := r.flush(ctx); err != nil {
				return nil, status.Errorf(codes.Unavailable, "audit log unavailable, write refused (request id %s); retry later", requestID(ctx))
			}
		}
		rec := &eventsv1.AuditRecorded{
			EventId: ids.New(""), Service: service, Method: info.FullMethod,
			Actor: p.Subject, Role: p.Role, RequestId: requestID(ctx), ClientAddr: addrString(who.ClientAddr(ctx)),
		}
		c := &Claim{rec: rec, req: req, schema: schema, now: r.now}
		resp, herr := handler(context.WithValue(ctx, claimKey{}, c), req)
		if c.stored.Load() {
			return resp, herr // the write stored its record itself
		}
		if c.taken.Load() {
			// The write took its record and did not say it committed: its
			// caller left, or its commit went unanswered, and the write may
			// still commit its record (code OK, what it made). This one,
			// what the caller was answered, goes under an event id of its
			// own: under the record's, stored first, it made the write's
			// own a repeat, dropped, and a deposit that went through was
			// in the log only as Canceled.
			rec.EventId = ids.New("")
		}
		rec.At, rec.ResourceIds, rec.Code = timestamppb.New(r.now()), c.withNotes(resourceIDs(req, resp)), status.Code(herr).String()
		r.record(ctx, schema, rec)
		return resp, herr
	}
}

// Refused records a write refused before its request was read (the
// server checks the caller of a large upload, or of any call on its gRPC
// listener, before it receives the body), as UnaryInterceptor records one
// the guard refuses: an authenticated caller's only, with the code err
// answered; the request's ids, never read, are not in it.
func (r *Recorder) Refused(ctx context.Context, who Caller, method, requestID string, err error) {
	if !r.IsWrite(method) {
		return
	}
	p, perr := who.Principal(ctx)
	if perr != nil {
		return // names nobody
	}
	service := serviceOf(method)
	schema := r.schemaOf(service)
	if schema == "" {
		r.log.Error("audit: no outbox for this refused write; not recorded", "method", method)
		return
	}
	r.record(ctx, schema, &eventsv1.AuditRecorded{
		EventId: ids.New(""), Service: service, Method: method, Actor: p.Subject, Role: p.Role, RequestId: requestID,
		ClientAddr: addrString(who.ClientAddr(ctx)), At: timestamppb.New(r.now()), Code: status.Code(err).String(),
	})
}

// schemaOf is the schema whose outbox holds the records of service's
// writes; "" when none does.
func (r *Recorder) schemaOf(service string) string {
	if r.schemas[service] {
		return service
	}
	return r.fallback
}

// Claim is a write's audit record handed to the write, so it can be stored
// in the very transaction that commits the write (in the service's outbox,
// as the interceptor stores it): one statement more in that transaction
// instead of a transaction of its own, and the write and its record commit
// or fail together. A write that does not take it, or whose transaction does
// not commit, leaves the record to the interceptor. The stored record says
// what the write did (code OK) even if its caller stopped waiting and got
// its own error. A write that took its record (Message) and was answered
// without it stored (its caller gave up before the commit, or the commit's
// answer was lost) is recorded by the interceptor too, as answered, under an
// event id of its own: the log then holds what the caller was told and, if
// the write committed after all, what it did, both with the request's id.
type Claim struct {
	rec    *eventsv1.AuditRecorded // without At, ResourceIds and Code
	req    any
	schema string
	now    func() time.Time
	taken  atomic.Bool // Message was called: the write may commit the record
	stored atomic.Bool
	mu     sync.Mutex
	notes  []string // Note's
}

type claimKey struct{}

// ClaimFrom is the audit record the interceptor holds for the write ctx
// serves; nil when the call is not audited.
func ClaimFrom(ctx context.Context) *Claim {
	c, _ := ctx.Value(claimKey{}).(*Claim)
	return c
}

// Note adds ids ("field=value", clipped as resource ids are) to the record
// of the write ctx serves; nothing when the call is not audited. They name
// what the write decided that no field of its request or answer says: a
// hold's release (an empty reason), an answer read from the row a first
// request made ("replayed=true"). Noted before Message, they are in the
// record the write stores too.
func Note(ctx context.Context, ids ...string) {
	c := ClaimFrom(ctx)
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.notes = append(c.notes, apperr.Clip(id, resourceValueMax))
	}
}

// withNotes is ids followed by the notes not among them, at most
// resourceIDsMax in all.
func (c *Claim) withNotes(ids []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.notes {
		if len(ids) < resourceIDsMax && !slices.Contains(ids, n) {
			ids = append(ids, n)
		}
	}
	return ids
}

// Schema is the schema whose outbox the record belongs in.
func (c *Claim) Schema() string { return c.schema }

// Message is the record of the write succeeding, as an outbox message: what
// the interceptor would store for it, code OK, the request's resource ids
// and then created, the ids of what the write made that its answer will
// carry ("transaction_id=…"). Its id is the one the interceptor would give
// it, so it is stored once whoever stores it.
func (c *Claim) Message(created ...string) (outbox.Message, error) {
	c.taken.Store(true)
	rec := proto.Clone(c.rec).(*eventsv1.AuditRecorded)
	rec.At, rec.Code = timestamppb.New(c.now()), codes.OK.String()
	rec.ResourceIds = c.withNotes(resourceIDs(c.req))
	for _, id := range created {
		if len(rec.ResourceIds) < resourceIDsMax && !slices.Contains(rec.ResourceIds, id) {
			rec.ResourceIds = append(rec.ResourceIds, id)
		}
	}
	b, err := proto.Marshal(rec)
	if err != nil {
		return outbox.Message{}, err
	}
	return outbox.Message{ID: recordID(rec), Subject: subjects.AuditRecorded.Of(rec.Service), Payload: b}, nil
}

// Stored tells the interceptor that the transaction holding Message has
// committed: it stores nothing more for this write.
func (c *Claim) Stored() { c.stored.Store(true) }

// recordID is a record's outbox message id.
func recordID(rec *eventsv1.AuditRecorded) string { return "audit-" + rec.EventId }

// recordsField is AuditRecordedBatch.records.
const recordsField protowire.Number = 11

// Join turns records' messages (each one AuditRecorded, as Claim.Message
// and Insert make them) into one AuditRecordedBatch message per subject,
// the records in their order, so writes stored together cost the relay, the
// stream and the ledger's audit consumer one message, not one each. A
// subject with one record keeps its message. The batch's id is its first
// record's followed by "+{count}": a record is in one stored batch only, so
// the id is unique as each record's is.
func Join(msgs []outbox.Message) []outbox.Message {
	var subjs []string
	bySubject := map[string][]outbox.Message{}
	for _, m := range msgs {
		if bySubject[m.Subject] == nil {
			subjs = append(subjs, m.Subject)
		}
		bySubject[m.Subject] = append(bySubject[m.Subject], m)
	}
	out := make([]outbox.Message, 0, len(subjs))
	for _, subj := range subjs {
		ms := bySubject[subj]
		if len(ms) == 1 {
			out = append(out, ms[0])
			continue
		}
		size := 0
		for _, m := range ms {
			size += len(m.Payload) + 8
		}
		b := make([]byte, 0, size)
		for _, m := range ms {
			b = protowire.AppendTag(b, recordsField, protowire.BytesType)
			b = protowire.AppendBytes(b, m.Payload)
		}
		out = append(out, outbox.Message{ID: ms[0].ID + "+" + strconv.Itoa(len(ms)), Subject: subj, Payload: b})
	}
	return out
}

// record stores rec now, or keeps it in the backlog (logged in full) for
// Run. Records of concurrent writes are stored together, one insert per
// schema (storeBatch): one commit each made every audited write cost a
// second commit, which halved what the ledger's REST API could post.
func (r *Recorder) record(ctx context.Context, schema string, rec *eventsv1.AuditRecorded) {
	q := &queued{pending: pending{schema, rec}}
	<-r.queue.Add(ctx, q) // bounded: each insert has recordTimeout
	err := q.err
	if err == nil {
		return
	}
	r.mu.Lock()
	r.backlog = append(r.backlog, pending{schema, rec})
	n := len(r.backlog)
	r.mu.Unlock()
	r.failing.Store(true)
	r.log.Error("audit: record not stored yet; kept for retry, writes refused until stored", "err", err, "backlog", n,
		"event_id", rec.EventId, "method", rec.Method, "actor", rec.Actor, "role", rec.Role, "resource_ids", rec.ResourceIds,
		"request_id", rec.RequestId, "code", rec.Code, "at", rec.At.AsTime())
}

// storeBatch inserts a batch's records, one insert per schema (pkg/group
// runs it for the writes whose records arrive together).
func (r *Recorder) storeBatch(ctx context.Context, batch []*queued) {
	var schemas []string
	bySchema := map[string][]*queued{}
	for _, q := range batch {
		if bySchema[q.schema] == nil {
			schemas = append(schemas, q.schema)
		}
		bySchema[q.schema] = append(bySchema[q.schema], q)
	}
	for _, schema := range schemas {
		qs := bySchema[schema]
		recs := make([]*eventsv1.AuditRecorded, len(qs))
		for i, q := range qs {
			recs[i] = q.rec
		}
		sctx, cancel := context.WithTimeout(ctx, recordTimeout)
		err := r.store.Insert(sctx, schema, recs)
		cancel()
		for _, q := range qs {
			q.err = err
		}
	}
}

// flush stores the backlog, oldest first.
func (r *Recorder) flush(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	for len(r.backlog) > 0 {
		p := r.backlog[0]
		if err := r.store.Insert(sctx, p.schema, []*eventsv1.AuditRecorded{p.rec}); err != nil {
			return err
		}
		rec := p.rec
		r.backlog = r.backlog[1:]
		r.log.Info("audit: backlog record stored", "event_id", rec.EventId, "left", len(r.backlog))
	}
	r.failing.Store(false)
	return nil
}

// resourceIDs collects "field=value" for the id-like string fields of the
// request and the answer (top level and one message deep): *_id, address,
// account, idempotency_key, external_ref, period, the decision fields
// (decisionFields), and payout account identifiers masked (maskedFields).
func resourceIDs(msgs ...any) []string {
	var out []string
	var walk func(m protoreflect.Message, depth int)
	walk = func(m protoreflect.Message, depth int) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case len(out) >= resourceIDsMax:
				return false
			case fd.IsList() || fd.IsMap():
			case fd.Kind() == protoreflect.StringKind && (isIDField(string(fd.Name())) || decisionFields[string(fd.Name())] ||
				maskedFields[string(fd.Name())] != nil):
				s := maskValue(string(fd.Name()), v.String())
				// Cut at a character (apperr.Clip): cut inside one, the
				// record could not be marshalled (proto3 strings are UTF-8),
				// stayed at the head of the backlog, and every audited
				// write of the process answered 503 until a restart.
				s = apperr.Clip(s, resourceValueMax)
				if e := string(fd.Name()) + "=" + s; !slices.Contains(out, e) {
					out = append(out, e)
				}
			case fd.Kind() == protoreflect.MessageKind && depth == 0:
				walk(v.Message(), depth+1)
			}
			return true
		})
	}
	for _, x := range msgs {
		if m, ok := x.(proto.Message); ok && m != nil && m.ProtoReflect().IsValid() {
			walk(m.ProtoReflect(), 0)
		}
	}
	return out
}

// maskedFields are a provider's payout account identifiers
// (payout.v1.PutPayoutMethodRequest, PayoutMethod): an Alipay phone number or
// e-mail, a WeChat openid, a bank account number. The log is append-only and
// read by finance and auditors, so they are kept masked, as the payout
// service shows them ("****8000": apperr.Mask), never in clear (alipay_id,
// an *_id, was kept whole). Each is masked as the payout service stores it
// (domain.Method.Normalized, which pkg may not import): an Alipay id or
// openid trimmed, an account number without the spaces people type in it,
// in upper case. Masked as typed, "6222 0202 0011 2233 445" was recorded
// "**** 445" where payout shows "****3445".
var maskedFields = map[string]func(string) string{
	"alipay_id":      strings.TrimSpace,
	"wechat_openid":  strings.TrimSpace,
	"account_number": accountNumber,
}

// maskValue is what a record keeps of a field's value: masked (apperr.Mask)
// as the payout service stores it for a payout account identifier
// (maskedFields), as it is for any other field.
func maskValue(field, s string) string {
	if normalize := maskedFields[field]; normalize != nil {
		return apperr.Mask(normalize(s))
	}
	return s
}

// MaskResourceID is a "field=value" resource id as a record of this version
// keeps it: a payout account identifier's value masked (maskValue), any
// other id unchanged. A value already masked stays as it is ("****8000"),
// so a consumer may apply it to records of any version: the ledger does,
// to those of a payout replica of an earlier version, still serving in a
// rolling upgrade, which kept identifiers in clear.
func MaskResourceID(id string) string {
	field, value, ok := strings.Cut(id, "=")
	if !ok || maskedFields[field] == nil {
		return id
	}
	return field + "=" + maskValue(field, value)
}

// accountNumber is an account number as the payout service stores it:
// without white space, in upper case. (Payout refuses one holding white
// space other than spaces; its record drops that too.)
func accountNumber(s string) string {
	return strings.ToUpper(strings.Join(strings.Fields(s), ""))
}

// decisionFields say what a write decided, where its ids say only what it
// touched: with ids alone a hold and its release, KYC verified and
// rejected, a provider's tier changed or not, read alike. They are
// enumerations, amounts and the reasons finance gives (clipped as ids
// are); none is a secret (a webhook's secret is not kept) or a payee's
// account detail (account_name, bank_code are not kept; the identifiers
// are masked: maskedFields).
var decisionFields = map[string]bool{
	"reason": true, "status": true, "action": true, "resolution": true,
	"tier": true, "tax_profile": true, "rule_set": true,
	"amount": true, "rail_amount": true, "currency": true,
}

func isIDField(name string) bool {
	switch name {
	case "address", "account", "idempotency_key", "external_ref", "period", "jurisdiction":
		return true
	}
	return strings.HasSuffix(name, "_id")
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// backlogLen is how many records wait to be stored.
func (r *Recorder) backlogLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.backlog)
}
