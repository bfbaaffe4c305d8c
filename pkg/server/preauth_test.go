package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
)

// unreadBytesMax bounds what the server reads of a refused caller's
// request: its headers and a read buffer's worth of its body (net/http's
// 4 KiB), a flow-control window of it (HTTP/2's 64 KiB), or, of a body
// sent without its length, what net/http reads of it looking for its end
// (256 KiB); never the body. Draining the connection for reuse as well
// read 512 KiB of it.
const unreadBytesMax = 320 << 10

// uploadService serves the large-body routes and one read, every method
// unimplemented: a call that reaches one was passed by the guard.
type uploadService struct{}

func (uploadService) RegisterGRPC(s grpc.ServiceRegistrar) {
	ledgerv1.RegisterBankStatementServiceServer(s, ledgerv1.UnimplementedBankStatementServiceServer{})
	payoutv1.RegisterPayoutServiceServer(s, payoutv1.UnimplementedPayoutServiceServer{})
	meteringv1.RegisterUsageServiceServer(s, meteringv1.UnimplementedUsageServiceServer{})
}

func (uploadService) RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
	if err := ledgerv1.RegisterBankStatementServiceHandlerClient(ctx, mux, ledgerv1.NewBankStatementServiceClient(conn)); err != nil {
		return err
	}
	if err := payoutv1.RegisterPayoutServiceHandlerClient(ctx, mux, payoutv1.NewPayoutServiceClient(conn)); err != nil {
		return err
	}
	return meteringv1.RegisterUsageServiceHandlerClient(ctx, mux, meteringv1.NewUsageServiceClient(conn))
}

func (uploadService) Policy() auth.Policy {
	return auth.Policy{
		ledgerv1.BankStatementService_ImportBankStatement_FullMethodName: {auth.RoleFinance},
		payoutv1.PayoutService_ImportBankFile_FullMethodName:             {auth.RoleFinance},
		payoutv1.PayoutService_GetPayout_FullMethodName:                  {auth.RoleFinance, auth.RoleProvider},
		meteringv1.UsageService_IngestUsageEvents_FullMethodName:         {auth.RoleMeter, auth.RoleFinance},
	}
}

// spaces is an endless body of spaces, counting what was read of it.
type spaces struct{ read atomic.Int64 }

func (s *spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	s.read.Add(int64(len(p)))
	return len(p), nil
}

// countingConn counts the bytes written to and read from a connection,
// and whether it was closed.
type countingConn struct {
	net.Conn
	written, read atomic.Int64
	closed        atomic.Bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// countingListener counts what is read from each connection it accepts.
type countingListener struct {
	net.Listener
	mu   sync.Mutex
	last *countingConn
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: c}
	l.mu.Lock()
	l.last = cc
	l.mu.Unlock()
	return cc, nil
}

