// Package hostile sends the REST API what an attacker or a broken client
// would: over-size bodies, NUL bytes, invalid UTF-8, wrong JSON types,
// unknown enum values, million-digit decimals, and fuzzed bodies for every
// write route. The contract (DESIGN §7): bad input is a 400 naming the field,
// an over-size body a 413, never a 5xx, and an internal error tells the
// client only a request id.
//
// One stack (every service, real PostgreSQL, in-process JetStream, a real
// Temporal dev server) serves every test and fuzz target of the package.
package hostile

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/stack"
)

// stackNow is the stack's clock: the bodies' times are a few days before it.
var stackNow = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

const secret = "hostile-test-secret-0123456789abcdef"

var (
	base         string                // http://host:port of the shared stack
	tokens       = map[string]string{} // role → token
	logs         syncBuffer            // the stack's log (request ids, internal errors)
	mainCleanups []func()
	seededTx     string // a transaction ReverseTransaction may reverse
	databaseURL  string
	grpcAddr     string
)

// mainTB lets testkit's helpers run in TestMain, before any test.
type mainTB struct{ testing.TB }

func (mainTB) Helper()                      {}
func (mainTB) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (mainTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (mainTB) Cleanup(f func())             { mainCleanups = append(mainCleanups, f) }

func TestMain(m *testing.M) {
	code := func() int {
		defer func() {
			for i := len(mainCleanups) - 1; i >= 0; i-- {
				mainCleanups[i]()
			}
		}()
		dataDir, err := os.MkdirTemp("", "gpubill-hostile-")
		if err != nil {
			panic(err)
		}
		mainCleanups = append(mainCleanups, func() { os.RemoveAll(dataDir) })
		if err := configureAlipay(dataDir); err != nil {
			panic(err)
		}
		if err := configureWeChatPay(dataDir); err != nil {
			panic(err)
		}
		// Webhooks point at 127.0.0.1:9 (nothing listens): a global address
		// would send the deliveries of the payouts these tests make out to it.
		if err := os.Setenv("GPUBILL_WEBHOOK_ALLOW_PRIVATE", "true"); err != nil {
			panic(err)
		}
		databaseURL = testkit.NewDatabase(mainTB{})
		cfg := stack.Config{
			Common: config.Common{
				DatabaseURL: databaseURL,
				HTTPAddr:    "127.0.0.1:0",
				GRPCAddr:    "127.0.0.1:0",
				DataDir:     dataDir,
				AuthSecret:  secret,
				CycleDays:   45,
				CycleAnchor: "2026-01-01",
				CycleGrace:  24 * time.Hour,
			},
			NATSAddr:     "127.0.0.1:0",
			TemporalAddr: "127.0.0.1:0",
			Log:          slog.New(slog.NewJSONHandler(&logs, nil)),
			// A fixed clock keeps the seeds' usage times inside the
			// late-arrival window whatever day the tests run.
			Clock: clock.NewManual(stackNow),
		}
		st, err := stack.Start(context.Background(), cfg)
		if err != nil {
			panic(err)
		}
		mainCleanups = append(mainCleanups, st.Stop)
		base = "http://" + st.HTTPAddr
		grpcAddr = st.GRPCAddr
		for _, r := range []struct{ role, sub string }{{auth.RoleFinance, ""}, {auth.RoleAdmin, ""}, {auth.RoleService, "settlement"}, {auth.RoleRenter, "r-001"}, {auth.RoleProvider, "p-001"}} {
			tok, err := auth.Issue([]byte(secret), r.role, r.sub, 24*time.Hour)
			if err != nil {
				panic(err)
			}
			tokens[r.role] = tok
		}
		if err := seedParties(); err != nil {
			panic(err)
		}
		return m.Run()
	}()
	os.Exit(code)
}

// seedParties creates what the valid bodies refer to.
func seedParties() error {
	for _, r := range []struct{ path, body string }{
		{"/v1/providers", `{"provider_id":"p-001","name":"Rig One","tier":"standard","tax_profile":"individual","jurisdiction":"CN","currency":"CNY"}`},
		{"/v1/renters", `{"renter_id":"r-001","name":"Lab","currency":"CNY","credit_limit":"0"}`},
		{"/v1/renters", `{"renter_id":"r-h0","name":"Lab Zero","currency":"CNY","credit_limit":"0"}`},
		{"/v1/rate-cards", `{"rate_card_id":"rc-seed","currency":"CNY","effective_from":"2026-01-01T00:00:00Z","gpu_prices":[{"gpu_model":"RTX_4090","hourly":"2.00"}]}`},
		{"/v1/deposits", `{"renter_id":"r-001","amount":"100.00","currency":"CNY","external_ref":"seed-ref"}`},
	} {
		res := send(http.MethodPost, r.path, tokens[auth.RoleFinance], []byte(r.body))
		if res.code != http.StatusOK {
			return fmt.Errorf("seed %s: HTTP %d %s", r.path, res.code, res.raw)
		}
	}
	var err error
	if seededTx, err = newTransaction(); err != nil {
		return err
	}
	res := send(http.MethodPost, "/v1/providers/p-001/webhooks", tokens[auth.RoleFinance], []byte(`{"url":"http://127.0.0.1:9/seed","secret":"whsec-seed-0123456789"}`))
	var wh struct {
		WebhookID string `json:"webhook_id"`
	}
	if err := json.Unmarshal(res.raw, &wh); err != nil || res.code != http.StatusOK || wh.WebhookID == "" {
		return fmt.Errorf("seed webhook: HTTP %d %s", res.code, res.raw)
	}
	res = send(http.MethodPost, "/v1/providers/p-001/webhooks", tokens[auth.RoleFinance], []byte(`{"url":"http://127.0.0.1:9/removed","secret":"whsec-gone-0123456789"}`))
	var gone struct {
		WebhookID string `json:"webhook_id"`
	}
	if err := json.Unmarshal(res.raw, &gone); err != nil || res.code != http.StatusOK || gone.WebhookID == "" {
		return fmt.Errorf("seed webhook to remove: HTTP %d %s", res.code, res.raw)
	}
	delivery, err := seedFailedDelivery(wh.WebhookID)
	if err != nil {
		return err
	}
	run, resolution, err := seedReconciliation()
	if err != nil {
		return err
	}
	letter, err := seedOneTimeWrites()
	if err != nil {
		return err
	}
	if seededSettleTx, err = seedSettledOutside(); err != nil {
		return err
	}
	for i := range writeRoutes {
		switch writeRoutes[i].name {
		case "ReverseTransaction":
			writeRoutes[i].arg = seededTx
		case "RotateWebhookSecret":
			writeRoutes[i].arg = wh.WebhookID
		case "DeleteWebhook":
			writeRoutes[i].arg = gone.WebhookID
		case "RedeliverWebhookDelivery":
			writeRoutes[i].path = "/v1/providers/p-001/webhooks/" + wh.WebhookID + "/deliveries/%s:redeliver"
			writeRoutes[i].arg = delivery
		case "ResolveReconciliationItems":
			writeRoutes[i].arg = run
		case "ReplayDeadLetter":
			writeRoutes[i].arg = letter
		case "SettlePayoutOutside":
			writeRoutes[i].body = `{"transaction_id":"` + seededSettleTx + `","reason":"hostile walk: paid by hand, ICBC ref 7"}`
		case "VoidReconciliationResolution":
			writeRoutes[i].path = "/v1/reconciliations/" + run + "/resolutions/%s:void"
			writeRoutes[i].arg = resolution
		}
	}
	return nil
}

// seedFailedDelivery puts a delivery of webhook in its log, given up
// (failed), as the sender leaves one after 3 days; it returns its id.
func seedFailedDelivery(webhook string) (string, error) {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return "", err
	}
	defer db.Close(ctx)
	var id int64
	if err := db.QueryRow(ctx, `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at, status, attempts)
		values ($1, 'ev-hostile', 'po-hostile', '{}', $2, $2, 'failed', 5) returning delivery_id`, webhook, stackNow.Add(-96*time.Hour)).Scan(&id); err != nil {
		return "", fmt.Errorf("seed delivery: %w", err)
	}
	return strconv.FormatInt(id, 10), nil
}

