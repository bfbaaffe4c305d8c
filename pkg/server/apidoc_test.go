package server

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/proto/httprules"
)

// namedServices registers gRPC services by name only (no methods): enough
// for the server to know which services it hosts.
type namedServices []string

func (n namedServices) RegisterGRPC(s grpc.ServiceRegistrar) {
	for _, name := range n {
		s.RegisterService(&grpc.ServiceDesc{ServiceName: name, HandlerType: (*any)(nil)}, struct{}{})
	}
}
func (namedServices) RegisterGateway(context.Context, *runtime.ServeMux, grpc.ClientConnInterface) error {
	return nil
}
func (namedServices) Policy() auth.Policy { return auth.Policy{} }

func startDocs(t *testing.T, services ...string) *Server {
	t.Helper()
	s, err := Start(context.Background(), Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Secret: []byte("apidoc-test-secret-0123456789abcdef"), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Services: []Service{namedServices(services)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

type specPaths struct {
	Swagger string
	Paths   map[string]map[string]struct {
		OperationID string `json:"operationId"`
		Tags        []string
	}
}

func fetchSpec(t *testing.T, s *Server) specPaths {
	t.Helper()
	resp, b := get(t, "http://"+s.HTTPAddr+OpenAPIPath)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET %s: HTTP %d %s", OpenAPIPath, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var doc specPaths
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("GET %s: not JSON: %v", OpenAPIPath, err)
	}
	if doc.Swagger != "2.0" {
		t.Fatalf("swagger = %q, want 2.0", doc.Swagger)
	}
	return doc
}

func shortName(service string) string { return service[strings.LastIndex(service, ".")+1:] }

// TestAPIDocsListEveryRoute: a gateway hosting every service serves an
// OpenAPI document with exactly the REST routes the protos' google.api.http
// rules declare (read from the descriptors, not from the document), and a
// /docs page that shows each of them and links the document.
func TestAPIDocsListEveryRoute(t *testing.T) {
	rules := httprules.All()
	services := map[string]bool{}
	for _, r := range rules {
		services[r.Service] = true
	}
	if len(rules) < 50 || len(services) < 10 {
		t.Fatalf("httprules found %d rules of %d services; the descriptors are not all registered", len(rules), len(services))
	}
	var names []string
	for s := range services {
		names = append(names, s)
	}
	s := startDocs(t, names...)
	doc := fetchSpec(t, s)
	ops := 0
	for _, item := range doc.Paths {
		ops += len(item)
	}
	if ops != len(rules) {
		t.Errorf("the document has %d operations, the protos %d rules", ops, len(rules))
	}
	for _, r := range rules {
		op, ok := doc.Paths[r.Path][strings.ToLower(r.Method)]
		if !ok {
			t.Errorf("%s %s (%s.%s) is not in %s", r.Method, r.Path, r.Service, r.RPC, OpenAPIPath)
			continue
		}
		if want := shortName(r.Service) + "_" + r.RPC; op.OperationID != want || len(op.Tags) != 1 || op.Tags[0] != shortName(r.Service) {
			t.Errorf("%s %s: operation %q tags %v, want %s", r.Method, r.Path, op.OperationID, op.Tags, want)
		}
	}

	resp, b := get(t, "http://"+s.HTTPAddr+DocsPath)
	page := string(b)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs: HTTP %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(page, `href="`+OpenAPIPath+`"`) {
		t.Errorf("/docs does not link %s", OpenAPIPath)
	}
	// Nothing to fetch or run: it works offline (text may mention a URL).
	for _, bad := range []string{"<script", "src=", "<link", "url(", "@import"} {
		if strings.Contains(page, bad) {
			t.Errorf("/docs contains %q: it must work offline and run nothing", bad)
		}
	}
	for _, r := range rules {
		anchor := `id="op-` + shortName(r.Service) + "_" + r.RPC + `"`
		i := strings.Index(page, anchor)
		if i < 0 {
			t.Errorf("/docs has no section for %s.%s", r.Service, r.RPC)
			continue
		}
		if head := html.UnescapeString(page[i:min(len(page), i+400)]); !strings.Contains(head, r.Method+"</span><span class=\"path\">"+r.Path+"<") {
			t.Errorf("/docs section of %s.%s does not show %s %s: %s", r.Service, r.RPC, r.Method, r.Path, head)
		}
	}
}

// TestAPIDocsOnlyTheServicesServed: a service's own gateway describes its
// routes, not the other services'.
func TestAPIDocsOnlyTheServicesServed(t *testing.T) {
	s := startDocs(t, "gpubill.metering.v1.UsageService")
	doc := fetchSpec(t, s)
	want := map[string]bool{}
	for _, r := range httprules.All() {
		if r.Service == "gpubill.metering.v1.UsageService" {
			want[r.Method+" "+r.Path] = true
		}
	}
	got := map[string]bool{}
	for p, item := range doc.Paths {
		for m := range item {
			got[strings.ToUpper(m)+" "+p] = true
		}
	}
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("missing %s", k)
		}
	}
	_, b := get(t, "http://"+s.HTTPAddr+DocsPath)
	if strings.Contains(string(b), "LedgerService") || !strings.Contains(string(b), "UsageService") {
		t.Errorf("/docs of metering's usage service names other services, or not its own")
	}
}

// TestAllAPIDocsBehindAGateway: a service run alone with AllAPIDocs
// (GPUBILL_API_DOCS=all) documents every route of every service, so a
// gateway may send /docs and /v1/openapi.json to any one of them.
func TestAllAPIDocsBehindAGateway(t *testing.T) {
	s, err := Start(context.Background(), Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Secret: []byte("apidoc-test-secret-0123456789abcdef"), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Services: []Service{namedServices{"gpubill.metering.v1.UsageService"}}, AllAPIDocs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	doc := fetchSpec(t, s)
	for _, r := range httprules.All() {
		if _, ok := doc.Paths[r.Path][strings.ToLower(r.Method)]; !ok {
			t.Errorf("the whole document lacks %s %s (%s)", r.Method, r.Path, r.Service)
		}
	}
	_, b := get(t, "http://"+s.HTTPAddr+DocsPath)
	if !strings.Contains(string(b), "LedgerService") || !strings.Contains(string(b), "PayoutService") {
		t.Errorf("/docs with AllAPIDocs does not name the other services")
	}
}