// lastConn is the connection accepted last.
func (l *countingListener) lastConn() *countingConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// startUploads starts a server of uploadService, counting what its REST
// listener reads, and answers it with tokens by role ("" none, "forged"
// not signed by the server).
func startUploads(t *testing.T, rec *audit.Recorder) (*Server, *countingListener, map[string]string) {
	t.Helper()
	secret := []byte("preauth-test-secret-0123456789abcdef")
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rest := &countingListener{Listener: hl}
	s, err := Start(context.Background(), Options{GRPCAddr: "127.0.0.1:0", HTTPListener: rest, Secret: secret,
		Log: slog.New(slog.DiscardHandler), Services: []Service{uploadService{}}, Audit: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	tokens := map[string]string{"": ""}
	for role, sub := range map[string]string{auth.RoleFinance: "", auth.RoleRenter: "r-1", auth.RoleMeter: ""} {
		if tokens[role], err = auth.Issue(secret, role, sub, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	forged, err := auth.Issue([]byte("another-secret-0123456789abcdef-xyz"), auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tokens["forged"] = forged
	return s, rest, tokens
}

// TestUploadRefusedUnread: a large-body route (a bank statement's 64 MiB,
// a bank file's or ingest's 8 MiB) answers a caller without a valid token
// 401, and one whose role may not call it 403, before reading its body:
// each read 64 MiB (8 MiB) first, so any client could make every replica
// buffer that much per connection. A caller the route is open to gets
// its body read and reaches the method.
func TestUploadRefusedUnread(t *testing.T) {
	s, rest, tokens := startUploads(t, nil)
	routes := []struct {
		path, contentType string
		bytes             int64
	}{
		{"/v1/bank-statements", "application/xml", 64 << 20},
		{"/v1/bank-files", "application/xml", 8 << 20},
		{"/v1/usage-events", "application/json", 8 << 20},
	}
	oneConn := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // a request a connection
	for _, rt := range routes {
		for _, tt := range []struct {
			give   string // the caller's role
			length int64  // the Content-Length sent; -1 none (chunked, which net/http drains 256 KiB of)
			want   int
		}{
			{"", rt.bytes, http.StatusUnauthorized},
			{"", -1, http.StatusUnauthorized},
			{"forged", rt.bytes, http.StatusUnauthorized},
			{auth.RoleRenter, rt.bytes, http.StatusForbidden},
			{auth.RoleRenter, -1, http.StatusForbidden},
		} {
			body := &spaces{}
			req, err := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr+rt.path, io.LimitReader(body, rt.bytes))
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tt.length
			req.Header.Set("Content-Type", rt.contentType)
			if tok := tokens[tt.give]; tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			start := time.Now()
			resp, err := oneConn.Do(req)
			if err != nil {
				t.Fatalf("%s, %q: %v", rt.path, tt.give, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("%s (length %d), %q: the answer: %v", rt.path, tt.length, tt.give, err)
			}
			// What the server read of the connection, until it
			// closed it (after its answer, net/http may read on).
			conn := rest.lastConn()
			pollUntil(t, conn.closed.Load, rt.path+": the refused request's connection left open")
			read := conn.read.Load()
			t.Logf("%s of %d MiB (length %d), %q: HTTP %d in %s; the server read %d bytes (the client sent %d of its body)",
				rt.path, rt.bytes>>20, tt.length, tt.give, resp.StatusCode, time.Since(start).Round(time.Millisecond), read, body.read.Load())
			if resp.StatusCode != tt.want {
				t.Errorf("%s (length %d), %q: HTTP %d %.200s; want %d", rt.path, tt.length, tt.give, resp.StatusCode, b, tt.want)
			}
			if read > unreadBytesMax {
				t.Errorf("%s (length %d), %q: the server read %d bytes before its %d; want at most %d", rt.path, tt.length, tt.give, read, resp.StatusCode, unreadBytesMax)
			}
		}
		// The route's caller: read whole, and on to the method.
		tok := tokens[auth.RoleFinance]
		req, err := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr+rt.path, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusNotImplemented {
			t.Errorf("%s, finance: HTTP %d %.200s; want 501 from the method", rt.path, resp.StatusCode, b)
		}
	}
}

// TestCallRefusedUnread: the gRPC listener takes messages of up to 64 MiB
// (a bank statement's); a call of any method without a valid token is
// answered UNAUTHENTICATED, and one whose role may not call it
// PERMISSION_DENIED, before its message is received: it was received
// whole (and refused from its length, undecoded) before the guard.
func TestCallRefusedUnread(t *testing.T) {
	s, _, tokens := startUploads(t, nil)
	const content = 64<<20 - 1<<10
	big := strings.Repeat(" ", content)
	calls := []struct {
		name   string
		method string
		req    proto.Message
	}{
		{"ImportBankStatement", ledgerv1.BankStatementService_ImportBankStatement_FullMethodName, &ledgerv1.ImportBankStatementRequest{Currency: "CNY", Content: big}},
		{"GetPayout", payoutv1.PayoutService_GetPayout_FullMethodName, &payoutv1.GetPayoutRequest{PayoutId: big}},
	}
	for _, c := range calls {
		for _, tt := range []struct {
			give string
			want codes.Code
		}{
			{"", codes.Unauthenticated},
			{"forged", codes.Unauthenticated},
			{auth.RoleRenter, codes.PermissionDenied},
		} {
			// What the client wrote, the server read: a stream's
			// window bounds what the client sends unanswered.
			var counted atomic.Pointer[countingConn]
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
					if err != nil {
						return nil, err
					}
					cc := &countingConn{Conn: conn}
					counted.Store(cc)
					return cc, nil
				})}
			if tok := tokens[tt.give]; tok != "" {
				opts = append(opts, grpc.WithPerRPCCredentials(auth.BearerCreds(tok)))
			}
			conn, err := grpc.NewClient(s.GRPCAddr, opts...)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = conn.Invoke(context.Background(), c.method, c.req, &ledgerv1.ImportBankStatementResponse{})
			conn.Close()
			t.Logf("%s of %d MiB, %q: %v in %s, %d bytes sent", c.name, proto.Size(c.req)>>20, tt.give, status.Code(err), time.Since(start).Round(time.Millisecond), counted.Load().written.Load())
			if status.Code(err) != tt.want {
				t.Errorf("%s, %q: %v; want %v", c.name, tt.give, err, tt.want)
			}
			if n := counted.Load().written.Load(); n > unreadBytesMax {
				t.Errorf("%s, %q: the client sent %d bytes before the refusal; want at most %d", c.name, tt.give, n, unreadBytesMax)
			}
		}
	}
}

// auditStore keeps the audit records it is given.
type auditStore struct {
	mu   sync.Mutex
	recs []*eventsv1.AuditRecorded
}

func (s *auditStore) Insert(_ context.Context, _ string, recs []*eventsv1.AuditRecorded) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, recs...)
	return nil
}