// What seedOneTimeWrites puts in payout's tables: payouts of a provider
// of their own (no method, no KYC, nothing in available: a retried one
// waits at the gate), each in the state its one-time write acts on.
const (
	seedProvider   = "p-hw"
	seedCancel     = "po-hw-cancel"   // action_required: canceled by CancelPayout
	seedRetry      = "po-hw-retry"    // failed (insufficient_funds, the platform's): retried by RetryPayout
	seedMismatch   = "po-hw-mismatch" // submitted, flagged rail_amount_mismatch at seedRailAmount
	seedRailAmount = "612.34"
	seedTransfer   = "po-hw-bank" // a bank transfer in review (amount_mismatch), end to end id seedE2E
	seedE2E        = "E2E-HW-1"
	// seedSettle is failed (account_frozen), its net paid by hand by the
	// ledger entry seededSettleTx: settled by SettlePayoutOutside.
	seedSettle = "po-hw-settle"
)

// seededSettleTx is the ledger entry paying seedSettle's net by hand.
var seededSettleTx string

// oneTimeSet names the payouts one seedPayouts call makes (see the
// constants above), in cycles of their own.
type oneTimeSet struct {
	cancel, retry, mismatch, transfer, e2e string
	cycles                                 [4]string
}

var walkSet = oneTimeSet{seedCancel, seedRetry, seedMismatch, seedTransfer, seedE2E,
	[4]string{"cyc-20260101", "cyc-20260215", "cyc-20260401", "cyc-20260516"}}

