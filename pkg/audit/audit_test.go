package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
)

type fakeStore struct {
	mu     sync.Mutex
	down   bool
	stored []*eventsv1.AuditRecorded
}

func (s *fakeStore) Insert(_ context.Context, schema string, recs []*eventsv1.AuditRecorded) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errors.New("database unreachable")
	}
	s.stored = append(s.stored, recs...)
	return nil
}

type fakeCaller struct{ p auth.Principal }

func (c fakeCaller) Principal(context.Context) (auth.Principal, error) { return c.p, nil }
func (c fakeCaller) ClientAddr(context.Context) netip.Addr             { return netip.MustParseAddr("10.1.2.3") }

const createTx = "/gpubill.ledger.v1.LedgerService/CreateTransaction"

func TestIsWrite(t *testing.T) {
	r := New(&fakeStore{}, slog.Default(), "ledger")
	for m, want := range map[string]bool{
		createTx: true,
		"/gpubill.ledger.v1.LedgerService/ReverseTransaction": true,
		"/gpubill.ledger.v1.LedgerService/GetAccount":         false,
		"/gpubill.ledger.v1.AuditService/ListAuditEvents":     false,
		"/gpubill.pricing.v1.PricingService/CreateQuote":      false,
		"/grpc.health.v1.Health/Check":                        false,
	} {
		if got := r.IsWrite(m); got != want {
			t.Errorf("IsWrite(%s) = %v, want %v", m, got, want)
		}
	}
}

// TestRecordNotLostWhenStoreFails: a write whose record cannot be stored
// keeps it (the answer is the handler's), the next write is refused before
// its handler runs, and once the store answers the backlog is stored first.
func TestRecordNotLostWhenStoreFails(t *testing.T) {
	store := &fakeStore{}
	r := New(store, slog.New(slog.DiscardHandler), "ledger")
	icp := r.UnaryInterceptor(fakeCaller{auth.Principal{Role: auth.RoleFinance, Subject: "alice"}}, func(context.Context) string { return "req-1" })
	ran := 0
	handler := func(context.Context, any) (any, error) {
		ran++
		return &ledgerv1.CreateTransactionResponse{Transaction: &ledgerv1.Transaction{TransactionId: "tx-9"}}, nil
	}
	call := func() error {
		_, err := icp(context.Background(), &ledgerv1.CreateTransactionRequest{IdempotencyKey: "k-1"},
			&grpc.UnaryServerInfo{FullMethod: createTx}, handler)
		return err
	}

	if err := call(); err != nil {
		t.Fatal(err)
	}
	if len(store.stored) != 1 {
		t.Fatalf("stored %d records, want 1", len(store.stored))
	}
	got := store.stored[0]
	if got.Actor != "alice" || got.Role != "finance" || got.Method != createTx || got.Code != "OK" || got.RequestId != "req-1" ||
		got.ClientAddr != "10.1.2.3" || got.Service != "ledger" ||
		!slices.Contains(got.ResourceIds, "idempotency_key=k-1") || !slices.Contains(got.ResourceIds, "transaction_id=tx-9") {
		t.Fatalf("record %+v", got)
	}

	store.down = true
	if err := call(); err != nil { // applied: its answer stands, its record waits
		t.Fatalf("write whose record could not be stored: %v", err)
	}
	if ran != 2 || r.Backlog() != 1 {
		t.Fatalf("handler ran %d times, backlog %d; want 2 and 1", ran, r.Backlog())
	}
	if err := call(); status.Code(err) != codes.Unavailable || ran != 2 {
		t.Fatalf("write while the audit store is down: %v (handler ran %d times), want Unavailable before the handler", err, ran)
	}
	store.down = false
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if ran != 3 || r.Backlog() != 0 || len(store.stored) != 3 {
		t.Fatalf("after recovery: handler %d, backlog %d, stored %d; want 3, 0, 3", ran, r.Backlog(), len(store.stored))
	}

	// A refused attempt is recorded with its code; reads are not recorded.
	deny := func(context.Context, any) (any, error) { return nil, status.Error(codes.PermissionDenied, "no") }
	if _, err := icp(context.Background(), &ledgerv1.CreateTransactionRequest{}, &grpc.UnaryServerInfo{FullMethod: createTx}, deny); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("refused write: %v; want PermissionDenied", err)
	}
	if _, err := icp(context.Background(), &ledgerv1.GetAccountRequest{}, &grpc.UnaryServerInfo{FullMethod: "/gpubill.ledger.v1.LedgerService/GetAccount"}, handler); err != nil {
		t.Fatalf("read: %v", err)
	}
	if len(store.stored) != 4 || store.stored[3].Code != "PermissionDenied" {
		t.Fatalf("stored %d, last %+v", len(store.stored), store.stored[len(store.stored)-1])
	}
}