func (s *auditStore) records() []*eventsv1.AuditRecorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recs)
}

// TestRefusedUploadAudited: a write refused before its body is read is
// in the audit log as the interceptor recorded it when the guard refused
// it after: an authenticated caller's, with its role, the code and the
// request id; a caller without a valid token names nobody.
func TestRefusedUploadAudited(t *testing.T) {
	store := &auditStore{}
	s, _, tokens := startUploads(t, audit.New(store, slog.New(slog.DiscardHandler), "ledger", "payout", "metering"))
	for _, tok := range []string{tokens[auth.RoleRenter], "", tokens["forged"]} {
		req, err := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr+"/v1/bank-statements", io.LimitReader(&spaces{}, 64<<20))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 64 << 20
		req.Header.Set("Content-Type", "application/xml")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if tok == tokens[auth.RoleRenter] {
			recs := store.records()
			if len(recs) != 1 || recs[0].Method != ledgerv1.BankStatementService_ImportBankStatement_FullMethodName || recs[0].Role != auth.RoleRenter ||
				recs[0].Actor != "r-1" || recs[0].Code != codes.PermissionDenied.String() || recs[0].RequestId != resp.Header.Get("X-Request-Id") || recs[0].ClientAddr != "127.0.0.1" {
				t.Fatalf("REST, the renter's refused statement: HTTP %d, audited %v; want one PermissionDenied record of r-1 with the request id %s",
					resp.StatusCode, recs, resp.Header.Get("X-Request-Id"))
			}
		}
	}

	for _, tok := range []string{"", tokens[auth.RoleRenter]} { // a record of the first would come before the second's
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if tok != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(auth.BearerCreds(tok)))
		}
		conn, err := grpc.NewClient(s.GRPCAddr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = payoutv1.NewPayoutServiceClient(conn).ImportBankFile(context.Background(), &payoutv1.ImportBankFileRequest{Name: "a.xml", Content: "<x/>"})
		conn.Close()
		if status.Code(err) == codes.OK {
			t.Fatalf("gRPC, %q: the import was served", tok)
		}
	}
	pollUntil(t, func() bool { return len(store.records()) >= 2 }, "gRPC: the renter's refused bank file not audited")
	recs := store.records()
	if len(recs) != 2 || recs[1].Method != payoutv1.PayoutService_ImportBankFile_FullMethodName || recs[1].Role != auth.RoleRenter ||
		recs[1].Code != codes.PermissionDenied.String() || recs[1].RequestId == "" || recs[1].ClientAddr != "127.0.0.1" {
		t.Errorf("gRPC: audited %v; want the statement's record, then one PermissionDenied record of the renter's bank file", recs)
	}
}