// seedOneTimeWrites seeds what the one-time writes act on, as the payout
// workflow and the bank-file rail leave it (seedPayouts), the bank-file
// rail's restore hold (as gpubill restore opens it), and a dead letter (a
// usage message pricing could not decode). It returns the dead letter's
// id.
func seedOneTimeWrites() (string, error) {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return "", err
	}
	defer db.Close(ctx)
	if err := seedPayouts(ctx, db, walkSet); err != nil {
		return "", err
	}
	if err := openRestoreHold(ctx, db); err != nil {
		return "", err
	}
	var letter int64
	if err := db.QueryRow(ctx, `insert into pricing.dead_letters (consumer, message_id, subject, payload, error, attempts, first_seen_at, last_seen_at)
		values ('pricing-rating', 'ub-hostile', 'usage.recorded.p-001', $1, 'proto: cannot parse invalid wire-format data', 1, $2, $2)
		returning id`, []byte{0x0a, 0xff, 0xff, 0xff}, stackNow.Add(-48*time.Hour)).Scan(&letter); err != nil {
		return "", fmt.Errorf("seed dead letter: %w", err)
	}
	return fmt.Sprintf("pricing-%d", letter), nil
}

// seedSettledOutside makes seedSettle, a failed payout of seedProvider,
// and the ledger entries finance posts paying it by hand: its net into
// provider:{p-hw}:available (as its failure put it back) and out to
// bank:client. It returns the latter's id.
func seedSettledOutside() (string, error) {
	var paid string
	for _, e := range []struct{ key, debit, credit string }{
		{"hw-settle-available", "bank:client", "provider:" + seedProvider + ":available"},
		{"hw-settle-paid", "provider:" + seedProvider + ":available", "bank:client"},
	} {
		res := send(http.MethodPost, "/v1/transactions", tokens[auth.RoleFinance], []byte(fmt.Sprintf(`{"idempotency_key":%q,"description":"seed","postings":[`+
			`{"account":%q,"direction":"debit","amount":"600.00","currency":"CNY"},{"account":%q,"direction":"credit","amount":"600.00","currency":"CNY"}]}`,
			e.key, e.debit, e.credit)))
		var tx struct {
			TransactionID string `json:"transaction_id"`
		}
		if err := json.Unmarshal(res.raw, &tx); err != nil || res.code != http.StatusOK || tx.TransactionID == "" {
			return "", fmt.Errorf("seed %s: HTTP %d %s", e.key, res.code, res.raw)
		}
		paid = tx.TransactionID
	}
	ctx := context.Background()
	db, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return "", err
	}
	defer db.Close(ctx)
	at := stackNow.Add(-48 * time.Hour)
	if _, err := db.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			status_reason, method, method_summary, failure_code, failure_message, rail_reference, workflow_started, version, created_at, updated_at)
		values ($1, $2, 'cyc-20261227', 'CNY', 1000, 250, 150, 600, 'failed', 'failed', 'bank', '', 'account_frozen', 'the account is closed', $1, true, 1, $3, $3)`,
		seedSettle, seedProvider, at); err != nil {
		return "", fmt.Errorf("seed payout %s: %w", seedSettle, err)
	}
	if _, err := db.Exec(ctx, `insert into payout.status_history (payout_id, seq, status, at) values ($1, 1, 'failed', $2)`, seedSettle, at); err != nil {
		return "", fmt.Errorf("seed payout %s: %w", seedSettle, err)
	}
	return paid, nil
}

// openRestoreHold opens the bank-file rail's restore hold, as gpubill
// restore does (one open at most: an open one is kept).
func openRestoreHold(ctx context.Context, db *pgx.Conn) error {
	if _, err := db.Exec(ctx, `insert into payout.bank_file_holds (held_since) values ($1)
		on conflict ((released_at is null)) where released_at is null do nothing`, stackNow.Add(-48*time.Hour)); err != nil {
		return fmt.Errorf("seed restore hold: %w", err)
	}
	return nil
}

// seedPayouts makes set's payouts, as the payout workflow and the
// bank-file rail leave them: one to cancel, a failed one to retry, one
// flagged rail_amount_mismatch, and one whose bank transfer is held for
// review. Each payout's workflow counts as started: no workflow moves them
// but the writes' own.
func seedPayouts(ctx context.Context, db *pgx.Conn, set oneTimeSet) error {
	at := stackNow.Add(-48 * time.Hour)
	for i, p := range []struct{ id, status, failure, message, railRef string }{
		{set.cancel, "action_required", "", "", ""},
		{set.retry, "failed", "insufficient_funds", "the platform's account lacked funds", set.retry},
		{set.mismatch, "submitted", "rail_amount_mismatch", "alipay holds " + set.mismatch + " at " + seedRailAmount + " CNY, the payout is 600.00 CNY", set.mismatch},
		{set.transfer, "submitted", "", "", set.transfer},
	} {
		if _, err := db.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
				status_reason, method, method_summary, failure_code, failure_message, rail_reference, workflow_started, version, created_at, updated_at)
			values ($1, $2, $3, 'CNY', 1000, 250, 150, 600, $4, $4, 'bank', '', $5, $6, $7, true, 1, $8, $8)`,
			p.id, seedProvider, set.cycles[i], p.status, p.failure, p.message, p.railRef, at); err != nil {
			return fmt.Errorf("seed payout %s: %w", p.id, err)
		}
		if _, err := db.Exec(ctx, `insert into payout.status_history (payout_id, seq, status, at) values ($1, 1, $2, $3)`, p.id, p.status, at); err != nil {
			return fmt.Errorf("seed payout %s: %w", p.id, err)
		}
	}
	for _, q := range []struct {
		what, sql string
		args      []any
	}{
		{"rail amount flag", `insert into payout.rail_amount_flags (payout_id, attempt, rail, rail_amount, rail_currency, flagged_at)
			values ($1, 1, 'alipay', $2, 'CNY', $3)`, []any{set.mismatch, seedRailAmount, at}},
		{"bank transfer", `insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount, creditor_name,
				creditor_account, creditor_agent, state, queued_at, updated_at)
			values ($1, $2, $3, 'CNY', 600, 'Rig HW', '6222000011110001', 'ICBKCNBJ', 'review', $4, $4)`, []any{set.transfer, set.e2e, seedProvider, at}},
		{"bank transfer review", `insert into payout.bank_transfer_reviews (reference, cause, note, since)
			values ($1, 'amount_mismatch', 'booked at 612.34 CNY after the restore', $2)`, []any{set.transfer, at}},
	} {
		if _, err := db.Exec(ctx, q.sql, q.args...); err != nil {
			return fmt.Errorf("seed %s: %w", q.what, err)
		}
	}
	return nil
}

