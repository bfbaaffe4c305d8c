package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// spans reads a SpanRecorder: every span started so far (ended or not),
// by trace.
type spans struct{ rec *tracetest.SpanRecorder }

func (s spans) of(id trace.TraceID) map[trace.SpanID]sdktrace.ReadOnlySpan {
	out := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, sp := range s.rec.Started() {
		if sp.SpanContext().TraceID() == id {
			out[sp.SpanContext().SpanID()] = sp
		}
	}
	return out
}

// chain returns the names from the root of sp's trace (as recorded) down
// to sp, and the first parent id not recorded (the caller's remote span).
func chain(all map[trace.SpanID]sdktrace.ReadOnlySpan, sp sdktrace.ReadOnlySpan) ([]string, trace.SpanID) {
	var names []string
	for {
		names = append([]string{sp.Name()}, names...)
		p, ok := all[sp.Parent().SpanID()]
		if !sp.Parent().IsValid() || !ok {
			return names, sp.Parent().SpanID()
		}
		sp = p
	}
}

func attr(sp sdktrace.ReadOnlySpan, key string) string {
	for _, a := range sp.Attributes() {
		if a.Key == attribute.Key(key) {
			return a.Value.String()
		}
	}
	return ""
}

// doTraced is do with the caller's W3C traceparent header.
func (f *fixture) doTraced(method, path, traceparent string, body any) {
	f.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		f.t.Fatal(err)
	}
	req, err := http.NewRequest(method, f.base+path, bytes.NewReader(b))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.finance)
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("%s %s: HTTP %d", method, path, resp.StatusCode)
	}
}