// TestLargeBodiesNameTheirRoutes: each large-body route's method is the
// one its google.api.http rule posts to that path. A misspelt method is in
// no policy: edge gave the route the 1 MiB of any other, and a day's
// statement was a 413.
func TestLargeBodiesNameTheirRoutes(t *testing.T) {
	for path, lb := range largeBodies {
		svc, name, _ := strings.Cut(strings.TrimPrefix(lb.method, "/"), "/")
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if err != nil || !ok || sd.Methods().ByName(protoreflect.Name(name)) == nil {
			t.Errorf("%s: method %s not found (%v)", path, lb.method, err)
			continue
		}
		rule, _ := proto.GetExtension(sd.Methods().ByName(protoreflect.Name(name)).Options(), annotations.E_Http).(*annotations.HttpRule)
		if rule.GetPost() != path {
			t.Errorf("%s: %s posts to %q", path, lb.method, rule.GetPost())
		}
	}
}

// TestUploadGateReadsTheGatewaysToken: the upload gate finds a REST
// caller's token where the gateway finds it: a caller is answered on an
// upload route as on a route the gate does not stand before (GET
// /v1/payouts/{id}, whose 501 is the method's), a refused one with its
// body unread. The gateway's matcher (requestIDHeader, then
// runtime.DefaultHeaderMatcher) forwards no Grpc-Metadata- header: a token
// there is no token, on either route. Headers the gateway refuses are a
// 400 before the body too.
func TestUploadGateReadsTheGatewaysToken(t *testing.T) {
	s, rest, tokens := startUploads(t, nil)
	bearer := "Bearer " + tokens[auth.RoleFinance]
	tests := []struct {
		name       string
		give       http.Header
		want       int // on both routes
		wantUnread bool
	}{
		{"Authorization", http.Header{"Authorization": {bearer}}, http.StatusNotImplemented, false},
		{"Grpc-Metadata-Authorization", http.Header{"Grpc-Metadata-Authorization": {bearer}}, http.StatusUnauthorized, true},
		{"no token", http.Header{}, http.StatusUnauthorized, true},
		{"a malformed Grpc-Timeout", http.Header{"Authorization": {bearer}, "Grpc-Timeout": {"soon"}}, http.StatusBadRequest, true},
	}
	oneConn := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	do := func(req *http.Request) (int, string) {
		t.Helper()
		resp, err := oneConn.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	const bodyBytes = 8 << 20 // a bank file's limit
	for _, tt := range tests {
		get, err := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr+"/v1/payouts/po-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		get.Header = tt.give.Clone()
		if code, b := do(get); code != tt.want {
			t.Errorf("%s, GET /v1/payouts/po-1: HTTP %d %.200s; want %d", tt.name, code, b, tt.want)
		}

		body := &spaces{}
		post, err := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr+"/v1/bank-files",
			io.MultiReader(strings.NewReader("{}"), io.LimitReader(body, bodyBytes-2)))
		if err != nil {
			t.Fatal(err)
		}
		post.ContentLength = bodyBytes
		post.Header = tt.give.Clone()
		post.Header.Set("Content-Type", "application/json")
		code, b := do(post)
		conn := rest.lastConn()
		pollUntil(t, conn.closed.Load, tt.name+": the upload's connection left open")
		if code != tt.want {
			t.Errorf("%s, POST /v1/bank-files: HTTP %d %.200s; want %d", tt.name, code, b, tt.want)
		}
		if read := conn.read.Load(); tt.wantUnread && read > unreadBytesMax {
			t.Errorf("%s, POST /v1/bank-files: the server read %d bytes before its %d; want at most %d", tt.name, read, code, unreadBytesMax)
		}
	}
}