// seedReconciliation imports a USD statement whose one line no movement
// matches (a bank fee), reconciles USD and writes the line off with
// ResolveReconciliationItems's valid body. It returns the run's id and the
// resolution's.
func seedReconciliation() (string, string, error) {
	res := send(http.MethodPost, "/v1/bank-statements", tokens[auth.RoleFinance], []byte(`{"statement_id":"st-resolve","currency":"USD","account":"US-CLIENT-H","format":"csv",`+
		`"content":"date,reference,amount,balance\n2026-11-19,FEE-H,-5.00,95.00\n"}`))
	if res.code != http.StatusOK {
		return "", "", fmt.Errorf("seed statement: HTTP %d %s", res.code, res.raw)
	}
	// Resolved now, while the run is the latest: RunReconciliation's body
	// of no currency runs USD too, and only a replay answers 200 after. The
	// stack's settlement backfills the daily reconciliation at its start
	// (a schedule created after 06:00 runs today's at once), which can take
	// the statement between the run and the resolution: run again then.
	var id string
	var res2 answer
	var resolved struct {
		Resolution struct {
			ResolutionID string `json:"resolution_id"`
		} `json:"resolution"`
	}
	for attempt := 0; ; attempt++ {
		res = send(http.MethodPost, "/v1/reconciliations", tokens[auth.RoleFinance], []byte(`{"currency":"USD"}`))
		var out struct {
			Reconciliations []struct {
				ReconciliationID string `json:"reconciliation_id"`
			} `json:"reconciliations"`
		}
		if err := json.Unmarshal(res.raw, &out); err != nil || res.code != http.StatusOK || len(out.Reconciliations) != 1 {
			return "", "", fmt.Errorf("seed reconciliation: HTTP %d %s", res.code, res.raw)
		}
		id = out.Reconciliations[0].ReconciliationID
		r := routeNamed("ResolveReconciliationItems")
		res2 = send(r.method, r.url(id), tokens[r.role], []byte(r.body))
		if res2.code == http.StatusBadRequest && strings.Contains(string(res2.raw), "is not the latest run") && attempt < 5 {
			continue
		}
		break
	}
	if err := json.Unmarshal(res2.raw, &resolved); err != nil || res2.code != http.StatusOK || resolved.Resolution.ResolutionID == "" {
		return "", "", fmt.Errorf("seed resolution: HTTP %d %s", res2.code, res2.raw)
	}
	return id, resolved.Resolution.ResolutionID, nil
}

