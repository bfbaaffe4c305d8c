package deploycheck

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpubill/gpubill/proto/httprules"
)

// The services that run as their own process (docker-compose.yml, helm).
var processes = []string{"metering", "pricing", "ledger", "tax", "payout", "settlement"}

// owner is the process that serves a proto service: gpubill.<process>.v1.X;
// gpubill.ops.v1 (dead letters) is served by every process over its own
// table.
func owner(protoService string) string {
	parts := strings.Split(protoService, ".")
	if len(parts) < 3 || parts[0] != "gpubill" {
		return ""
	}
	return parts[1]
}

var pathVar = regexp.MustCompile(`\{[^}]+\}`)

// instantiate fills a path template's variables with sample values (the
// account address keeps its colons, as clients send it).
func instantiate(tmpl, sample string) string {
	return pathVar.ReplaceAllStringFunc(tmpl, func(v string) string {
		if sample != "" {
			return sample
		}
		if strings.Contains(v, "address") {
			return "provider:p-1:pending:cyc-20261112"
		}
		return "x-1"
	})
}

// TestGatewayRoutesEveryRESTPath: deploy/nginx.conf sends every REST route
// the protos declare (google.api.http rules read from the compiled
// descriptors by proto/httprules, not a list kept here) to the process
// that serves it, refuses the internal service-to-service routes, and
// places the plain-HTTP routes — rail notifications, per-service
// readiness, the API docs — where they belong; /metrics stays inside.
func TestGatewayRoutesEveryRESTPath(t *testing.T) {
	g := loadGateway(t, filepath.Join(deployDir, "nginx.conf"))
	for _, p := range processes {
		if len(g.upstreams[p]) == 0 {
			t.Errorf("nginx.conf has no upstream %s", p)
		}
	}
	expect := func(what, target string, want outcome) {
		t.Helper()
		got, err := g.route(target)
		if err != nil {
			t.Errorf("%s %s: %v", what, target, err)
			return
		}
		if got != want {
			t.Errorf("%s %s: %v, want %v", what, target, got, want)
		}
	}
	rules := httprules.All()
	if len(rules) < 50 {
		t.Fatalf("httprules found only %d rules: the descriptors are not all registered", len(rules))
	}
	for _, r := range rules {
		what := r.Method + " " + r.Path + " (" + r.Service + "/" + r.RPC + ")"
		proc := owner(r.Service)
		switch {
		case strings.HasPrefix(r.Path, "/v1/internal/"):
			// Role "service" only: over gRPC inside the network.
			expect(what, instantiate(r.Path, ""), outcome{status: 404})
		case proc == "ops" && strings.Contains(r.Path, "{"):
			// A replay: the id names its service (<service>-<number>).
			for _, p := range processes {
				target := instantiate(r.Path, p+"-42")
				expect(what, target, outcome{upstream: p, uri: target})
			}
		case proc == "ops":
			// A listing: ?service= names whose; without it, a 400 that says so.
			for _, p := range processes {
				target := r.Path + "?service=" + p
				expect(what, target, outcome{upstream: p, uri: target})
			}
			expect(what, r.Path, outcome{status: 400})
		case slices.Contains(processes, proc):
			target := instantiate(r.Path, "")
			expect(what, target, outcome{upstream: proc, uri: target})
			if strings.Contains(r.Path, "?") {
				t.Errorf("%s: a path template with a query", what)
			}
		default:
			t.Errorf("%s: no process serves proto service %s (a new package? add it to processes)", what, r.Service)
		}
	}

	// The plain-HTTP routes (pkg/server, and the payout service's rails).
	for _, rail := range []string{"alipay", "wechat"} {
		target := "/v1/rails/" + rail + "/notify"
		expect("the rail's notifications", target, outcome{upstream: "payout", uri: target})
	}
	expect("the gateway's own liveness", "/healthz", outcome{status: 200})
	expect("readiness without a service", "/readyz", outcome{status: 404})
	for _, p := range processes {
		expect("readiness", "/readyz/"+p, outcome{upstream: p, uri: "/readyz"})
	}
	expect("metrics (scraped inside the network)", "/metrics", outcome{status: 404})
	for _, doc := range []string{"/docs", "/v1/openapi.json"} {
		got, err := g.route(doc)
		if err != nil || got.upstream == "" || got.uri != doc {
			t.Errorf("%s: %v %v, want it proxied to a service (which serves the whole API: GPUBILL_API_DOCS=all)", doc, got, err)
		}
	}
	expect("no route", "/v2/anything", outcome{status: 404})
}

