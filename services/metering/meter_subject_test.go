package metering_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gpubill/gpubill/pkg/auth"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
)

// A meter token naming a provider (--role meter --sub p-001) ingests that
// provider's usage only, over REST and gRPC, as usage.ingest.p-001 does on
// NATS: an event of another provider is refused on its own, with the NATS
// path's reason, and the batch's other events are recorded. It once was
// accepted: a node agent's token could debit any renter and credit any
// provider it named. A meter token without a subject is the platform's
// meter, for every provider.
func TestMeterTokenIngestsOnlyItsProvider(t *testing.T) {
	t.Parallel()
	base, finance, usage, issue := meterServer(t,
		[2]string{"/v1/providers", `{"provider_id":"p-001","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`},
		[2]string{"/v1/providers", `{"provider_id":"p-002","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`},
		[2]string{"/v1/renters", `{"renter_id":"r-001","currency":"USD"}`})
	meterP1, platformMeter := issue("p-001"), issue("")
	ev := func(id, provider string) string {
		return fmt.Sprintf(`{"id":%q,"lease_id":"l-%s","provider_id":%q,"renter_id":"r-001","gpu_model":"H100","gpu_count":1,`+
			`"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z"}`, id, id, provider)
	}
	const refusedP2 = `provider_id "p-002" does not match the subject's provider "p-001"`

	// REST: its own event recorded, p-002's refused.
	code, resp := post(t, base+"/v1/usage-events", meterP1, `{"events":[`+ev("evt-1", "p-001")+`,`+ev("evt-2", "p-002")+`]}`)
	var got struct {
		Accepted int `json:"accepted"`
		Rejected []struct {
			Index  int    `json:"index"`
			ID     string `json:"id"`
			Reason string `json:"reason"`
		} `json:"rejected"`
	}
	if err := json.Unmarshal([]byte(resp), &got); err != nil || code != http.StatusOK || got.Accepted != 1 || len(got.Rejected) != 1 ||
		got.Rejected[0].Index != 1 || got.Rejected[0].ID != "evt-2" || got.Rejected[0].Reason != refusedP2 {
		t.Fatalf("REST ingest by p-001's meter of p-001 and p-002 usage: %d %s (%v); want evt-1 accepted, evt-2 refused: %s", code, resp, err, refusedP2)
	}

	// gRPC: the same.
	input := func(id, provider string) *meteringv1.UsageEventInput {
		return &meteringv1.UsageEventInput{Id: id, LeaseId: "l-" + id, ProviderId: provider, RenterId: "r-001", GpuModel: "H100", GpuCount: 1,
			StartTime: "2026-11-20T09:00:00Z", EndTime: "2026-11-20T10:00:00Z"}
	}
	ctx := context.Background()
	res, err := usage.IngestUsageEvents(ctx, &meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{
		input("evt-3", "p-002"), input("evt-4", "p-001")}}, grpc.PerRPCCredentials(auth.BearerCreds(meterP1)))
	if err != nil || res.Accepted != 1 || len(res.Rejected) != 1 || res.Rejected[0].Index != 0 || res.Rejected[0].Id != "evt-3" ||
		res.Rejected[0].Reason != refusedP2 {
		t.Fatalf("gRPC ingest by p-001's meter of p-002 and p-001 usage: %v, %v; want evt-4 accepted, evt-3 refused: %s", res, err, refusedP2)
	}

	// The platform's meter ingests for any provider.
	res, err = usage.IngestUsageEvents(ctx, &meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{input("evt-5", "p-002")}},
		grpc.PerRPCCredentials(auth.BearerCreds(platformMeter)))
	if err != nil || res.Accepted != 1 || len(res.Rejected) != 0 {
		t.Fatalf("gRPC ingest of p-002 usage by the platform's meter: %v, %v; want accepted", res, err)
	}

	// What is recorded, read back.
	list, err := usage.ListUsageEvents(ctx, &meteringv1.ListUsageEventsRequest{RenterId: "r-001"}, grpc.PerRPCCredentials(auth.BearerCreds(finance)))
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, e := range list.UsageEvents {
		recorded = append(recorded, e.Id+"/"+e.ProviderId)
	}
	slices.Sort(recorded)
	if want := []string{"evt-1/p-001", "evt-4/p-001", "evt-5/p-002"}; !slices.Equal(recorded, want) {
		t.Fatalf("recorded %v, want %v", recorded, want)
	}
}

// meterServer starts metering, creates parties (path and body) as
// finance, and returns its REST base, finance's token, a gRPC usage client
// and an issuer of meter tokens for a subject ("" the platform's meter).
func meterServer(t *testing.T, parties ...[2]string) (string, string, meteringv1.UsageServiceClient, func(sub string) string) {
	t.Helper()
	base, grpcAddr, finance := startServer(t)
	for _, p := range parties {
		if code, body := post(t, base+p[0], finance, p[1]); code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", p[0], code, body)
		}
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	issue := func(sub string) string {
		tok, err := auth.Issue(testSecret, auth.RoleMeter, sub, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	return base, finance, meteringv1.NewUsageServiceClient(conn), issue
}