// gatedStore holds its first insert until gate closes, and counts inserts.
type gatedStore struct {
	fakeStore
	gate    chan struct{}
	entered chan struct{}
	inserts int
	sizes   []int
	before  func() // runs at the start of every insert but the first
}

func (s *gatedStore) Insert(ctx context.Context, schema string, recs []*eventsv1.AuditRecorded) error {
	s.mu.Lock()
	s.inserts++
	first := s.inserts == 1
	s.sizes = append(s.sizes, len(recs))
	s.mu.Unlock()
	if first {
		close(s.entered)
		<-s.gate
	} else if s.before != nil {
		s.before()
	}
	return s.fakeStore.Insert(ctx, schema, recs)
}

// TestConcurrentRecordsStoredTogether: the records of writes that arrive
// while one is being stored go in together, one insert for all of them;
// every write's answer waits for its own record; and when that insert
// fails, every record of it is kept, none dropped.
func TestConcurrentRecordsStoredTogether(t *testing.T) {
	for _, down := range []bool{false, true} {
		store := &gatedStore{gate: make(chan struct{}), entered: make(chan struct{})}
		r := New(store, slog.New(slog.DiscardHandler), "ledger")
		icp := r.UnaryInterceptor(fakeCaller{auth.Principal{Role: auth.RoleFinance, Subject: "alice"}}, func(context.Context) string { return "req" })
		handler := func(context.Context, any) (any, error) { return &ledgerv1.CreateTransactionResponse{}, nil }
		call := func(key string) error {
			_, err := icp(context.Background(), &ledgerv1.CreateTransactionRequest{IdempotencyKey: key}, &grpc.UnaryServerInfo{FullMethod: createTx}, handler)
			return err
		}
		const n = 20
		var wg sync.WaitGroup
		answered := make(chan string, n)
		wg.Add(1)
		go func() { // its record's insert holds the others back
			defer wg.Done()
			if err := call("first"); err != nil {
				t.Error(err)
			}
			answered <- "first"
		}()
		store.before = func() { // the first has its answer; the others must wait for this insert
			time.Sleep(20 * time.Millisecond)
			if len(answered) > 1 {
				t.Error("a write was answered before the insert of its record")
			}
		}
		<-store.entered
		for i := range n - 1 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := call(fmt.Sprint("k-", i)); err != nil {
					t.Error(err)
				}
				answered <- "other"
			}()
		}
		waitFor(t, func() bool { return r.queue.Len() == n-1 })
		if len(answered) != 0 {
			t.Fatal("a write was answered before its record was stored")
		}
		store.mu.Lock()
		store.down = down
		store.mu.Unlock()
		close(store.gate)
		wg.Wait()
		store.mu.Lock()
		inserts, sizes, stored := store.inserts, store.sizes, len(store.stored)
		store.mu.Unlock()
		if inserts != 2 || sizes[1] != n-1 {
			t.Fatalf("down=%v: %d inserts of %v records; want 2: the first alone, then the %d that waited, together", down, inserts, sizes, n-1)
		}
		if want := n; down {
			if stored != 0 || r.Backlog() != want {
				t.Fatalf("down: stored %d, backlog %d; want 0 and %d", stored, r.Backlog(), want)
			}
		} else if stored != want || r.Backlog() != 0 {
			t.Fatalf("stored %d, backlog %d; want %d and 0", stored, r.Backlog(), want)
		}
	}
}

