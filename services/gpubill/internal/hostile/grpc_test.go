package hostile

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	pricingv1 "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
)

// TestGRPCLimitsAndTextGuard: on the gRPC listener, a request above its
// method's limit is RESOURCE_EXHAUSTED (ingest takes more), a NUL byte in a
// nested text field is INVALID_ARGUMENT naming it, and every call answers
// its request id in the x-request-id header.
func TestGRPCLimitsAndTextGuard(t *testing.T) {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.BearerCreds(tokens[auth.RoleFinance])),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	pricing := pricingv1.NewPricingServiceClient(conn)
	usage := meteringv1.NewUsageServiceClient(conn)
	ledger := ledgerv1.NewLedgerServiceClient(conn)

	big := strings.Repeat("x", 1<<20)
	_, err = pricing.CreateQuote(ctx, &pricingv1.CreateQuoteRequest{GpuModel: "RTX_4090", GpuCount: 1, Hours: "1", Currency: "CNY", Region: big})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("1 MiB quote: %v, want RESOURCE_EXHAUSTED", err)
	}
	// 2 MiB of ingest (its limit is 8 MiB): refused per event, not as a whole.
	_, err = usage.IngestUsageEvents(ctx, &meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{{Id: "evt-big", Region: big + big}}})
	if err != nil {
		t.Errorf("2 MiB ingest: %v, want an answer", err)
	}
	_, err = usage.IngestUsageEvents(ctx, &meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{{Id: "evt-huge", Region: strings.Repeat(big, 9)}}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("9 MiB ingest: %v, want RESOURCE_EXHAUSTED", err)
	}

	var hdr metadata.MD
	_, err = ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{IdempotencyKey: "grpc-nul", Postings: []*ledgerv1.Posting{
		{Account: "bank:client", Direction: "debit", Amount: "1.00", Currency: "CNY"},
		{Account: "renter:r-001:wallet\x00", Direction: "credit", Amount: "1.00", Currency: "CNY"},
	}}, grpc.Header(&hdr))
	st := status.Convert(err)
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.FieldViolations {
				fields = append(fields, v.Field)
			}
		}
	}
	if st.Code() != codes.InvalidArgument || !names(fields, "postings[1].account") {
		t.Errorf("NUL in postings[1].account: %v, fields %v", err, fields)
	}
	if ids := hdr.Get("x-request-id"); len(ids) != 1 || ids[0] == "" {
		t.Errorf("x-request-id header: %v", ids)
	}

	// A Timestamp over gRPC may name a year RFC 3339 and PostgreSQL cannot
	// hold: a 400 naming the field. A rate card of year 10000 was stored
	// (every rate card listing then a 500); queries were 500s.
	y10k, bc := &timestamppb.Timestamp{Seconds: 253402300800}, &timestamppb.Timestamp{Seconds: -400000000000}
	audit := ledgerv1.NewAuditServiceClient(conn)
	for name, call := range map[string]func() error{
		"CreateRateCard effective_from": func() error {
			_, err := pricing.CreateRateCard(ctx, &pricingv1.CreateRateCardRequest{Currency: "CNY", EffectiveFrom: y10k,
				GpuPrices: []*pricingv1.GpuPrice{{GpuModel: "RTX_4090", Hourly: "2.00"}}})
			return err
		},
		"GetAccount as_of": func() error {
			_, err := ledger.GetAccount(ctx, &ledgerv1.GetAccountRequest{Address: "bank:client", AsOf: bc})
			return err
		},
		"ListAuditEvents to": func() error {
			_, err := audit.ListAuditEvents(ctx, &ledgerv1.ListAuditEventsRequest{To: &timestamppb.Timestamp{Seconds: 9400000000000}})
			return err
		},
		"ListUsageEvents from": func() error {
			_, err := usage.ListUsageEvents(ctx, &meteringv1.ListUsageEventsRequest{RenterId: "r-001", From: bc})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s out of range: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}
