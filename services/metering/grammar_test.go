package metering_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/server"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
)

// testSecret signs the tokens of startServer's server.
var testSecret = []byte("metering-test-secret-of-32-bytes-or-more")

// startServer serves the metering service over REST and gRPC and returns
// both addresses with a finance token.
func startServer(t *testing.T) (restBase, grpcAddr, token string) {
	t.Helper()
	s, _ := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := server.Start(ctx, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: testSecret,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: []server.Service{s}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	tok, err := auth.Issue(testSecret, auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + srv.HTTPAddr, srv.GRPCAddr, tok
}

func post(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// restFields returns the field names of a gRPC status JSON's BadRequest details.
func restFields(t *testing.T, body string) []string {
	t.Helper()
	var st struct {
		Details []struct {
			Type            string `json:"@type"`
			FieldViolations []struct {
				Field string `json:"field"`
			} `json:"fieldViolations"`
			FieldViolationsSnake []struct {
				Field string `json:"field"`
			} `json:"field_violations"`
		} `json:"details"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	var out []string
	for _, d := range st.Details {
		for _, v := range append(d.FieldViolations, d.FieldViolationsSnake...) {
			out = append(out, v.Field)
		}
	}
	return out
}

// A party id or jurisdiction outside the shared grammar (pkg/ids) is refused
// at creation with a 400 (gRPC InvalidArgument) naming the field, so no id
// the ledger would refuse ever reaches usage and charges.
func TestCreatePartyRefusesIDsOutsideTheGrammar(t *testing.T) {
	t.Parallel()
	base, grpcAddr, tok := startServer(t)
	tests := []struct {
		name, path, body, field string
	}{
		{"provider colon", "/v1/providers", `{"provider_id":"p:1","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`, "provider_id"},
		{"provider at", "/v1/providers", `{"provider_id":"p@x","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`, "provider_id"},
		{"provider non-ASCII", "/v1/providers", `{"provider_id":"é","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`, "provider_id"},
		{"provider dot", "/v1/providers", `{"provider_id":"p.1","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`, "provider_id"},
		{"jurisdiction with a space", "/v1/providers", `{"provider_id":"p-1","tier":"standard","tax_profile":"individual","jurisdiction":"CN Beijing"}`, "jurisdiction"},
		{"renter colon", "/v1/renters", `{"renter_id":"r:1","currency":"USD"}`, "renter_id"},
		{"renter at", "/v1/renters", `{"renter_id":"r@x","currency":"USD"}`, "renter_id"},
		{"renter non-ASCII", "/v1/renters", `{"renter_id":"é","currency":"USD"}`, "renter_id"},
	}
	for _, tt := range tests {
		code, body := post(t, base+tt.path, tok, tt.body)
		fields := restFields(t, body)
		if code != http.StatusBadRequest || len(fields) != 1 || fields[0] != tt.field {
			t.Errorf("%s: POST %s %s = %d %s; want 400 naming %s only", tt.name, tt.path, tt.body, code, body, tt.field)
		}
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.BearerCreds(tok)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parties := meteringv1.NewPartyServiceClient(conn)
	ctx := context.Background()
	for _, g := range []struct {
		req   *meteringv1.CreateProviderRequest
		field string
	}{
		{&meteringv1.CreateProviderRequest{ProviderId: "p:1", Tier: "standard", TaxProfile: "individual", Jurisdiction: "CN"}, "provider_id"},
		{&meteringv1.CreateProviderRequest{ProviderId: "p@x", Tier: "standard", TaxProfile: "individual", Jurisdiction: "CN"}, "provider_id"},
		{&meteringv1.CreateProviderRequest{ProviderId: "é", Tier: "standard", TaxProfile: "individual", Jurisdiction: "CN"}, "provider_id"},
		{&meteringv1.CreateProviderRequest{ProviderId: "p-1", Tier: "standard", TaxProfile: "individual", Jurisdiction: "CN Beijing"}, "jurisdiction"},
	} {
		_, err := parties.CreateProvider(ctx, g.req)
		st := status.Convert(err)
		var fields []string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		if st.Code() != codes.InvalidArgument || len(fields) != 1 || fields[0] != g.field {
			t.Errorf("gRPC CreateProvider(%v) = %v %v; want InvalidArgument naming %s", g.req, st.Code(), fields, g.field)
		}
	}
	// Nothing was created, and a good id still is.
	if _, err := parties.GetProvider(ctx, &meteringv1.GetProviderRequest{ProviderId: "p-1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("p-1 after refusals: %v, want NotFound", err)
	}
	if code, body := post(t, base+"/v1/providers", tok, `{"provider_id":"p-1","tier":"standard","tax_profile":"individual","jurisdiction":"CN-BJ"}`); code != http.StatusOK {
		t.Fatalf("good provider: %d %s", code, body)
	}
}

// Usage naming a party id outside the grammar is rejected with a reason at
// ingest (not accepted and then dropped by the ledger).
func TestIngestRejectsPartyIDsOutsideTheGrammar(t *testing.T) {
	t.Parallel()
	base, _, tok := startServer(t)
	body := `{"events":[
		{"id":"evt-1","lease_id":"l-1","provider_id":"p:1","renter_id":"r-1","gpu_model":"H100","gpu_count":1,"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z"},
		{"id":"evt-2","lease_id":"l-2","provider_id":"p-1","renter_id":"r@1","gpu_model":"H100","gpu_count":1,"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z"}]}`
	code, resp := post(t, base+"/v1/usage-events", tok, body)
	var got struct {
		Rejected []struct {
			Index  int    `json:"index"`
			Reason string `json:"reason"`
		} `json:"rejected"`
	}
	if err := json.Unmarshal([]byte(resp), &got); err != nil || code != http.StatusOK || len(got.Rejected) != 2 ||
		!strings.HasPrefix(got.Rejected[0].Reason, "provider_id ") || !strings.HasPrefix(got.Rejected[1].Reason, "renter_id ") {
		t.Fatalf("ingest: %d %s (%v)", code, resp, err)
	}
}

// An event id recorded with another body is rejected naming the id, clipped:
// a cut inside a character made the answer invalid UTF-8, a 500 after the
// batch was recorded, and the same 500 for every retry.
func TestConflictOnALongNonASCIIID(t *testing.T) {
	t.Parallel()
	base, _, tok := startServer(t)
	createP1R1(t, base, tok)
	id := strings.Repeat("a", 39) + "éé"
	ev := func(n int) string {
		return fmt.Sprintf(`{"id":%q,"lease_id":"l-1","provider_id":"p-1","renter_id":"r-1","gpu_model":"H100","gpu_count":%d,"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z"}`, id, n)
	}
	code, resp := post(t, base+"/v1/usage-events", tok, `{"events":[`+ev(1)+`,`+ev(2)+`]}`)
	var got struct {
		Accepted int `json:"accepted"`
		Rejected []struct {
			Index  int    `json:"index"`
			Reason string `json:"reason"`
		} `json:"rejected"`
	}
	if err := json.Unmarshal([]byte(resp), &got); err != nil || code != http.StatusOK || got.Accepted != 1 || len(got.Rejected) != 1 ||
		!strings.Contains(got.Rejected[0].Reason, "recorded with a different body") || !utf8.ValidString(got.Rejected[0].Reason) {
		t.Fatalf("ingest: %d %s (%v)", code, resp, err)
	}
}

// A malformed field is a per-event rejection (DESIGN §2): an event whose
// JSON does not decode (a field of the wrong type, null) is rejected alone,
// naming why, and the rest of the batch is taken (one wrong type refused
// the whole batch with a 400). A body that is no {"events":[…]} is still
// refused whole.
func TestIngestRejectsAnUndecodableEventAlone(t *testing.T) {
	t.Parallel()
	base, _, tok := startServer(t)
	createP1R1(t, base, tok)
	ev := func(id, count string) string {
		return `{"id":"` + id + `","lease_id":"l-` + id + `","provider_id":"p-1","renter_id":"r-1","gpu_model":"H100","gpu_count":` + count +
			`,"start_time":"2026-11-20T09:00:00Z","end_time":"2026-11-20T10:00:00Z"}`
	}
	code, resp := post(t, base+"/v1/usage-events", tok, `{"events":[`+ev("e-good", "1")+`,`+ev("e-two", `"two"`)+`,null,`+ev("e-big", "1e10")+`]}`)
	var got struct {
		Accepted int `json:"accepted"`
		Rejected []struct {
			Index  int    `json:"index"`
			ID     string `json:"id"`
			Reason string `json:"reason"`
		} `json:"rejected"`
	}
	if err := json.Unmarshal([]byte(resp), &got); err != nil || code != http.StatusOK || got.Accepted != 1 || len(got.Rejected) != 3 {
		t.Fatalf("ingest: %d %s (%v)", code, resp, err)
	}
	for i, want := range []struct {
		index  int
		id, in string
	}{{1, "e-two", "gpu_count"}, {2, "", "event does not decode"}, {3, "e-big", "gpu_count"}} {
		r := got.Rejected[i]
		if r.Index != want.index || r.ID != want.id || !strings.HasPrefix(r.Reason, "event does not decode: ") || !strings.Contains(r.Reason, want.in) {
			t.Errorf("rejection %d: %+v, want index %d id %q naming %s", i, r, want.index, want.id, want.in)
		}
	}
	if code, body := post(t, base+"/v1/usage-events", tok, `{"events":{"id":"x"}}`); code != http.StatusBadRequest {
		t.Errorf("events not an array: %d %s, want 400", code, body)
	}
}

// createP1R1 creates provider p-1 and renter r-1 over REST.
func createP1R1(t *testing.T, base, tok string) {
	t.Helper()
	for _, p := range [][2]string{{"/v1/providers", `{"provider_id":"p-1","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`},
		{"/v1/renters", `{"renter_id":"r-1","currency":"USD"}`}} {
		if code, body := post(t, base+p[0], tok, p[1]); code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", p[0], code, body)
		}
	}
}
