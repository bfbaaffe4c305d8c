package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/reqid"
)

// Request size limits: a body is refused (REST 413, gRPC RESOURCE_EXHAUSTED)
// before it is decoded. Usage ingest carries up to 5 000 events per call
// (~300 bytes each in JSON), every other write a few KiB. Bytes do not
// bound what ingest costs to decode (8 MiB of empty events is 2.8 million):
// its events are counted before it is decoded, and more than 5 000 refused
// (LimitWith, metering's ports). A bank statement is a day of the client
// account: payout's bank file books each of up to 50 000 transfers a day
// on its own (BtchBookg false), each a camt.053 entry of 0.3 to 1.3 KB
// with its references, payee and remittance, beside the day's receipts;
// under 1 MiB (~3 600 entries) the day's statement was refused and
// reconciliation never saw it. nginx takes each route's body up to the
// same limit, and streams the uploads' (deploy/nginx.conf; deploycheck's
// TestGatewayBodyLimits).
const (
	bodyBytesMax       = 1 << 20  // every REST body but these below
	ingestBodyBytesMax = 8 << 20  // POST /v1/usage-events, /v1/bank-files
	grpcMsgBytesMax    = 1 << 20  // every gRPC request but these below
	grpcIngestBytesMax = 8 << 20  // IngestUsageEvents, ImportBankFile
	statementBytesMax  = 64 << 20 // POST /v1/bank-statements, ImportBankStatement; also the listener's MaxRecvMsgSize
	headerBytesMax     = 64 << 10
)

// HTTP server timeouts: a client that trickles its request or never reads
// the answer holds a connection at most this long.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second // headers and body
	writeTimeout      = 60 * time.Second // a segregated-funds CSV of a large ledger included
	idleTimeout       = 120 * time.Second
)

// The routes allowed a larger limit: usage ingest, bank file uploads (a
// day's pain.002 or camt.054 for thousands of payees; larger files go
// through the bank inbox directory) and bank statements.
const (
	ingestPath    = "/v1/usage-events"
	bankFilePath  = "/v1/bank-files"
	statementPath = "/v1/bank-statements"
)

// largeBody is a POST route's larger limit, and the method the route
// calls: edge reads such a body only for a caller the guard passes for
// that method.
type largeBody struct {
	method   string
	bytesMax int64
}

var largeBodies = map[string]largeBody{
	statementPath: {"/gpubill.ledger.v1.BankStatementService/ImportBankStatement", statementBytesMax},
	bankFilePath:  {"/gpubill.payout.v1.PayoutService/ImportBankFile", ingestBodyBytesMax},
	ingestPath:    {"/gpubill.metering.v1.UsageService/IngestUsageEvents", ingestBodyBytesMax},
}

// requestBytesMax is the largest request of these types a gRPC call takes
// (by message name: the listener's codec refuses a larger one from its
// length, before it decodes it); grpcMsgBytesMax any other's.
var requestBytesMax = map[protoreflect.FullName]int{
	"gpubill.metering.v1.IngestUsageEventsRequest": grpcIngestBytesMax,
	"gpubill.payout.v1.ImportBankFileRequest":      grpcIngestBytesMax,
	"gpubill.ledger.v1.ImportBankStatementRequest": statementBytesMax,
}

// msgBytesMax is the largest request of m's type a gRPC call takes.
func msgBytesMax(m proto.Message) int {
	if n, ok := requestBytesMax[m.ProtoReflect().Descriptor().FullName()]; ok {
		return n
	}
	return grpcMsgBytesMax
}

// edge is the REST listener's outermost handler: it gives every request an
// id (X-Request-Id, answered and forwarded to gRPC), and reads the body up
// to the route's limit before anything decodes it, so an over-size body is a
// 413 whatever its Content-Length says. A route of a larger limit is served
// it only once the guard has passed the caller for the route's method
// (gate): a 401 or 403 is answered with the body unread, and the
// connection closed rather than drained. On a server without the route's
// service (its method in no policy), the route has the limit of any other.
func edge(next http.Handler, gate callGate) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := reqid.New() // never the client's: the id names our log lines
		r.Header.Set(reqid.Header, id)
		w.Header().Set(reqid.Header, id)
		r = r.WithContext(reqid.With(r.Context(), id))
		if r.Body != nil && r.Body != http.NoBody {
			limit := int64(bodyBytesMax)
			if lb, ok := largeBodies[r.URL.Path]; ok && r.Method == http.MethodPost && gate.serves(lb.method) {
				// Its pattern is its path: a refusal before routing is
				// counted under the route, as the gateway's answer was.
				obs.ReportRoute(r, http.MethodPost+" "+r.URL.Path)
				if gate.refuseREST(w, r, lb.method, id) {
					return
				}
				limit = lb.bytesMax
			}
			if r.ContentLength > limit {
				writeStatus(w, id, http.StatusRequestEntityTooLarge, tooLarge(limit))
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
			if err != nil {
				if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
					writeStatus(w, id, http.StatusRequestEntityTooLarge, tooLarge(limit))
					return
				}
				writeStatus(w, id, http.StatusBadRequest, status.New(codes.InvalidArgument, "request body could not be read"))
				return
			}
			r.Body = &requestBody{Reader: bytes.NewReader(body), raw: body}
			r.ContentLength = int64(len(body))
		}
		next.ServeHTTP(w, r)
	})
}

func tooLarge(limit int64) *status.Status {
	return status.New(codes.ResourceExhausted, fmt.Sprintf("request body larger than %d bytes", limit))
}

// sizeLimit refuses a gRPC request above its type's limit (on the
// listener, textCodec has refused it undecoded), and one that a LimitWith
// check refused undecoded (the guard, before it, has passed the caller).
func sizeLimit() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := refusal(req); err != nil {
			return nil, apperr.ToStatus(err)
		}
		if m, ok := req.(proto.Message); ok {
			if limit := msgBytesMax(m); proto.Size(m) > limit {
				return nil, msgTooLarge(limit)
			}
		}
		return handler(ctx, req)
	}
}

func msgTooLarge(limit int) error {
	return status.Errorf(codes.ResourceExhausted, "request larger than %d bytes", limit)
}
