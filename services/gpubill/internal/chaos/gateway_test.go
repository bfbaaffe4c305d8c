package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// gatewayConf is deploy/nginx.conf (docker-compose's gateway) made to run on
// this machine: every `server <service>:<port>` of an upstream points at
// that service's REST port on loopback, the server listens on listen, and
// the access log and temp files go in dir. The routes are left as they are.
func gatewayConf(conf string, rest map[string]int, listen int, dir string) (string, error) {
	found := map[string]bool{}
	var unknown []string
	server := regexp.MustCompile(`\bserver\s+([A-Za-z0-9_.-]+):\d+`)
	lines := strings.Split(conf, "\n")
	for i, line := range lines {
		code, comment, _ := strings.Cut(line, "#") // comments may name servers too
		code = server.ReplaceAllStringFunc(code, func(m string) string {
			host := server.FindStringSubmatch(m)[1]
			port, ok := rest[host]
			if !ok {
				unknown = append(unknown, host)
				return m
			}
			found[host] = true
			return fmt.Sprintf("server 127.0.0.1:%d", port)
		})
		if strings.Contains(line, "#") {
			code += "#" + comment
		}
		lines[i] = code
	}
	out := strings.Join(lines, "\n")
	if len(unknown) > 0 {
		return "", fmt.Errorf("upstream servers %v are not gpubill services", unknown)
	}
	for name := range rest {
		if !found[name] {
			return "", fmt.Errorf("no upstream server %s:… for service %s", name, name)
		}
	}
	listens := regexp.MustCompile(`(?m)^(\s*)listen\s+[^;]+;`)
	if n := len(listens.FindAllString(out, -1)); n != 1 {
		return "", fmt.Errorf("%d listen directives, want 1", n)
	}
	out = listens.ReplaceAllString(out, fmt.Sprintf("${1}listen 127.0.0.1:%d;", listen))
	httpBlock := regexp.MustCompile(`(?m)^http\s*\{`)
	if n := len(httpBlock.FindAllString(out, -1)); n != 1 {
		return "", fmt.Errorf("%d http blocks, want 1", n)
	}
	var local strings.Builder
	fmt.Fprintf(&local, "http {\n  access_log %s;\n", filepath.Join(dir, "access.log"))
	for _, tmp := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&local, "  %s_temp_path %s;\n", tmp, filepath.Join(dir, tmp))
	}
	return httpBlock.ReplaceAllLiteralString(out, local.String()), nil
}

// startGateway runs nginx (Debian's nginx-light) on deploy/nginx.conf made
// local by gatewayConf and returns its base URL.
func (c *cluster) startGateway() string {
	t := c.t
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("nginx not found (Debian: apt-get install -y --no-install-recommends nginx-light; .ci/run installs it): %v", err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	rest := map[string]int{}
	for _, name := range c.names {
		rest[name] = c.svcs[name].http
	}
	dir := filepath.Join(c.dir, "nginx")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	conf, err := gatewayConf(string(raw), rest, port, dir)
	if err != nil {
		t.Fatalf("deploy/nginx.conf: %v", err)
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// One worker; the master stops it when the test dies (SIGTERM: fast shutdown).
	args := []string{"-e", "stderr", "-p", dir, "-c", path, "-g", fmt.Sprintf("daemon off; worker_processes 1; pid %s;", filepath.Join(dir, "nginx.pid"))}
	if out, err := exec.Command(bin, append([]string{"-t"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t on deploy/nginx.conf made local: %v\n%s\n%s", err, out, conf)
	}
	p := &proc{name: "nginx", bin: bin, args: args, log: filepath.Join(c.dir, "nginx.log"), deathSig: syscall.SIGTERM}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	c.others = append(c.others, p)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testkit.Eventually(t, readyWithin, func() bool {
		if !p.running() {
			t.Fatalf("nginx exited:\n%s", p.tail(30))
		}
		return httpOK(base + "/healthz")
	}, "nginx /healthz on port %d", port)
	return base
}

// gw sends a JSON request through the gateway with token and decodes a JSON
// object answer.
func (c *cluster) gw(base, method, path, token string, body any) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s through the gateway: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read answer: %v", method, path, err)
	}
	out := map[string]any{}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &out); err != nil {
			c.t.Fatalf("%s %s: HTTP %d answer is not a JSON object: %v: %q", method, path, resp.StatusCode, err, raw)
		}
	} else {
		out["_text"] = string(raw)
	}
	return resp.StatusCode, out
}

