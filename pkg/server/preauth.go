package server

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/reqid"
)

// callGate is the guard's check of a caller made before the call's
// request is read: by edge on the routes of large bodies, and by the gRPC
// listener's tap on every call, whose receive window is a bank
// statement's 64 MiB. A caller without a valid token, or whose role or
// address may not call the method, is answered 401 / 403 with its body
// unread: read first, any client could make every replica buffer 64 MiB a
// connection (or a stream) for free. The interceptor chain checks an
// admitted call again as before (its token is then in the guard's cache).
type callGate struct {
	guard   auth.Guard
	audit   *audit.Recorder   // nil: no audit log (unit tests)
	gateway *runtime.ServeMux // the REST gateway, whose metadata of a request the guard reads (newGateway)
	log     *slog.Logger
	// methods holds the full name of every method registered on the gRPC
	// listener (health and reflection too), filled by newGRPCServer
	// before the listener serves.
	methods map[string]bool
}

// unknownMethod is the method label under which a call of a method no
// service registers is counted: its name is the caller's, any string,
// and one series per name would let a client grow the metrics without
// bound.
const unknownMethod = "unknown"

// admit is the guard's verdict on ctx's caller (its incoming metadata) of
// method: nil for a public method or a caller the guard passes, else its
// 401 or 403.
func (g callGate) admit(ctx context.Context, method string) error {
	if auth.IsPublic(method) {
		return nil
	}
	_, err := g.guard.Authorize(ctx, method)
	return err
}

// serves says whether a service of this server serves method (its
// policy names it).
func (g callGate) serves(method string) bool {
	_, ok := g.guard.Policy[method]
	return ok
}

// refused audits the write method refused to ctx's caller with err, as
// the audit interceptor records the guard's refusals (an authenticated
// caller's only); a method no service serves is not recorded (the
// listener answered one Unimplemented before the chain, unaudited).
func (g callGate) refused(ctx context.Context, method, requestID string, err error) {
	if !g.serves(method) || g.audit == nil {
		return
	}
	g.audit.Refused(ctx, g.guard, method, requestID, err)
}

// restContext is the context r's call of method has on the gateway's
// channel: the incoming metadata the gateway makes of r (its own
// annotation: its header matcher, requestIDHeader, and its annotators, the
// gateway's key and the client's address), so the gate finds a token
// wherever the gateway would and nowhere else. A list of headers of its
// own (Authorization) would drift from the matcher's. Not the deadline a
// Grpc-Timeout header sets: the refusal's audit record is stored under
// this context.
func (g callGate) restContext(r *http.Request, method string) (context.Context, error) {
	ctx, err := runtime.AnnotateIncomingContext(r.Context(), g.gateway, r, method)
	if err != nil {
		return nil, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return metadata.NewIncomingContext(r.Context(), md), nil
}

// refuseREST answers r, whose route calls method, 401 or 403 unless the
// guard passes its caller, and says whether it did, the body unread. A
// request whose headers the gateway refuses (a malformed Grpc-Timeout or
// -Bin header) is answered the gateway's 400, unread too.
func (g callGate) refuseREST(w http.ResponseWriter, r *http.Request, method, requestID string) bool {
	ctx, err := g.restContext(r, method)
	if err == nil {
		if err = g.admit(ctx, method); err == nil {
			return false
		}
		g.refused(ctx, method, requestID, err)
	}
	closeUnread(w, r)
	st := status.Convert(err)
	obs.CountRefusedCall(method, st.Code())
	writeStatus(w, requestID, runtime.HTTPStatusFromCode(st.Code()), st)
	return true
}

// closeUnread has net/http close r's connection after the answer, as it
// does when a body is over http.MaxBytesReader's limit (here 0: a byte of
// it is read): without draining the body to reuse the connection (up to
// 256 KiB more read), and lingering (CloseWrite, then 500 ms) so the
// client reads the answer; closed at once with its body unread (a client
// that sent Connection: close), the connection was reset under the
// client's answer. Of a body sent without its length, net/http still
// reads up to 256 KiB once answered, looking for its end.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	for { // to net/http's own writer (obs.HTTPMetrics wraps it)
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	http.MaxBytesReader(w, r.Body, 0).Read(make([]byte, 1)) //nolint:errcheck // a *http.MaxBytesError is the point; io.EOF: nothing unread
}

// tap refuses a call on the gRPC listener (grpc.InTapHandle) once its
// headers are in, before its stream exists or its message is received:
// whatever the method, an unauthenticated caller gets no more than its
// headers read. It runs on the connection's reader: the audit record of
// a refused write is stored on a goroutine of its own.
//
// A method no service registers is answered Unimplemented, whoever calls
// it: the guard's 401 or 403 ("not open to any role") told a client with
// a misspelt method, or a client of another version, that it existed.
func (g callGate) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !g.methods[info.FullMethodName] {
		obs.CountRefusedCall(unknownMethod, codes.Unimplemented)
		return ctx, status.Errorf(codes.Unimplemented, "unknown method %s", info.FullMethodName)
	}
	err := g.admit(ctx, info.FullMethodName)
	if err == nil {
		return ctx, nil
	}
	id := incomingRequestID(ctx)
	ctx = reqid.With(ctx, id)
	go g.refused(context.WithoutCancel(ctx), info.FullMethodName, id, err)
	err = apperr.Public(ctx, g.log, info.FullMethodName, err)
	obs.CountRefusedCall(info.FullMethodName, status.Code(err))
	return ctx, err
}