// TestGateFollowsTheGatewaysMatcher: the gate reads the token from the
// metadata the gateway's own matcher makes of the headers, not from a list
// of its own: under a matcher that forwards Grpc-Metadata- headers
// (runtime.WithLegacyHeaderMatching), a token in
// Grpc-Metadata-Authorization is the caller's token for the gate as for
// the gateway; under gpubill's, it is none. Read from Authorization alone,
// the gate answered 401 to a caller the gateway passed.
func TestGateFollowsTheGatewaysMatcher(t *testing.T) {
	secret := []byte("preauth-test-secret-0123456789abcdef")
	tok, err := auth.Issue(secret, auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name    string
		gateway *runtime.ServeMux
		give    string // the header carrying the token
		want    int    // 0: admitted, the body left to the route
	}{
		{"legacy matcher, Grpc-Metadata-Authorization", NewGatewayMux(log, runtime.WithLegacyHeaderMatching()), "Grpc-Metadata-Authorization", 0},
		{"legacy matcher, Authorization", NewGatewayMux(log, runtime.WithLegacyHeaderMatching()), "Authorization", 0},
		{"legacy matcher, Grpc-Metadata-Other", NewGatewayMux(log, runtime.WithLegacyHeaderMatching()), "Grpc-Metadata-Other", http.StatusUnauthorized},
		{"gpubill's matcher, Grpc-Metadata-Authorization", NewGatewayMux(log), "Grpc-Metadata-Authorization", http.StatusUnauthorized},
		{"gpubill's matcher, Authorization", NewGatewayMux(log), "Authorization", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gate := callGate{guard: auth.Guard{Secret: secret, Policy: uploadService{}.Policy(), Tokens: &auth.TokenCache{}}, gateway: tt.gateway, log: log}
			r := httptest.NewRequest(http.MethodPost, "/v1/bank-files", strings.NewReader("{}"))
			r.Header.Set(tt.give, "Bearer "+tok)
			w := httptest.NewRecorder()
			refused := gate.refuseREST(w, r, payoutv1.PayoutService_ImportBankFile_FullMethodName, "req-1")
			got := 0
			if refused {
				got = w.Code
			}
			if got != tt.want {
				t.Errorf("answered %d (0: admitted) %.200s; want %d", got, w.Body.String(), tt.want)
			}
		})
	}
}

// TestUnknownMethodUnimplemented: a method no service of the server
// registers was answered by the pre-auth gate as the guard refuses it
// (403 "not open to any role"), as if it existed, to any caller. It is
// answered Unimplemented, for any caller, its message unread; a method a
// service registers but no role may call is still refused.
func TestUnknownMethodUnimplemented(t *testing.T) {
	s, _, tokens := startUploads(t, nil)
	big := &ledgerv1.ImportBankStatementRequest{Currency: "CNY", Content: strings.Repeat(" ", 64<<20-1<<10)}
	for _, tt := range []struct {
		give   string // the caller's token, by role
		method string
		want   codes.Code
	}{
		{"", "/gpubill.nosuch.v1.NoSuchService/Get", codes.Unimplemented},
		{"forged", "/gpubill.nosuch.v1.NoSuchService/Get", codes.Unimplemented},
		{auth.RoleRenter, "/gpubill.nosuch.v1.NoSuchService/Get", codes.Unimplemented},
		{auth.RoleFinance, "/gpubill.nosuch.v1.NoSuchService/Get", codes.Unimplemented},
		{"", "/gpubill.payout.v1.PayoutService/NoSuchMethod", codes.Unimplemented},
		{auth.RoleFinance, "/gpubill.payout.v1.PayoutService/NoSuchMethod", codes.Unimplemented},
		{auth.RoleFinance, "/gpubill.ledger.v1.LedgerService/CreateTransaction", codes.Unimplemented}, // served by another service
		// Registered, in no role's policy: refused as before.
		{auth.RoleFinance, payoutv1.PayoutService_CancelPayout_FullMethodName, codes.PermissionDenied},
		{"", payoutv1.PayoutService_CancelPayout_FullMethodName, codes.PermissionDenied},
	} {
		var counted atomic.Pointer[countingConn]
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				cc := &countingConn{Conn: conn}
				counted.Store(cc)
				return cc, nil
			})}
		if tok := tokens[tt.give]; tok != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(auth.BearerCreds(tok)))
		}
		conn, err := grpc.NewClient(s.GRPCAddr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		err = conn.Invoke(context.Background(), tt.method, big, &ledgerv1.ImportBankStatementResponse{})
		conn.Close()
		if status.Code(err) != tt.want {
			t.Errorf("%s, %q: %v; want %v", tt.method, tt.give, err, tt.want)
		}
		if n := counted.Load().written.Load(); n > unreadBytesMax {
			t.Errorf("%s, %q: the client sent %d bytes before the answer; want at most %d (the message unread)", tt.method, tt.give, n, unreadBytesMax)
		}
	}
}
