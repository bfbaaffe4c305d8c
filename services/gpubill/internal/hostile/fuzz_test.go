package hostile

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// One fuzz target per REST write decoder. Each sends its input to the route
// on the shared stack (the gateway's decoder, pkg/server's guards, the
// service's validation, PostgreSQL) and fails on any 5xx or a dropped
// connection. `make test` runs them over their committed seeds
// (testdata/fuzz/Fuzz<Route>: the valid bodies of every shape, and bad
// inputs of each kind); `go test -run '^$' -fuzz '^FuzzCreateQuote$'
// -fuzztime 60s ./internal/hostile` explores further.

func FuzzCreateProvider(f *testing.F)               { fuzzRoute(f, "CreateProvider") }
func FuzzUpdateProvider(f *testing.F)               { fuzzRoute(f, "UpdateProvider") }
func FuzzCreateRenter(f *testing.F)                 { fuzzRoute(f, "CreateRenter") }
func FuzzUpdateRenter(f *testing.F)                 { fuzzRoute(f, "UpdateRenter") }
func FuzzIngestUsageEvents(f *testing.F)            { fuzzRoute(f, "IngestUsageEvents") }
func FuzzCreateRateCard(f *testing.F)               { fuzzRoute(f, "CreateRateCard") }
func FuzzCreateQuote(f *testing.F)                  { fuzzRoute(f, "CreateQuote") }
func FuzzCreateDeposit(f *testing.F)                { fuzzRoute(f, "CreateDeposit") }
func FuzzCreateTransaction(f *testing.F)            { fuzzRoute(f, "CreateTransaction") }
func FuzzReverseTransaction(f *testing.F)           { fuzzRoute(f, "ReverseTransaction") }
func FuzzCloseLedgerCycle(f *testing.F)             { fuzzRoute(f, "CloseLedgerCycle") }
func FuzzImportBankStatement(f *testing.F)          { fuzzRoute(f, "ImportBankStatement") }
func FuzzIssueInvoices(f *testing.F)                { fuzzRoute(f, "IssueInvoices") }
func FuzzExplainCharges(f *testing.F)               { fuzzRoute(f, "ExplainCharges") }
func FuzzRunReconciliation(f *testing.F)            { fuzzRoute(f, "RunReconciliation") }
func FuzzPutPayoutMethod(f *testing.F)              { fuzzRoute(f, "PutPayoutMethod") }
func FuzzPutKyc(f *testing.F)                       { fuzzRoute(f, "PutKyc") }
func FuzzCloseSettlementCycle(f *testing.F)         { fuzzRoute(f, "CloseSettlementCycle") }
func FuzzHoldProvider(f *testing.F)                 { fuzzRoute(f, "HoldProvider") }
func FuzzReleaseProvider(f *testing.F)              { fuzzRoute(f, "ReleaseProvider") }
func FuzzComputeWithholding(f *testing.F)           { fuzzRoute(f, "ComputeWithholding") }
func FuzzQuoteWithholding(f *testing.F)             { fuzzRoute(f, "QuoteWithholding") }
func FuzzSetRuleSelection(f *testing.F)             { fuzzRoute(f, "SetRuleSelection") }
func FuzzRemitTax(f *testing.F)                     { fuzzRoute(f, "RemitTax") }
func FuzzCreateGpuModel(f *testing.F)               { fuzzRoute(f, "CreateGpuModel") }
func FuzzImportBankFile(f *testing.F)               { fuzzRoute(f, "ImportBankFile") }
func FuzzCreateWebhook(f *testing.F)                { fuzzRoute(f, "CreateWebhook") }
func FuzzRotateWebhookSecret(f *testing.F)          { fuzzRoute(f, "RotateWebhookSecret") }
func FuzzHoldProviderPayouts(f *testing.F)          { fuzzRoute(f, "HoldProviderPayouts") }
func FuzzUpdatePayoutSettings(f *testing.F)         { fuzzRoute(f, "UpdatePayoutSettings") }
func FuzzCreateTopUp(f *testing.F)                  { fuzzRoute(f, "CreateTopUp") }
func FuzzDeleteWebhook(f *testing.F)                { fuzzRoute(f, "DeleteWebhook") }
func FuzzRedeliverWebhookDelivery(f *testing.F)     { fuzzRoute(f, "RedeliverWebhookDelivery") }
func FuzzCancelPayout(f *testing.F)                 { fuzzRoute(f, "CancelPayout") }
func FuzzRetryPayout(f *testing.F)                  { fuzzRoute(f, "RetryPayout") }
func FuzzResolveReconciliationItems(f *testing.F)   { fuzzRoute(f, "ResolveReconciliationItems") }
func FuzzResolvePayoutAmountMismatch(f *testing.F)  { fuzzRoute(f, "ResolvePayoutAmountMismatch") }
func FuzzSettlePayoutOutside(f *testing.F)          { fuzzRoute(f, "SettlePayoutOutside") }
func FuzzResolveBankTransfer(f *testing.F)          { fuzzRoute(f, "ResolveBankTransfer") }
func FuzzReleaseBankFileRestoreHold(f *testing.F)   { fuzzRoute(f, "ReleaseBankFileRestoreHold") }
func FuzzReplayDeadLetter(f *testing.F)             { fuzzRoute(f, "ReplayDeadLetter") }
func FuzzVoidReconciliationResolution(f *testing.F) { fuzzRoute(f, "VoidReconciliationResolution") }