// TestGatewayBodyLimits: nginx takes of each REST route a body up to the
// limit pkg/server gives the route (limits.go: the uploads of largeBodies,
// 1 MiB any other), and streams an upload's body to the service, whose
// gate answers a caller without a valid token before reading it. At 64m
// on every route with request buffering on, nginx read up to 64 MiB of
// any anonymous client's body before gpubill saw the request.
func TestGatewayBodyLimits(t *testing.T) {
	g := loadGateway(t, filepath.Join(deployDir, "nginx.conf"))
	uploads := map[string]string{ // "METHOD path" → client_max_body_size
		"POST /v1/bank-statements": "64m",
		"POST /v1/bank-files":      "8m",
		"POST /v1/usage-events":    "8m",
	}
	type bodyRoute struct{ route, target string } // "METHOD path", a request's path
	var routes []bodyRoute
	for _, r := range httprules.All() {
		if r.Method != "GET" && r.Method != "DELETE" && !strings.HasPrefix(r.Path, "/v1/internal/") {
			routes = append(routes, bodyRoute{r.Method + " " + r.Path, instantiate(r.Path, "")})
		}
	}
	for _, rail := range []string{"alipay", "wechat"} {
		routes = append(routes, bodyRoute{"POST /v1/rails/" + rail + "/notify", "/v1/rails/" + rail + "/notify"})
	}
	for up := range uploads {
		if !slices.ContainsFunc(routes, func(r bodyRoute) bool { return r.route == up }) {
			t.Errorf("%s: no such route (httprules)", up)
		}
	}
	for _, r := range routes {
		route, target := r.route, r.target
		want, upload := uploads[route]
		if !upload {
			want = "1m"
		}
		if got := g.setting(target, "client_max_body_size", "1m"); got != want {
			t.Errorf("%s: client_max_body_size %s, want %s", route, got, want)
		}
		streamed := g.setting(target, "proxy_request_buffering", "on") == "off" && g.setting(target, "proxy_http_version", "1.0") == "1.1"
		if upload && !streamed {
			t.Errorf("%s: its body buffered by nginx (want proxy_request_buffering off, proxy_http_version 1.1)", route)
		}
	}
}

// composeFile is what the tests read of docker-compose.yml.
type composeFile struct {
	Services map[string]struct {
		Image       string                            `yaml:"image"`
		Build       *struct{ Args map[string]string } `yaml:"build"`
		Ports       []string                          `yaml:"ports"`
		Environment map[string]string                 `yaml:"environment"`
		Volumes     []string                          `yaml:"volumes"`
		Restart     string                            `yaml:"restart"`
	} `yaml:"services"`
}

