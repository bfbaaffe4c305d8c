package deploycheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	_ "github.com/gpubill/gpubill/services/gpubill/internal/backup" // gpubill dev's snapshot metrics, on its /metrics
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/metering"
	"github.com/gpubill/gpubill/services/payout"
	"github.com/gpubill/gpubill/services/pricing"
	"github.com/gpubill/gpubill/services/settlement"
	"github.com/gpubill/gpubill/services/tax"
)

var schemas = []string{"metering", "pricing", "ledger", "tax", "payout", "settlement"}

// fakeService is a hosted service as far as metrics go: a name and, for
// payout and settlement, their own business metrics.
type fakeService struct {
	svc.Service
	name    string
	metrics []obs.SQLMetric
}

func (f fakeService) Name() string                               { return f.name }
func (f fakeService) Metrics() []obs.SQLMetric                   { return f.metrics }
func (f fakeService) withMetrics(ms []obs.SQLMetric) fakeService { f.metrics = ms; return f }

// TestAlertsNameServedMetrics scrapes GET /metrics of a real server, with
// every live-state source wired as gpubill dev wires it over a migrated
// database holding one row of each kind, and fails if an alert rule names
// a gpubill_ metric that is not in the scrape (a typo, or a metric renamed
// in the code but not in deploy/).
func TestAlertsNameServedMetrics(t *testing.T) {
	ctx := testkit.Context(t)
	pool, _ := testkit.NewPool(t)
	for _, s := range schemas {
		if err := pg.Migrate(ctx, pool, s, migrations.For(s)); err != nil {
			t.Fatalf("migrate %s: %v", s, err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// One row of each kind the gauges group by.
	if err := deadletter.New(pool, "pricing", log).PutLetter(ctx, pool, deadletter.Letter{
		Consumer: "pricing-usage", MessageID: "m-1", Subject: "usage.recorded", Payload: []byte("x")}, 1, errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`insert into metering.outbox (id, subject, payload, created_at) values ('o-1', 'usage.recorded', 'x', now() - interval '1 minute')`,
		`insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status)
			values ('po-1', 'p-1', 'cyc-1', 'CNY', 100, 20, 16, 64, 'failed')`,
		`insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at, closed_at, snapshot_done)
			values ('cyc-1', 'closing', now() - interval '46 days', now() - interval '1 day', now() - interval '1 hour', now() - interval '2 hours', true)`,
		`insert into settlement.settlements (cycle_id, provider_id, currency, gross) values ('cyc-1', 'p-1', 'CNY', 100)`,
		// A settled provider whose commission sweep is deferred (bank:client could not fund it).
		`insert into settlement.settlements (cycle_id, provider_id, currency, gross, status, commission, settled_at)
			values ('cyc-1', 'p-2', 'CNY', 100, 'settled', 25, now() - interval '1 hour')`,
		`insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name, creditor_account,
			creditor_agent, state, queued_at, updated_at) values ('po-1', 'po-1', 'p-1', 'CNY', 64, 'P One', '6222000011110001', 'ICBKCNBJ', 'queued', now(), now())`,
		`insert into payout.bank_files (file_id, sha256, kind, message_id, source, imported_at) values ('bf-1', 'h', 'pain.002.001.10', 'S-1', 'upload', now())`,
		`insert into ledger.reconciliations (reconciliation_id, currency, trigger, created_at, journal_head_hash, journal_head_position,
			ledger_bank_client, verdict, matched_count, unmatched_bank_count, unmatched_ledger_count)
			values ('rc-1', 'CNY', 'schedule', now(), 'h', 0, 100, 'exceptions', 3, 1, 0)`,
		`insert into ledger.bank_statements (statement_id, account, currency, format, statement_date, closing_at, opening_balance, closing_balance,
			line_count, content_sha256) values ('st-1', 'CN-CLIENT-1', 'CNY', 'csv', current_date - 2, current_date - 1, 0, 0, 0, 'h')`,
		`insert into payout.bank_file_entries (file_id, seq, element, end_to_end_id, bank_status, outcome) values ('bf-1', 1, 'x', 'nobody', 'ACCP', 'unknown_reference')`,
		`insert into pricing.pending_rating (event_id, message_id, renter_id, currency, gpu_model, payload, reason, created_at, last_attempt_at)
			values ('ev-1', 'm-1', 'r-1', 'CNY', 'T4', 'x', 'rate card rc-1 has no price for GPU model T4', now() - interval '1 hour', now())`,
		// A withholding of a filed month (January's run recorded) that no
		// remittance holds: its settlement was posted after the filing.
		`insert into tax.remittance_runs (period, completed_at, remittances, not_posted) values ('2026-01', '2026-02-01 02:00+08', 0, 1)`,
		`insert into tax.withholdings (withholding_id, idempotency_key, provider_id, cycle_id, currency, gross, commission, taxable_base,
			tax_withheld, net, tax_profile, jurisdiction, rule_set, rule_version, certificate_id, created_at)
			values ('wh-1', 'k-1', 'p-1', 'cyc-20260120', 'CNY', 100, 25, 75, 15, 60, 'individual', 'CN', 'flat20', '1', 'c-1', '2026-01-20 09:00+08')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A segregated-funds report of now, as the ledger makes every 10 minutes.
	if _, err := ledger.ExportSegregatedFunds(ctx, pool, nil, "CNY", "json", nil); err != nil {
		t.Fatal(err)
	}
	// A closed renter whose wallet holds money (a reversal of its refund),
	// after the report (the empty ledger's verdict is checked below).
	if _, err := pool.Exec(ctx, `insert into ledger.renters (renter_id, currency, credit_limit, version, updated_at, closed_at)
		values ('r-gone', 'CNY', 0, 2, now(), now());
		insert into ledger.balances (account, currency, debits, credits) values ('renter:r-gone:wallet', 'CNY', 100, 150)`); err != nil {
		t.Fatal(err)
	}
	js := testkit.NewJetStream(t)
	if err := natsx.EnsureStreams(ctx, js.JS, natsx.StreamUsage); err != nil {
		t.Fatal(err)
	}
	if _, err := js.JS.CreateOrUpdateConsumer(ctx, natsx.StreamUsage, jetstream.ConsumerConfig{Durable: "pricing-usage", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}

	hosted := make([]svc.Service, len(schemas))
	for i, s := range schemas {
		f := fakeService{name: s}
		switch s {
		case "ledger":
			f = f.withMetrics(ledger.Metrics())
		case "payout":
			f = f.withMetrics(payout.Metrics())
		case "pricing":
			f = f.withMetrics(pricing.Metrics())
		case "settlement":
			f = f.withMetrics(settlement.Metrics())
		case "tax":
			f = f.withMetrics(tax.Metrics())
		}
		hosted[i] = f
	}
	t.Cleanup(svc.ServeMetrics(pool, js.JS, log, hosted...))
	meter, err := metering.New(ctx, svc.Deps{Pool: pool, JS: js.JS, Log: log, Clock: clock.System{}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(ctx, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: []byte("deploycheck-test-secret-of-32-bytes!"), Log: log,
		Services: []server.Service{meter}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	// Metering's consumer running, so the per-consumer series exist.
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- meter.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("metering run: %v", err)
		}
	})
	testkit.Eventually(t, 10*time.Second, func() bool {
		_, ok := scrape(t, "http://"+srv.HTTPAddr+"/metrics")["gpubill_consumer_handler_timeouts_total"]
		return ok
	}, "metering's consumer never started (no gpubill_consumer_handler_timeouts_total)")
	// One gRPC call and one HTTP call, so the RED vectors have series.
	if _, err := healthpb.NewHealthClient(srv.Conn()).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	get(t, "http://"+srv.HTTPAddr+"/healthz")
	resp, err := http.Post("http://"+srv.HTTPAddr+"/v1/usage-events", "application/json", strings.NewReader(`{"events":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /v1/usage-events without a token: %d", resp.StatusCode)
	}

	// Scraped twice: a source's failure is counted while the scrape that
	// met it runs, so the second one shows it.
	scrape(t, "http://"+srv.HTTPAddr+"/metrics")
	served := scrape(t, "http://"+srv.HTTPAddr+"/metrics")
	// The consumers' lag counts its failed reads from 0 (a first failure is an increase).
	if !strings.Contains(served["gpubill_metrics_source_errors_total"], `value:"consumer-lag"`) {
		t.Errorf("gpubill_metrics_source_errors_total has no consumer-lag series:\n%s", served["gpubill_metrics_source_errors_total"])
	}
	for _, line := range strings.Split(served["gpubill_metrics_source_errors_total"], "\n") {
		if line != "" && !strings.HasSuffix(line, "counter:{value:0}") {
			t.Errorf("a live-state source failed during the scrape (warnings in the log say which query): %s", line)
		}
	}
	for _, name := range []string{ // every live-state family, not only those alerts use
		"gpubill_grpc_requests_total", "gpubill_grpc_request_duration_seconds", "gpubill_http_requests_total",
		"gpubill_http_request_duration_seconds", "gpubill_dead_letters_total", "gpubill_dead_letters_open",
		"gpubill_outbox_messages", "gpubill_outbox_oldest_age_seconds", "gpubill_consumer_pending_messages", "gpubill_consumer_ack_floor_sequence",
		"gpubill_payouts", "gpubill_settlement_cycles", "gpubill_settlement_cycle_providers",
		"gpubill_settlement_closing_stalled_seconds", "gpubill_settlement_commission_unswept", "gpubill_settlement_commission_unswept_age_seconds", "gpubill_settlement_commission_sweep_conflicts_total",
		"gpubill_bank_transfers", "gpubill_bank_file_entries_not_applied",
		"gpubill_payout_amount", "gpubill_settlement_cycle_amount", "gpubill_reconciliation_exceptions",
		"gpubill_reconciliation_unmatched", "gpubill_reconciliation_last_run_timestamp_seconds",
		"gpubill_reconciliation_latest_statement_age_seconds", "gpubill_reconciliation_latest_statement_age_business_days",
		"gpubill_segregated_funds_difference", "gpubill_segregated_funds_ledger_difference", "gpubill_segregated_funds_verdict", "gpubill_segregated_funds_report_timestamp_seconds",
		"gpubill_segregated_funds_report_failures_total",
		"gpubill_segregation_breaches",
		"gpubill_consumer_handler_timeouts_total", "gpubill_consumer_handler_panics_total", "gpubill_usage_pending_rating", "gpubill_usage_pending_rating_oldest_age_seconds",
		"gpubill_payout_ledger_refusals_total", "gpubill_payout_rail_amount_mismatches_total", "gpubill_stream_retention_deferred_total",
		"gpubill_stream_retention_still_deferred",
		"gpubill_payout_workflow_unstarted_age_seconds", "gpubill_payout_rail_amount_flags_open_age_seconds", "gpubill_payout_settled_outside_case_duplicates",
		"gpubill_bank_inbox_files_failed_total", "gpubill_bank_inbox_files_rejected_total", "gpubill_ledger_write_group_timeouts_total",
		"gpubill_payout_webhook_deliveries_total", "gpubill_payout_webhook_delivery_lag_seconds",
		"gpubill_tax_remittances_reversed_unremitted", "gpubill_tax_remittance_reversed_age_seconds", "gpubill_tax_reversal_check_failures_total",
		"gpubill_tax_late_withholdings", "gpubill_tax_late_withholdings_amount", "gpubill_ledger_closed_renter_wallets",
	} {
		if _, ok := served[name]; !ok {
			t.Errorf("GET /metrics lacks %s", name)
		}
	}
	// Every rail's mismatch series from 0, the bank-file rail's too (finance
	// resolving a transfer in review as paid at another amount is its first).
	for _, rail := range []string{"sandbox", "alipay", "wechatpay", "bank-file"} {
		if !strings.Contains(served["gpubill_payout_rail_amount_mismatches_total"], `value:"`+rail+`"`) {
			t.Errorf("gpubill_payout_rail_amount_mismatches_total has no %s series:\n%s", rail, served["gpubill_payout_rail_amount_mismatches_total"])
		}
	}
	// Routes are patterns (the gateway's, or net/http's), never raw paths.
	for _, want := range []string{`value:"POST /v1/usage-events"`, `value:"GET /healthz"`, `value:"GET /metrics"`} {
		if !strings.Contains(served["gpubill_http_requests_total"], want) {
			t.Errorf("gpubill_http_requests_total has no route %s:\n%s", want, served["gpubill_http_requests_total"])
		}
	}
	if !strings.Contains(served["gpubill_grpc_requests_total"], `value:"/gpubill.metering.v1.UsageService/IngestUsageEvents"`) {
		t.Errorf("gpubill_grpc_requests_total:\n%s", served["gpubill_grpc_requests_total"])
	}
	// The report of an empty ledger: balanced, nothing short.
	for _, line := range strings.Split(served["gpubill_segregated_funds_verdict"], "\n") {
		on := strings.Contains(line, "gauge:{value:1}")
		if strings.Contains(line, `value:"CNY"`) && on != strings.Contains(line, `value:"balanced"`) {
			t.Errorf("segregated-funds verdict of an empty ledger: %s", line)
		}
	}
	if v := served["gpubill_outbox_oldest_age_seconds"]; !strings.Contains(v, `value:"metering"`) {
		t.Errorf("outbox age series: %s", v)
	}

	exprs := map[string]map[string]string{
		"prometheus/alerts.yml": alertExprs(t, filepath.Join(deployDir, "prometheus", "alerts.yml")),
	}
	dashboards, err := filepath.Glob(filepath.Join(deployDir, "grafana", "dashboards", "*.json"))
	if err != nil || len(dashboards) < 4 {
		t.Fatalf("dashboards %v (%v): want pipeline health, money, settlement cycles and payouts", dashboards, err)
	}
	for _, d := range dashboards {
		exprs["grafana/dashboards/"+filepath.Base(d)] = dashboardExprs(t, d)
	}
	checkPromQL(t, exprs)
	for file, byName := range exprs {
		for rule, expr := range byName {
			for _, name := range metricNames.FindAllString(expr, -1) {
				if _, ok := served[familyOf(name)]; !ok {
					t.Errorf("%s: %s names %s, which no gpubill process serves", file, rule, name)
				}
			}
		}
	}
}

const deployDir = "../../../../deploy"

var metricNames = regexp.MustCompile(`\bgpubill_[a-zA-Z0-9_]+`)

// familyOf maps a histogram's series name to its family.
func familyOf(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			return base
		}
	}
	return name
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v %s", url, resp.StatusCode, err, b)
	}
	return b
}

// scrape returns each served family (histograms under their family name,
// as families are exposed) with its series as text.
func scrape(t *testing.T, url string) map[string]string {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(get(t, url))))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for name, f := range families {
		var series []string
		for _, m := range f.Metric {
			series = append(series, m.String())
		}
		sort.Strings(series)
		out[name] = strings.Join(series, "\n")
	}
	return out
}