// TestServicesBehindNginxGateway starts the six service binaries, each its
// own process, with a nats-server and a Temporal dev server of the test's
// own, puts nginx in front of them with deploy/nginx.conf (docker-compose's
// routing; only the upstream addresses and the listen port are made
// local), and runs the REST scenario through that one base URL only: the
// parties, rate card, deposit, KYC and payout method; usage in; the charge
// on the renter's charges and wallet; the cycle closed and settled; the
// provider's statement and tax withholding; the payout paid; the
// segregated-funds report balanced. Every amount is computed here.
func TestServicesBehindNginxGateway(t *testing.T) {
	if os.Getenv("GPUBILL_SKIP_CHAOS") != "" {
		t.Skip("GPUBILL_SKIP_CHAOS set")
	}
	began := time.Now()
	c := newClusterOf(t, clusterSpec{})
	base := c.startGateway()
	started := time.Since(began)
	fin := c.tok
	prov := testkit.Token(t, []byte(chaosSecret), auth.RoleProvider, "p-gw", time.Hour)
	renter := testkit.Token(t, []byte(chaosSecret), auth.RoleRenter, "r-gw", time.Hour)
	must := func(method, path, token string, body any) map[string]any {
		t.Helper()
		code, out := c.gw(base, method, path, token, body)
		if code/100 != 2 {
			t.Fatalf("%s %s through the gateway: HTTP %d %v", method, path, code, out)
		}
		return out
	}
	balance := func(address string) decimal.Decimal {
		t.Helper()
		code, out := c.gw(base, http.MethodGet, "/v1/accounts/"+address, fin, nil)
		if code == http.StatusNotFound {
			return decimal.Zero
		}
		if code != http.StatusOK {
			t.Fatalf("GET account %s: HTTP %d %v", address, code, out)
		}
		bals, _ := out["balances"].([]any)
		for _, b := range bals {
			if m, _ := b.(map[string]any); m["currency"] == "CNY" {
				return decimal.RequireFromString(fmt.Sprint(m["amount"]))
			}
		}
		return decimal.Zero
	}
	waitBalance := func(address, want string) {
		t.Helper()
		var got decimal.Decimal
		testkit.Eventually(t, time.Minute, func() bool {
			got = balance(address)
			return got.Equal(decimal.RequireFromString(want))
		}, "balance of %s: want %s (last seen %v)", address, want, &got)
	}

	// Each service's readiness and dead letters through the gateway.
	for _, name := range c.names {
		must(http.MethodGet, "/readyz/"+name, fin, nil)
		dl := must(http.MethodGet, "/v1/ops/dead-letters?service="+name, fin, nil)
		if letters, ok := dl["dead_letters"].([]any); !ok || len(letters) != 0 {
			t.Fatalf("dead letters of %s through the gateway: %v, want none", name, dl)
		}
	}

	// metering, pricing, ledger, payout.
	must(http.MethodPost, "/v1/providers", fin, map[string]any{"provider_id": "p-gw", "name": "Rig GW", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "pue": "1.2", "currency": "CNY"})
	must(http.MethodPost, "/v1/renters", fin, map[string]any{"renter_id": "r-gw", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	must(http.MethodPost, "/v1/rate-cards", fin, map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "100.00"}}})
	must(http.MethodPost, "/v1/deposits", fin, map[string]any{"renter_id": "r-gw", "amount": "500.00", "currency": "CNY", "external_ref": "gw-deposit-1"})
	must(http.MethodPut, "/v1/providers/p-gw/kyc", fin, map[string]any{"status": "verified", "reference": "kyc-gw"})
	must(http.MethodPut, "/v1/providers/p-gw/payout-method", fin, map[string]any{"type": "bank", "account_name": "Rig GW Ltd",
		"account_number": "6222000011110001", "bank_code": "ICBKCNBJ"})

	// Usage of yesterday's (daily) cycle: 2 GPUs × 1.5 h × 100.00 = 300.00.
	start := calendar.At(calendar.At(time.Now()).Start.Add(-time.Minute)).Start.Add(time.Hour)
	end := start.Add(90 * time.Minute)
	cycle := calendar.At(start).ID
	res := must(http.MethodPost, "/v1/usage-events", fin, map[string]any{"events": []any{map[string]any{"id": "ev-gw-1", "lease_id": "lease-gw",
		"provider_id": "p-gw", "renter_id": "r-gw", "gpu_model": "RTX_4090", "gpu_count": 2,
		"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339), "region": "cn-east", "workload": "training"}}})
	if fmt.Sprint(res["accepted"]) != "1" {
		t.Fatalf("ingest through the gateway: %v", res)
	}

	// pricing: the renter sees its charge; ledger: its wallet and the
	// provider's pending account of the cycle.
	var charges []any
	testkit.Eventually(t, time.Minute, func() bool {
		out := must(http.MethodGet, "/v1/renters/r-gw/charges", renter, nil)
		charges, _ = out["charges"].([]any)
		return len(charges) > 0
	}, "r-gw's charge through the gateway")
	if ch, _ := charges[0].(map[string]any); len(charges) != 1 || ch["amount"] != "300.00" || ch["lease_id"] != "lease-gw" || ch["cycle_id"] != cycle {
		t.Fatalf("charges of r-gw: %v, want one of 300.00 for lease-gw in %s", charges, cycle)
	}
	waitBalance("provider:p-gw:pending:"+cycle, "300.00")
	wallet := must(http.MethodGet, "/v1/renters/r-gw/wallet", renter, nil)
	if bs, _ := wallet["balances"].([]any); len(bs) != 1 || bs[0].(map[string]any)["balance"] != "200.00" {
		t.Fatalf("wallet of r-gw: %v, want a CNY balance of 200.00", wallet)
	}

	// settlement: close the cycle and wait for it to settle.
	must(http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", fin, map[string]any{})
	var cyc map[string]any
	testkit.Eventually(t, 90*time.Second, func() bool {
		cyc = must(http.MethodGet, "/v1/settlement-cycles/"+cycle, fin, nil)
		return cyc["status"] == "settled"
	}, "cycle %s settled (last seen: %v)", cycle, &cyc)

	// gross 300.00 = commission 75.00 (standard 25 %) + tax 45.00 (20 % of 225.00) + net 180.00
	st := must(http.MethodGet, "/v1/providers/p-gw/statements?cycle_id="+cycle, prov, nil)
	stmts, _ := st["statements"].([]any)
	if len(stmts) != 1 {
		t.Fatalf("statements of p-gw: %v", st)
	}
	for k, want := range map[string]string{"gross": "300.00", "commission": "75.00", "tax_withheld": "45.00", "net": "180.00", "currency": "CNY"} {
		if got := stmts[0].(map[string]any)[k]; got != want {
			t.Errorf("statement %s = %v, want %s", k, got, want)
		}
	}
	wh := must(http.MethodGet, "/v1/providers/p-gw/tax-withholdings", prov, nil)
	whs, _ := wh["tax_withholdings"].([]any)
	if len(whs) != 1 || whs[0].(map[string]any)["tax_withheld"] != "45.00" || whs[0].(map[string]any)["cycle_id"] != cycle {
		t.Fatalf("tax withholdings of p-gw: %v, want one of 45.00 in %s", wh, cycle)
	}

	// payout: the net is paid on the sandbox rail.
	var payout map[string]any
	testkit.Eventually(t, 90*time.Second, func() bool {
		out := must(http.MethodGet, "/v1/providers/p-gw/payouts", prov, nil)
		ps, _ := out["payouts"].([]any)
		if len(ps) == 0 {
			return false
		}
		payout, _ = ps[0].(map[string]any)
		return payout["status"] == "paid"
	}, "payout of p-gw paid (last seen: %v)", &payout)
	if payout["net"] != "180.00" {
		t.Errorf("payout %v, want net 180.00", payout)
	}
	waitBalance("provider:p-gw:available", "0")
	waitBalance("provider:p-gw:pending:"+cycle, "0")
	waitBalance("bank:client", "245.00") // 500 deposited − 75 commission swept − 180 paid

	rep := must(http.MethodGet, "/v1/reports/segregated-funds?currency=CNY", fin, nil)
	if rep["verdict"] != "balanced" || rep["difference"] != "0.00" {
		t.Errorf("segregated funds through the gateway: %v", rep)
	}
	t.Logf("gateway: six services, NATS, Temporal and nginx up in %s; scenario through nginx in %s; total %s",
		started.Round(time.Millisecond), time.Since(began.Add(started)).Round(time.Millisecond), time.Since(began).Round(time.Second))
}