// configureAlipay turns the Alipay rail on for the stack with keys
// generated into dir: top-up orders are signed locally (the gateway, never
// reached by these tests, is a closed port).
func configureAlipay(dir string) error {
	app, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	platform, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&platform.PublicKey)
	if err != nil {
		return err
	}
	priv, pubFile := filepath.Join(dir, "alipay_app_private.pem"), filepath.Join(dir, "alipay_public.pem")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(app)}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	for k, v := range map[string]string{"GPUBILL_ALIPAY_APP_ID": "2021000000000001", "GPUBILL_ALIPAY_PRIVATE_KEY_FILE": priv,
		"GPUBILL_ALIPAY_PUBLIC_KEY_FILE": pubFile, "GPUBILL_ALIPAY_GATEWAY_URL": "http://127.0.0.1:1/gateway.do",
		"GPUBILL_ALIPAY_NOTIFY_URL": "http://127.0.0.1:1/v1/rails/alipay/notify"} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return nil
}

var txSeq int

// newTransaction posts a manual transaction (to reverse) and returns its id.
func newTransaction() (string, error) {
	txSeq++
	body := fmt.Sprintf(`{"idempotency_key":"to-reverse-%d","description":"to reverse","postings":[`+
		`{"account":"bank:client","direction":"debit","amount":"1.00","currency":"CNY"},{"account":"renter:r-001:wallet","direction":"credit","amount":"1.00","currency":"CNY"}]}`, txSeq)
	res := send(http.MethodPost, "/v1/transactions", tokens[auth.RoleFinance], []byte(body))
	var tx struct {
		TransactionID string `json:"transaction_id"`
	}
	if err := json.Unmarshal(res.raw, &tx); err != nil || res.code != http.StatusOK || tx.TransactionID == "" {
		return "", fmt.Errorf("transaction to reverse: HTTP %d %s", res.code, res.raw)
	}
	return tx.TransactionID, nil
}

// answer is one HTTP answer.
type answer struct {
	code   int
	raw    []byte
	header http.Header
	status struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Type            string `json:"@type"`
			RequestID       string `json:"request_id"`
			FieldViolations []struct {
				Field       string `json:"field"`
				Description string `json:"description"`
			} `json:"field_violations"`
		} `json:"details"`
	}
}

// fields lists the fields the answer's BadRequest details name.
func (a answer) fields() []string {
	var out []string
	for _, d := range a.status.Details {
		for _, v := range d.FieldViolations {
			out = append(out, v.Field)
		}
	}
	return out
}

// requestID is the request id in the error body's RequestInfo.
func (a answer) requestID() string {
	for _, d := range a.status.Details {
		if d.RequestID != "" {
			return d.RequestID
		}
	}
	return ""
}

var client = &http.Client{Timeout: 30 * time.Second}

func send(method, path, token string, body []byte) answer {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		panic(fmt.Sprintf("%s %s: %v", method, path, err))
	}
	defer resp.Body.Close()
	a := answer{code: resp.StatusCode, header: resp.Header}
	a.raw, err = io.ReadAll(resp.Body)
	if err != nil {
		panic(fmt.Sprintf("%s %s: body: %v", method, path, err))
	}
	if json.Unmarshal(a.raw, &a.status) != nil {
		a.status.Code, a.status.Message, a.status.Details = 0, "", nil // not a JSON status: the tests read raw
	}
	return a
}

// syncBuffer is a log sink tests read while the stack writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}