// Records made one after another carry time-ordered ids (UUIDv7), so the
// audit log's unique key on event_id takes each new one at its end, not at
// a random leaf page (DEVELOPERS.md, "The audit log's inserts").
func TestRecordIDsTimeOrdered(t *testing.T) {
	store := &fakeStore{}
	r := New(store, slog.New(slog.DiscardHandler), "ledger")
	icp := r.UnaryInterceptor(fakeCaller{auth.Principal{Role: auth.RoleFinance, Subject: "alice"}}, func(context.Context) string { return "req" })
	handler := func(context.Context, any) (any, error) { return &ledgerv1.CreateTransactionResponse{}, nil }
	for i := range 200 {
		if _, err := icp(context.Background(), &ledgerv1.CreateTransactionRequest{IdempotencyKey: fmt.Sprint("k-", i)}, &grpc.UnaryServerInfo{FullMethod: createTx}, handler); err != nil {
			t.Fatal(err)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.stored) != 200 {
		t.Fatalf("%d records stored, want 200", len(store.stored))
	}
	for i, rec := range store.stored {
		u, err := uuid.Parse(rec.EventId)
		if err != nil || u.Version() != 7 {
			t.Fatalf("record %d: event id %q is not a UUIDv7 (%v)", i, rec.EventId, err)
		}
		if i > 0 && rec.EventId <= store.stored[i-1].EventId {
			t.Fatalf("record %d: event id %s not after %s", i, rec.EventId, store.stored[i-1].EventId)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 1000 {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Join makes one AuditRecordedBatch message per subject, its records in
// their order, with the first record's id and the count; a subject with one
// record keeps its message as it was.
func TestJoinOneMessagePerSubject(t *testing.T) {
	rec := func(id, service string) outbox.Message {
		r := &eventsv1.AuditRecorded{EventId: id, At: timestamppb.New(time.Unix(1_700_000_000, 0)), Service: service,
			Method: createTx, ResourceIds: []string{"transaction_id=" + id}, Code: "OK"}
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return outbox.Message{ID: recordID(r), Subject: subjects.AuditRecorded.Of(service), Payload: b}
	}
	in := []outbox.Message{rec("a", "ledger"), rec("x", "payout"), rec("b", "ledger"), rec("c", "ledger")}
	out := Join(in)
	if len(out) != 2 || out[0].ID != "audit-a+3" || out[0].Subject != "audit.recorded.ledger" || out[1].ID != in[1].ID ||
		out[1].Subject != in[1].Subject || string(out[1].Payload) != string(in[1].Payload) {
		t.Fatalf("joined %+v", out)
	}
	batch := &eventsv1.AuditRecordedBatch{}
	if err := proto.Unmarshal(out[0].Payload, batch); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range batch.Records {
		got = append(got, r.EventId+"/"+r.Service+"/"+r.ResourceIds[0])
	}
	if want := []string{"a/ledger/transaction_id=a", "b/ledger/transaction_id=b", "c/ledger/transaction_id=c"}; !slices.Equal(got, want) {
		t.Fatalf("batch holds %v, want %v", got, want)
	}
	// Read as one record (what a consumer that predates batches does), it
	// has no event id: refused, not stored as something else.
	one := &eventsv1.AuditRecorded{}
	if err := proto.Unmarshal(out[0].Payload, one); err != nil || one.EventId != "" || one.At != nil {
		t.Fatalf("batch read as one record: %v, %v", one, err)
	}
}

// A long id of many-byte characters is cut at a character's boundary: cut
// at byte 200 inside one, its audit record could not be marshalled (proto3
// strings are UTF-8), stayed at the head of the backlog, and every audited
// write of the process answered 503 until a restart.
func TestResourceIDsCutAtACharacter(t *testing.T) {
	t.Parallel()
	ids := resourceIDs(&ledgerv1.CreateDepositRequest{RenterId: "r-001", ExternalRef: "x" + strings.Repeat("é", 150)})
	for _, id := range ids {
		if !utf8.ValidString(id) {
			t.Errorf("resource id %q is not UTF-8", id)
		}
	}
	if _, err := proto.Marshal(&eventsv1.AuditRecorded{ResourceIds: ids}); err != nil {
		t.Fatalf("the record does not marshal: %v", err)
	}
}

// A provider's payout account identifiers (an Alipay phone number or
// e-mail, a WeChat openid, a bank account number) never reach the
// append-only audit log in clear, applied or refused: they are kept masked
// as the payout service shows them ("****8000"). alipay_id ends in _id and
// was kept whole as a resource id.
func TestPayoutIdentifiersRecordedMasked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		give       *payoutv1.PutPayoutMethodRequest
		clear      string
		field      string // the identifier's field
		wantMasked string
	}{
		{"alipay phone", &payoutv1.PutPayoutMethodRequest{ProviderId: "p-001", Type: "alipay", AccountName: "Li Lei", AlipayId: "13800138000"},
			"13800138000", "alipay_id", "****8000"},
		{"alipay e-mail", &payoutv1.PutPayoutMethodRequest{ProviderId: "p-001", Type: "alipay", AccountName: "Li Lei", AlipayId: "lilei@example.com"},
			"lilei@example.com", "alipay_id", "****.com"},
		{"wechat", &payoutv1.PutPayoutMethodRequest{ProviderId: "p-001", Type: "wechat", AccountName: "Li Lei", WechatOpenid: "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},
			"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o", "wechat_openid", "****eS6o"},
		{"bank", &payoutv1.PutPayoutMethodRequest{ProviderId: "p-001", Type: "bank", AccountName: "Rig Pay Ltd", AccountNumber: "6222020200112233445", BankCode: "ICBC"},
			"6222020200112233445", "account_number", "****3445"},
		// The payout service stores an account number without the spaces
		// people type, in upper case (domain.Method.Normalized), and shows
		// it masked from that: its last four characters were " 445".
		{"bank typed with spaces", &payoutv1.PutPayoutMethodRequest{ProviderId: "p-001", Type: "bank", AccountName: "Rig Pay Ltd", AccountNumber: "6222 0202 0011 2233 445", BankCode: "ICBC"},
			"6222 0202 0011 2233 445", "account_number", "****3445"},
		{"IBAN typed in lower case", &payoutv1.PutPayoutMethodRequest{ProviderId: "p-001", Type: "bank", AccountName: "Rig Pay Ltd", AccountNumber: "mt84 malt 0110 0001 2345 mtlc ast0 01s", BankCode: "MALTMTMT"},
			"mt84 malt 0110 0001 2345 mtlc ast0 01s", "account_number", "****001S"},
		{"short", &payoutv1.PutPayoutMethodRequest{ProviderId: "p-001", Type: "alipay", AlipayId: "1380"},
			"1380", "alipay_id", "****"},
		{"padded", &payoutv1.PutPayoutMethodRequest{ProviderId: "p-001", Type: "alipay", AlipayId: " 13800138000 "},
			"13800138000", "alipay_id", "****8000"},
		{"non-ASCII (the payout service refuses it)", &payoutv1.PutPayoutMethodRequest{ProviderId: "p-001", Type: "alipay", AlipayId: "李雷@例子.中国"},
			"李雷@例子.中国", "alipay_id", "****子.中国"},
	}
	for _, tt := range tests {
		for _, answer := range []string{"applied", "refused"} {
			store := &fakeStore{}
			r := New(store, slog.New(slog.DiscardHandler), "payout")
			icp := r.UnaryInterceptor(fakeCaller{auth.Principal{Role: auth.RoleProvider, Subject: "p-001"}}, func(context.Context) string { return "req-1" })
			handler := func(context.Context, any) (any, error) {
				if answer == "refused" {
					return nil, status.Error(codes.InvalidArgument, "bad method")
				}
				// The service answers the method masked (domain.Method.Masked).
				m := &payoutv1.PayoutMethod{ProviderId: "p-001", Type: tt.give.Type}
				switch tt.field {
				case "alipay_id":
					m.AlipayId = tt.wantMasked
				case "wechat_openid":
					m.WechatOpenid = tt.wantMasked
				case "account_number":
					m.AccountNumber = tt.wantMasked
				}
				return &payoutv1.PutPayoutMethodResponse{PayoutMethod: m}, nil
			}
			_, err := icp(context.Background(), tt.give, &grpc.UnaryServerInfo{FullMethod: payoutv1.PayoutService_PutPayoutMethod_FullMethodName}, handler)
			if wantCode := map[string]codes.Code{"applied": codes.OK, "refused": codes.InvalidArgument}[answer]; status.Code(err) != wantCode {
				t.Fatalf("%s, %s: %v, want %v", tt.name, answer, err, wantCode)
			}
			if len(store.stored) != 1 {
				t.Fatalf("%s, %s: stored %d records, want 1", tt.name, answer, len(store.stored))
			}
			rec := store.stored[0]
			for _, id := range rec.ResourceIds {
				if strings.Contains(id, tt.clear) {
					t.Errorf("%s, %s: resource id %q holds the identifier in clear", tt.name, answer, id)
				}
				if strings.HasPrefix(id, tt.field+"=") && id != tt.field+"="+tt.wantMasked {
					t.Errorf("%s, %s: resource id %q, want it shown as the payout service shows it, %s", tt.name, answer, id, tt.wantMasked)
				}
			}
			want := []string{"provider_id=p-001", tt.field + "=" + tt.wantMasked}
			for _, w := range want {
				if !slices.Contains(rec.ResourceIds, w) {
					t.Errorf("%s, %s: resource ids %q, want %q among them", tt.name, answer, rec.ResourceIds, w)
				}
			}
			if _, err := proto.Marshal(rec); err != nil {
				t.Errorf("%s, %s: the record does not marshal: %v", tt.name, answer, err)
			}
		}
	}
}

// MaskResourceID masks a payout account identifier recorded in clear (by a
// payout replica of an earlier version) as this version records it, and
// leaves one already masked, or any other id, as it is: applied again, it
// changes nothing.
func TestMaskResourceID(t *testing.T) {
	t.Parallel()
	tests := []struct{ give, want string }{
		{"alipay_id=13800138000", "alipay_id=****8000"},
		{"alipay_id=****8000", "alipay_id=****8000"},
		{"alipay_id= 13800138000 ", "alipay_id=****8000"},
		{"alipay_id=1380", "alipay_id=****"},
		{"alipay_id=****", "alipay_id=****"},
		{"alipay_id=", "alipay_id="},
		{"wechat_openid=oUpF8uMuAJO_M2pxb1Q9zNjWeS6o", "wechat_openid=****eS6o"},
		{"account_number=6222 0202 0011 2233 445", "account_number=****3445"},
		{"account_number=**** 445", "account_number=*****445"}, // as an earlier version masked the one above
		{"account_number=mt84malt011000012345mtlcast001s", "account_number=****001S"},
		{"provider_id=13800138000", "provider_id=13800138000"},
		{"idempotency_key=alipay_id=13800138000", "idempotency_key=alipay_id=13800138000"},
		{"13800138000", "13800138000"},
	}
	for _, tt := range tests {
		got := MaskResourceID(tt.give)
		if got != tt.want {
			t.Errorf("MaskResourceID(%q) = %q, want %q", tt.give, got, tt.want)
		}
		if again := MaskResourceID(got); again != got {
			t.Errorf("MaskResourceID(%q) = %q, masked again %q", tt.give, got, again)
		}
	}
}

// FuzzMaskResourceID: masking what is masked changes nothing, and a masked
// identifier keeps at most its last four characters.
func FuzzMaskResourceID(f *testing.F) {
	for _, s := range []string{"alipay_id=13800138000", "account_number=6222 0202 0011 2233 445", "wechat_openid= a b ", "account_number=ß ǅ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		got := MaskResourceID(id)
		if again := MaskResourceID(got); again != got {
			t.Fatalf("MaskResourceID(%q) = %q, masked again %q", id, got, again)
		}
		if field, value, _ := strings.Cut(got, "="); maskedFields[field] != nil && utf8.RuneCountInString(value) > 8 {
			t.Fatalf("MaskResourceID(%q) = %q keeps more than four characters", id, got)
		}
	})
}

// A record names what a write decided, not only what it touched: a hold
// and its release, KYC verified and rejected, a provider's tier or tax
// profile changed, a deposit's amount, read alike (provider_id only) when
// only id fields were kept. A secret never is (a webhook's), and a payout
// account identifier stays masked.
func TestRecordNamesTheDecision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give []any // request, answer
		note []string
		want []string
	}{
		{"hold", []any{&payoutv1.HoldProviderPayoutsRequest{ProviderId: "p-1", Reason: "fraud review"}}, []string{"action=hold"},
			[]string{"provider_id=p-1", "reason=fraud review", "action=hold"}},
		{"release", []any{&payoutv1.HoldProviderPayoutsRequest{ProviderId: "p-1"}}, []string{"action=release"},
			[]string{"provider_id=p-1", "action=release"}},
		{"kyc verified", []any{&payoutv1.PutKycRequest{ProviderId: "p-1", Status: "verified", Reference: "doc-1"}}, nil,
			[]string{"provider_id=p-1", "status=verified"}},
		{"kyc rejected", []any{&payoutv1.PutKycRequest{ProviderId: "p-1", Status: "rejected", Reference: "doc-1"}}, nil,
			[]string{"provider_id=p-1", "status=rejected"}},
		{"provider tier", []any{&meteringv1.UpdateProviderRequest{Provider: &meteringv1.Provider{ProviderId: "p-1", Tier: "pro", TaxProfile: "enterprise"}}}, nil,
			[]string{"provider_id=p-1", "tier=pro", "tax_profile=enterprise"}},
		{"deposit", []any{&ledgerv1.CreateDepositRequest{RenterId: "r-1", Amount: "100.00", Currency: "USD", ExternalRef: "dep-1"}}, nil,
			[]string{"renter_id=r-1", "amount=100.00", "currency=USD", "external_ref=dep-1"}},
		{"reconciliation", []any{&ledgerv1.ResolveReconciliationItemsRequest{ReconciliationId: "rc-1", Action: "write_off", Reason: "bank fee"}}, nil,
			[]string{"reconciliation_id=rc-1", "action=write_off", "reason=bank fee"}},
		{"webhook secret", []any{&payoutv1.CreateWebhookRequest{ProviderId: "p-1", Url: "https://x.example", Secret: "s3cret-s3cret-s3cret"}}, nil,
			[]string{"provider_id=p-1"}},
		{"account number", []any{&payoutv1.PutPayoutMethodRequest{ProviderId: "p-1", Type: "bank", AccountName: "Li Lei", AccountNumber: "6222020200112233445"}}, nil,
			[]string{"provider_id=p-1", "account_number=****3445"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := &fakeStore{}
			r := New(store, slog.New(slog.DiscardHandler), "ledger", "payout", "metering")
			icp := r.UnaryInterceptor(fakeCaller{auth.Principal{Role: auth.RoleFinance, Subject: "alice"}}, func(context.Context) string { return "req-1" })
			handler := func(ctx context.Context, _ any) (any, error) {
				Note(ctx, tt.note...)
				if len(tt.give) > 1 {
					return tt.give[1], nil
				}
				return nil, nil
			}
			if _, err := icp(context.Background(), tt.give[0], &grpc.UnaryServerInfo{FullMethod: "/gpubill.payout.v1.PayoutService/X"}, handler); err != nil {
				t.Fatal(err)
			}
			// In any order: protobuf ranges over fields in an order of its own.
			if len(store.stored) != 1 || !slices.Equal(slices.Sorted(slices.Values(store.stored[0].ResourceIds)), slices.Sorted(slices.Values(tt.want))) {
				t.Fatalf("recorded %+v, want ids %v", store.stored, tt.want)
			}
		})
	}
}
