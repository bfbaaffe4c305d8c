package metering_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/pkg/auth"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
)

// A meter token bound to p-001 sending its own provider_id on a lease
// recorded for p-002 is refused without naming that lease's parties: it
// was told "lease l-p2 is recorded for provider p-002 and renter
// r-secret", another provider's renter. Both places that judge an event
// against recorded usage answer so: recording (one event), and a call
// judged again after recording refused an event another was judged
// against (two overlapping events on the lease). The platform's meter and
// finance, which ingest for every provider, are still told the parties.
func TestBoundMeterNotToldAnotherProvidersLease(t *testing.T) {
	t.Parallel()
	_, finance, usage, issue := meterServer(t,
		[2]string{"/v1/providers", `{"provider_id":"p-001","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`},
		[2]string{"/v1/providers", `{"provider_id":"p-002","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`},
		[2]string{"/v1/renters", `{"renter_id":"r-secret","currency":"USD"}`},
		[2]string{"/v1/renters", `{"renter_id":"r-001","currency":"USD"}`})
	meterP1, meterP2, platformMeter := issue("p-001"), issue("p-002"), issue("")
	ctx := context.Background()
	// An hour's event on l-p2 from hour:00 (the clock is at 12:00).
	in := func(id, provider, renter string, hour int) *meteringv1.UsageEventInput {
		return &meteringv1.UsageEventInput{Id: id, LeaseId: "l-p2", ProviderId: provider, RenterId: renter, GpuModel: "H100", GpuCount: 1,
			StartTime: fmt.Sprintf("2026-11-20T%02d:00:00Z", hour), EndTime: fmt.Sprintf("2026-11-20T%02d:00:00Z", hour+1)}
	}
	ingest := func(token string, evs ...*meteringv1.UsageEventInput) *meteringv1.IngestUsageEventsResponse {
		t.Helper()
		res, err := usage.IngestUsageEvents(ctx, &meteringv1.IngestUsageEventsRequest{Events: evs}, grpc.PerRPCCredentials(auth.BearerCreds(token)))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := ingest(meterP2, in("e1", "p-002", "r-secret", 0)); res.Accepted != 1 {
		t.Fatalf("p-002's meter recording l-p2: %v", res)
	}

	const withheld = "lease l-p2 is recorded for another provider"
	const detailed = "lease l-p2 is recorded for provider p-002 and renter r-secret"
	tests := []struct {
		name  string
		token string
		give  []*meteringv1.UsageEventInput
		want  string
	}{
		{"p-001's meter, one event", meterP1, []*meteringv1.UsageEventInput{in("e2", "p-001", "r-001", 2)}, withheld},
		{"p-001's meter, judged again", meterP1, []*meteringv1.UsageEventInput{in("e3", "p-001", "r-001", 4), in("e4", "p-001", "r-001", 4)}, withheld},
		{"the platform's meter", platformMeter, []*meteringv1.UsageEventInput{in("e5", "p-001", "r-001", 6)}, detailed},
		{"the platform's meter, judged again", platformMeter, []*meteringv1.UsageEventInput{in("e6", "p-001", "r-001", 8), in("e7", "p-001", "r-001", 8)}, detailed},
		{"finance", finance, []*meteringv1.UsageEventInput{in("e8", "p-001", "r-001", 10)}, detailed},
	}
	for _, tt := range tests {
		res := ingest(tt.token, tt.give...)
		if res.Accepted != 0 || len(res.Rejected) != len(tt.give) {
			t.Errorf("%s: %v; want every event rejected", tt.name, res)
			continue
		}
		for _, r := range res.Rejected {
			if r.Reason != tt.want {
				t.Errorf("%s: %s rejected with %q; want %q", tt.name, r.Id, r.Reason, tt.want)
			}
			if tt.want == withheld && (strings.Contains(r.Reason, "r-secret") || strings.Contains(r.Reason, "p-002")) {
				t.Errorf("%s: %s's reason %q names l-p2's parties", tt.name, r.Id, r.Reason)
			}
		}
	}
}

// A meter bound to p-001 resending an event id p-002's meter recorded is
// told the id is recorded for another provider, whichever renter it names:
// it was told which fields differ, and with its guess of the renter right
// renter_id left the list, naming another provider's renter. The
// platform's meter is still told the fields.
func TestBoundMeterNotToldAnotherProvidersEventBody(t *testing.T) {
	t.Parallel()
	_, _, usage, issue := meterServer(t,
		[2]string{"/v1/providers", `{"provider_id":"p-001","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`},
		[2]string{"/v1/providers", `{"provider_id":"p-002","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`},
		[2]string{"/v1/renters", `{"renter_id":"r-secret","currency":"USD"}`},
		[2]string{"/v1/renters", `{"renter_id":"r-001","currency":"USD"}`})
	ctx := context.Background()
	in := func(provider, renter, lease string) *meteringv1.UsageEventInput {
		return &meteringv1.UsageEventInput{Id: "e-p2", LeaseId: lease, ProviderId: provider, RenterId: renter, GpuModel: "H100", GpuCount: 1,
			StartTime: "2026-11-20T01:00:00Z", EndTime: "2026-11-20T02:00:00Z"}
	}
	reason := func(token string, ev *meteringv1.UsageEventInput) string {
		t.Helper()
		res, err := usage.IngestUsageEvents(ctx, &meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{ev}},
			grpc.PerRPCCredentials(auth.BearerCreds(token)))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Rejected) != 1 {
			return fmt.Sprintf("accepted %d, duplicates %d", res.Accepted, res.Duplicates)
		}
		return res.Rejected[0].Reason
	}
	if got := reason(issue("p-002"), in("p-002", "r-secret", "l-p2")); got != "accepted 1, duplicates 0" {
		t.Fatalf("p-002's meter recording e-p2: %s", got)
	}
	const want = "id e-p2 is recorded for another provider: an event id is its idempotency key"
	meterP1 := issue("p-001")
	for _, renter := range []string{"r-secret", "r-001"} {
		for _, lease := range []string{"l-p2", "l-p1"} {
			if got := reason(meterP1, in("p-001", renter, lease)); got != want {
				t.Errorf("p-001's meter resending e-p2 for %s on %s: %q; want %q", renter, lease, got, want)
			}
		}
	}
	if got := reason(issue(""), in("p-001", "r-001", "l-p2")); !strings.Contains(got, "provider_id, renter_id differ") {
		t.Errorf("the platform's meter resending e-p2 with another provider and renter: %q; want the fields named", got)
	}
}