// TestTraceFollowsUsageAndCycle runs the whole stack with spans recorded
// in memory. A usage batch ingested through REST under the caller's trace
// is followed in that one trace through metering's gRPC call, its outbox
// row and NATS headers to pricing, pricing's outbox to the ledger's charges
// consumer and the posting, each span the child of the one before. A cycle
// closed through REST is traced into its Temporal workflow, and the cycle
// workflow's activities are spans of its workflow's trace (the SDK's
// OpenTelemetry interceptor).
func TestTraceFollowsUsageAndCycle(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	// A no-op provider first and last: the first global provider set is the
	// one OpenTelemetry's default delegates to for good, and the tests after
	// this one must not record into rec.
	otel.SetTracerProvider(noop.NewTracerProvider())
	shutdown, err := obs.SetupTracing(context.Background(), "gpubill", nil, sdktrace.WithSpanProcessor(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		otel.SetTracerProvider(noop.NewTracerProvider())
	})
	rs := spans{rec}

	f := newFixture(t)
	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-001", "name": "Rig One", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "pue": "1.2", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "2.80"}}})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "100.00", "currency": "CNY", "external_ref": "bank-ref-1"})

	// The caller's trace: ids of its own (a remote span the stack never records).
	const usageTrace, callerSpan = "5a1e0000000000000000000000000001", "c0ffee0000000001"
	start, end := dayUsage(time.Now(), 1)
	cycle := cycles.Default().ForUsageEnd(end).ID
	f.doTraced(http.MethodPost, "/v1/usage-events", "00-"+usageTrace+"-"+callerSpan+"-01", map[string]any{"events": []any{map[string]any{
		"id": "evt-1", "lease_id": "lease-1", "provider_id": "p-001", "renter_id": "r-001", "gpu_model": "RTX_4090", "gpu_count": 2,
		"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)}}})
	f.waitBalance("provider:p-001:pending:"+cycle, "CNY", "8.40")

	tid, err := trace.TraceIDFromHex(usageTrace)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"gpubill.metering.v1.UsageService/IngestUsageEvents", // the ingest call; metering writes its outbox row in it
		"publish usage.recorded",                             // metering's relay, from the row's traceparent
		"process usage.recorded",                             // pricing's consumer, from the NATS headers
		"publish charges.rated",                              // pricing's relay
		"process charges.rated",                              // the ledger's charges consumer
		"ledger post charges",                                // the posting
	}
	var got []string
	var remote trace.SpanID
	var all map[trace.SpanID]sdktrace.ReadOnlySpan
	testkit.Eventually(t, 10*time.Second, func() bool {
		all = rs.of(tid)
		for _, sp := range all {
			if sp.Name() == want[len(want)-1] {
				got, remote = chain(all, sp)
				return true
			}
		}
		return false
	}, "a ledger posting span in the caller's trace")
	if !slices.Equal(got, want) || remote.String() != callerSpan {
		var names []string
		for _, sp := range all {
			names = append(names, sp.Name())
		}
		t.Fatalf("usage trace: chain %q under %v, want %q under the caller's %s; spans in the trace: %q", got, remote, want, callerSpan, names)
	}
	for _, sp := range all {
		if sp.Name() == "process usage.recorded" && attr(sp, "messaging.consumer.group.name") != "pricing-rating" ||
			sp.Name() == "process charges.rated" && attr(sp, "messaging.consumer.group.name") != "ledger-charges" {
			t.Errorf("%s by consumer %q", sp.Name(), attr(sp, "messaging.consumer.group.name"))
		}
	}

	// The cycle: closed under another caller trace.
	const closeTrace = "5a1e0000000000000000000000000002"
	f.doTraced(http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", "00-"+closeTrace+"-c0ffee0000000002-01", map[string]any{})
	testkit.Eventually(t, 60*time.Second, func() bool {
		_, c := f.do(http.MethodGet, "/v1/settlement-cycles/"+cycle, f.finance, nil)
		return c["status"] == "settled"
	}, "cycle %s settled", cycle)
	ctid, err := trace.TraceIDFromHex(closeTrace)
	if err != nil {
		t.Fatal(err)
	}
	wfID := "settle-" + cycle
	// The close call reached the cycle's workflow in its own trace: the
	// signal (or the start, when the workflow was not running yet).
	var closeNames []string
	testkit.Eventually(t, 10*time.Second, func() bool {
		closeNames = closeNames[:0]
		found := false
		for _, sp := range rs.of(ctid) {
			closeNames = append(closeNames, sp.Name())
			if attr(sp, "temporalWorkflowID") == wfID && (strings.HasPrefix(sp.Name(), "HandleSignal:") || strings.HasPrefix(sp.Name(), "RunWorkflow:")) {
				found = true
			}
		}
		return found
	}, "the close reaches workflow %s in the caller's trace", wfID)
	if !slices.Contains(closeNames, "gpubill.settlement.v1.SettlementService/CloseSettlementCycle") ||
		!slices.Contains(closeNames, "SignalWithStartWorkflow:SettlementCycle") {
		t.Errorf("close trace spans %q", closeNames)
	}
	// The cycle workflow's activities run in its workflow's trace, each
	// under the workflow span (through the activity's start span).
	acts := map[string]bool{}
	testkit.Eventually(t, 10*time.Second, func() bool {
		for _, sp := range rec.Started() {
			if !strings.HasPrefix(sp.Name(), "RunActivity:") || attr(sp, "temporalWorkflowID") != wfID {
				continue
			}
			names, _ := chain(rs.of(sp.SpanContext().TraceID()), sp)
			if len(names) >= 3 && names[len(names)-3] == "RunWorkflow:SettlementCycle" && strings.HasPrefix(names[len(names)-2], "StartActivity:") {
				acts[strings.TrimPrefix(sp.Name(), "RunActivity:")] = true
			}
		}
		return acts["BeginClose"] && acts["SettleProviders"] && acts["CompleteCycle"]
	}, "activities of %s under its workflow span: %v", wfID, acts)
	t.Logf("cycle activities traced under %s: %v", wfID, acts)
	// Their calls to the ledger go on in the ledger's gRPC server spans.
	var wfTrace trace.TraceID
	for _, sp := range rec.Started() {
		if sp.Name() == "RunWorkflow:SettlementCycle" && attr(sp, "temporalWorkflowID") == wfID {
			wfTrace = sp.SpanContext().TraceID()
		}
	}
	ledgerCalls := 0
	for _, sp := range rs.of(wfTrace) {
		if sp.SpanKind() == trace.SpanKindServer && strings.HasPrefix(sp.Name(), "gpubill.ledger.v1.") {
			if names, _ := chain(rs.of(wfTrace), sp); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "RunActivity:") }) {
				ledgerCalls++
			}
		}
	}
	if ledgerCalls == 0 {
		t.Errorf("no ledger gRPC span under an activity of %s", wfID)
	}
}