func routeNamed(name string) route {
	for _, r := range writeRoutes {
		if r.name == name {
			return r
		}
	}
	panic("no route " + name)
}

// fuzzRoute fuzzes the body, and the path parameter of a route that has one
// (a route without one ignores arg).
func fuzzRoute(f *testing.F, name string) {
	r := routeNamed(name)
	f.Fuzz(func(t *testing.T, arg string, body []byte) {
		if r.param == "" {
			arg = ""
		}
		a := send(r.method, r.url(arg), tokens[r.role], body)
		if a.code >= 500 {
			t.Fatalf("%s %s: HTTP %d for arg %q body %q: %s", r.method, r.url(arg), a.code, arg, body, a.raw)
		}
	})
}

// TestWriteFuzzSeeds checks that every route's seeds include valid bodies of
// each shape the route takes and that each valid seed is accepted, so the
// fuzzers start from inputs that reach the use cases, not only the decoder.
// GPUBILL_WRITE_FUZZ_SEEDS=1 (re)writes testdata/fuzz from seedsFor.
func TestWriteFuzzSeeds(t *testing.T) {
	write := os.Getenv("GPUBILL_WRITE_FUZZ_SEEDS") == "1"
	for _, r := range writeRoutes {
		dir := filepath.Join("testdata", "fuzz", "Fuzz"+r.name)
		seeds := seedsFor(t, r)
		if write {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, s := range seeds {
				b := fmt.Sprintf("go test fuzz v1\nstring(%s)\n[]byte(%s)\n", strconv.Quote(s.arg), strconv.Quote(string(s.body)))
				if err := os.WriteFile(filepath.Join(dir, s.name), []byte(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		valid := 0
		for _, s := range seeds {
			if !strings.HasPrefix(s.name, "valid-") {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, s.name)); err != nil {
				t.Errorf("%s: seed %s not committed (GPUBILL_WRITE_FUZZ_SEEDS=1)", r.name, s.name)
			}
			arg := s.arg
			if r.name == "ReverseTransaction" { // a transaction is reversed once
				var err error
				if arg, err = newTransaction(); err != nil {
					t.Fatal(err)
				}
			}
			body := freshen(t, s.body, "")
			if r.name == "SettlePayoutOutside" { // the ledger entry seeded for this stack
				body = mutate(t, string(body), "transaction_id", seededSettleTx)
			}
			a := send(r.method, r.url(arg), tokens[r.role], body)
			if a.code != http.StatusOK {
				t.Errorf("%s: valid seed %s: HTTP %d: %.300s", r.name, s.name, a.code, a.raw)
			}
			valid++
		}
		if valid == 0 {
			t.Errorf("%s: no valid seed", r.name)
		}
	}
}

type seed struct {
	name string
	arg  string
	body []byte
}

// seedsFor is route r's seed corpus: its valid body, the other valid shapes
// of shapes[r.name], and bad inputs of each kind.
func seedsFor(t *testing.T, r route) []seed {
	out := []seed{{"valid-base", r.arg, []byte(r.body)}}
	for i, b := range shapes[r.name] {
		out = append(out, seed{fmt.Sprintf("valid-shape-%d", i+1), r.arg, []byte(b)})
	}
	for i, b := range badInputs(t, r) {
		name := strings.NewReplacer(" ", "-", "(", "", ")", "", "[", "-", "]", "", ".", "-").Replace(fmt.Sprintf("bad-%02d-%s-%s", i, b.kind, b.field))
		out = append(out, seed{name, b.arg, b.body})
	}
	for _, d := range r.decimals {
		out = append(out, seed{"bad-long-decimal-" + strings.NewReplacer("[", "-", "]", "", ".", "-").Replace(d), r.arg,
			mutate(t, r.body, d, "1"+strings.Repeat("0", 100))})
	}
	for name, b := range map[string]string{"empty": "", "null": "null", "array": "[]", "truncated": r.body[:len(r.body)/2], "trailing": r.body + "{}"} {
		out = append(out, seed{"bad-" + name, r.arg, []byte(b)})
	}
	return out
}

// shapes are more valid bodies per route: every optional part present or
// absent, every value of each closed set.
var shapes = map[string][]string{
	"CreateProvider": {
		`{"provider_id":"p-h2","name":"Partner DC","tier":"partner","tax_profile":"enterprise","jurisdiction":"US","currency":"USD"}`,
		`{"provider_id":"p-h3","tier":"standard","tax_profile":"individual","jurisdiction":"CN"}`,
	},
	"UpdateProvider": {
		`{"tier":"partner"}`,
		`{"tax_profile":"enterprise","jurisdiction":"HK"}`,
		`{"pue":""}`,
	},
	"CreateRenter": {
		`{"renter_id":"r-h2","name":"Render Farm","currency":"USD"}`,
		`{"renter_id":"r-h3","currency":"ETH","credit_limit":"0.000000000000000001"}`,
		`{"renter_id":"r-h4","currency":"JPY","credit_limit":"5000"}`,
	},
	"UpdateRenter": {
		`{"credit_limit":"0"}`,
		`{"name":"Lab Z"}`,
		`{"currency":"CNY","credit_limit":"1000000"}`,
	},
	"IngestUsageEvents": {
		`{"events":[{"id":"evt-h2","lease_id":"lease-h2","provider_id":"p-001","renter_id":"r-001","gpu_model":"RTX_4090","gpu_count":1,"start_time":"2026-11-18T22:00:00+08:00","end_time":"2026-11-18T23:00:00.123456+08:00"}]}`,
		`{"events":[{"id":"evt-h3","lease_id":"lease-h3","provider_id":"p-001","renter_id":"r-001","gpu_model":"RTX_4090","gpu_count":64,"start_time":"2026-11-17T00:00:00Z","end_time":"2026-11-18T00:00:00Z","region":"cn-east","workload":"inference"},` +
			`{"id":"evt-h4","lease_id":"lease-h3","provider_id":"p-001","renter_id":"r-001","gpu_model":"RTX_4090","gpu_count":64,"start_time":"2026-11-18T00:00:00Z","end_time":"2026-11-18T00:00:00.000001Z"}]}`,
		`{"events":[]}`,
	},
	"CreateRateCard": {
		`{"currency":"USD","effective_from":"2025-05-01T00:00:00Z","gpu_prices":[{"gpu_model":"H100","hourly":"2.49"}]}`,
		// Bands in two zones that meet: night 23:00–07:00 Asia/Shanghai is
		// 15:00–23:00 UTC (peak to 18:00 UTC overlapped it: refused).
		`{"currency":"CNY","effective_from":"2025-05-01T00:00:00Z","gpu_prices":[{"gpu_model":"RTX_4090","hourly":"1.80"}],` +
			`"time_bands":[{"name":"peak","start":"09:00","end":"15:00","timezone":"UTC","multiplier":"1.25"},{"name":"night","start":"23:00","end":"07:00","timezone":"Asia/Shanghai","multiplier":"0.8"}]}`,
		`{"currency":"ETH","effective_from":"2025-05-01T00:00:00Z","gpu_prices":[{"gpu_model":"H100","hourly":"0.000712345678901234"}],"volume_tiers":[{"up_to_gpu_hours":"","discount":"0.05"}]}`,
	},
	"CreateQuote": {
		`{"gpu_model":"RTX_4090","gpu_count":1,"hours":"1","start_time":"2026-11-18T14:00:00Z","currency":"CNY"}`,
		`{"gpu_model":"RTX_4090","gpu_count":64,"hours":"720","start_time":"2026-11-18T23:30:00+08:00","currency":"CNY","provider_tier":"partner","tax_profile":"enterprise"}`,
		`{"gpu_model":"RTX_4090","gpu_count":8,"hours":"0.25","start_time":"2026-11-18T14:00:00Z","currency":"CNY","provider_tier":"standard","tax_profile":"individual","provider_pue":"1"}`,
	},
	"CreateDeposit": {
		`{"renter_id":"r-001","amount":"0.01","currency":"CNY","external_ref":"bank-h2"}`,
		`{"renter_id":"r-001","amount":"99999999.99","currency":"CNY","external_ref":"bank-h3"}`,
	},
	"CreateTransaction": {
		`{"idempotency_key":"tx-h2","description":"three legs","postings":[{"account":"bank:client","direction":"debit","amount":"3.00","currency":"CNY"},` +
			`{"account":"renter:r-001:wallet","direction":"credit","amount":"1.00","currency":"CNY"},{"account":"renter:r-001:wallet","direction":"credit","amount":"2.00","currency":"CNY"}]}`,
		`{"idempotency_key":"tx-h3","postings":[{"account":"renter:r-001:wallet","direction":"debit","amount":"0.50","currency":"CNY"},{"account":"bank:client","direction":"credit","amount":"0.50","currency":"CNY"}]}`,
	},
	"ReverseTransaction": {
		`{"idempotency_key":"rev-h2"}`,
	},
	"ImportBankStatement": {
		`{"statement_id":"st-h2","currency":"CNY","account":"CN-CLIENT-H","content":"date,reference,amount,balance\n2026-11-17,po-h1,-2.50,97.50\n2026-11-18,wx-h2,2.50,100.00\n"}`,
		`{"currency":"CNY","format":"camt053","content":"<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.053.001.02\"><BkToCstmrStmt><Stmt><Id>S-H3</Id>` +
			`<Acct><Id><IBAN>CN00CLIENTH</IBAN></Id><Ccy>CNY</Ccy></Acct>` +
			`<Bal><Tp><CdOrPrtry><Cd>OPBD</Cd></CdOrPrtry></Tp><Amt Ccy=\"CNY\">10.00</Amt><CdtDbtInd>CRDT</CdtDbtInd><Dt><Dt>2026-11-17</Dt></Dt></Bal>` +
			`<Bal><Tp><CdOrPrtry><Cd>CLBD</Cd></CdOrPrtry></Tp><Amt Ccy=\"CNY\">7.00</Amt><CdtDbtInd>CRDT</CdtDbtInd><Dt><DtTm>2026-11-17T18:00:00+08:00</DtTm></Dt></Bal>` +
			`<Ntry><Amt Ccy=\"CNY\">3.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts>BOOK</Sts><BookgDt><Dt>2026-11-17</Dt></BookgDt><AcctSvcrRef>B-1</AcctSvcrRef></Ntry>` +
			`</Stmt></BkToCstmrStmt></Document>"}`,
	},
	"RunReconciliation": {
		`{}`,
		`{"currency":"USD","summary_only":true,"idempotency_key":"rec-h2"}`,
	},
	"CloseLedgerCycle": {
		`{"cycle_id":"` + pastCycle + `"}`,
	},
	"PutPayoutMethod": {
		`{"type":"alipay","account_name":"Li Lei","alipay_id":"lilei@example.com"}`,
		`{"type":"wechat","account_name":"Han Meimei","wechat_openid":"o6_bmjrPTlm6_2sgVt7hMZOPfL2M"}`,
	},
	"CreateWebhook": {
		`{"url":"http://127.0.0.1:9/hooks/payouts?src=gpubill","secret":"0123456789abcdef0123456789abcdef"}`,
	},
	"RotateWebhookSecret": {
		`{"secret":"whsec-0000111122223333"}`,
		`{"secret":"whsec-4444555566667777","grace_period":"0s"}`,
	},
	"HoldProviderPayouts": {
		`{}`,
	},
	"UpdatePayoutSettings": {
		`{"minimums":{"USD":"25.00","CNY":""}}`,
		`{"webhook_rotation_grace":""}`,
	},
	"PutKyc": {
		`{"status":"pending"}`,
		`{"status":"rejected","reference":"kyc-h2"}`,
	},
	"CloseSettlementCycle": {
		`{}`,
	},
	"HoldProvider": {
		`{}`,
	},
	"ReleaseProvider": {
		`{}`,
	},
	"ComputeWithholding": {
		`{"provider_id":"p-001","cycle_id":"` + pastCycle + `","currency":"CNY","gross":"100.00","commission_rate":"0.20","idempotency_key":"wh-h2"}`,
		`{"provider_id":"p-001","cycle_id":"` + pastCycle + `","currency":"CNY","gross":"5000.00","commission":"1000.00","tax_profile":"enterprise","jurisdiction":"CN","rule_set":"cn_labour","idempotency_key":"wh-h3"}`,
	},
	"SetRuleSelection": {
		`{"provider_id":"p-001","rule_set":"flat20"}`,
		`{"jurisdiction":"US","rule_set":"flat20"}`,
	},
	"RemitTax": {
		`{"period":"2026-01"}`,
	},
}