// dashboardPanel is the part of a Grafana panel the checks read; a row
// holds its collapsed panels.
type dashboardPanel struct {
	ID         int                      `json:"id"`
	Title      string                   `json:"title"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Thresholds struct {
				Steps []thresholdStep `json:"steps"`
			} `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// thresholdStep is one step of a panel's thresholds: the colour from
// Value up (the first step's Value is null: from minus infinity).
type thresholdStep struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

// dashboardExprs reads panel title → query from a Grafana dashboard, rows'
// panels and the template variables' queries included.
func dashboardExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string           `json:"uid"`
		Title      string           `json:"title"`
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: a dashboard needs a uid and a title (provisioning keys on the uid)", path)
	}
	out := map[string]string{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q query %d is empty", path, p.Title, i)
				}
				out[fmt.Sprintf("%s#%d", p.Title, i)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil { // a plain string, then
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Errorf("%s: variable %s: query %s is neither an object nor a string", path, v.Name, v.Query)
			}
		}
		if q.Query != "" {
			out["variable $"+v.Name] = q.Query
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no queries", path)
	}
	return out
}

// checkPromQL has promtool parse every query (as the expression of a
// recording rule, Grafana's variables replaced by a match-all): a query
// that does not parse shows nothing in Grafana. Skipped without promtool
// outside CI (.ci/run installs it).
func checkPromQL(t *testing.T, exprs map[string]map[string]string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found")
		}
		t.Log("promtool not found: the queries' syntax is not checked (apt-get install prometheus)")
		return
	}
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	var names []string
	for file, byName := range exprs {
		for name, expr := range byName {
			if strings.HasPrefix(name, "variable $") { // label_values(…): Grafana's, not PromQL
				continue
			}
			rules = append(rules, rule{Record: fmt.Sprintf("check:q%d", len(rules)), Expr: grafanaVar.ReplaceAllString(expr, ".*")})
			names = append(names, file+": "+name)
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "deploycheck", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "queries.yml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		for i, n := range names { // name the query promtool's message points at
			if strings.Contains(string(out), fmt.Sprintf("check:q%d\"", i)) || strings.Contains(string(out), fmt.Sprintf("group \"deploycheck\", rule %d,", i+1)) {
				t.Errorf("%s does not parse", n)
			}
		}
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

var grafanaVar = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)

// alertExprs reads rule name → expression from a Prometheus rules file.
func alertExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out[r.Alert+r.Record] = r.Expr
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", path)
	}
	return out
}