// TestComposeIsTheGatewaysStack: docker-compose.yml runs each process
// nginx.conf names, at the address it names, with the signing key required
// (no default), the whole API documented, and only the gateway published;
// PostgreSQL, NATS and Temporal are reachable inside the network only.
func TestComposeIsTheGatewaysStack(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	g := loadGateway(t, filepath.Join(deployDir, "nginx.conf"))
	for name, servers := range g.upstreams {
		s, ok := c.Services[name]
		if !ok {
			t.Errorf("nginx upstream %s: no such compose service", name)
			continue
		}
		if s.Build == nil || s.Build.Args["SERVICE"] != name {
			t.Errorf("compose service %s does not build ./services/%s (build.args.SERVICE)", name, name)
		}
		for _, addr := range servers {
			host, port, err := net.SplitHostPort(addr)
			if err != nil || host != name {
				t.Errorf("nginx upstream %s: server %s, want %s:PORT", name, addr, name)
				continue
			}
			if _, listen, err := net.SplitHostPort(s.Environment["GPUBILL_HTTP_ADDR"]); err != nil || listen != port {
				t.Errorf("nginx upstream %s: port %s, but the service listens on GPUBILL_HTTP_ADDR=%q", name, port, s.Environment["GPUBILL_HTTP_ADDR"])
			}
		}
	}
	required := regexp.MustCompile(`^\$\{GPUBILL_AUTH_SECRET:\?[^}]+\}$`)
	for _, p := range processes {
		s := c.Services[p]
		if v := s.Environment["GPUBILL_AUTH_SECRET"]; !required.MatchString(v) {
			t.Errorf("compose service %s: GPUBILL_AUTH_SECRET=%q, want ${GPUBILL_AUTH_SECRET:?…} (required, no default)", p, v)
		}
		if s.Environment["GPUBILL_API_DOCS"] != "all" {
			t.Errorf("compose service %s: GPUBILL_API_DOCS=%q, want all (the gateway's /docs is the whole API)", p, s.Environment["GPUBILL_API_DOCS"])
		}
		if len(s.Ports) > 0 {
			t.Errorf("compose service %s publishes %v: only the gateway is reached from outside", p, s.Ports)
		}
		for _, other := range processes { // pkg/svc.NewInternalRouter: an unnamed service is looked for in-process
			if k := "GPUBILL_" + strings.ToUpper(other) + "_GRPC"; s.Environment[k] != other+":9090" {
				t.Errorf("compose service %s: %s=%q, want %s:9090", p, k, s.Environment[k], other)
			}
		}
	}
	// Payout alone refuses to start without its webhook key and a rail.
	key := regexp.MustCompile(`^\$\{GPUBILL_WEBHOOK_KEY:\?[^}]+\}$`)
	if p := c.Services["payout"]; !key.MatchString(p.Environment["GPUBILL_WEBHOOK_KEY"]) || p.Environment["GPUBILL_PAYOUT_RAIL_BANK"] == "" {
		t.Errorf("compose's payout: GPUBILL_WEBHOOK_KEY=%q GPUBILL_PAYOUT_RAIL_BANK=%q, want the key required and a rail",
			p.Environment["GPUBILL_WEBHOOK_KEY"], p.Environment["GPUBILL_PAYOUT_RAIL_BANK"])
	}
	gw, ok := c.Services["gateway"]
	// nginx resolves its upstreams once, at start, and exits when one is
	// not up yet (a service still restarting): it must be started again.
	if gw.Restart == "" || gw.Restart == "no" {
		t.Errorf("compose's gateway: restart %q, want a restart policy", gw.Restart)
	}
	if !ok || !slices.ContainsFunc(gw.Volumes, func(v string) bool { return strings.HasPrefix(v, "./deploy/nginx.conf:/etc/nginx/nginx.conf") }) {
		t.Errorf("compose's gateway does not run deploy/nginx.conf: %v", gw.Volumes)
	}
	for name, s := range c.Services {
		for _, engine := range []string{"postgres", "nats", "temporal"} {
			if (name == engine || strings.HasPrefix(s.Image, engine+":") || strings.HasPrefix(s.Image, "temporalio/auto-setup")) && len(s.Ports) > 0 {
				t.Errorf("compose service %s (%s) publishes %v: engines stay inside the network", name, s.Image, s.Ports)
			}
		}
		if name == "gateway" {
			continue
		}
		for _, p := range s.Ports { // a console (Temporal UI) on the host's loopback at most
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("compose service %s publishes %s on every interface", name, p)
			}
		}
	}
}
