package hostile

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/auth"
)

// payoutWrite is one of payout's write routes with a body it
// takes, the roles it refuses and, for a route on an id, an id no one has.
type payoutWrite struct {
	name, method, path, body string
	bad                      string   // a well-formed body the route's validation refuses
	bads                     []string // more such bodies (each a 400)
	finance                  bool     // finance and admin only: a provider is refused
	missing                  string   // path of a payout or webhook that does not exist ("": the route names a provider)
	bodiless                 bool     // the rule takes no body (DELETE): one sent is not read
	reason                   bool     // the body's reason is kept with the payout: bounded
	// outside are paths naming the route's id outside its grammar (a
	// number's other spellings): each a 400, never the id it parses to.
	outside []string
	// unknown are paths naming an id in the grammar no one has: each a 404
	// (for a route whose ids are not words, missing's are).
	unknown []string
	// seeded: path names what main_test.go seeded for this one-time
	// write (beside missing): its valid body is taken, and taken again
	// answers the same.
	seeded bool
}

func payoutWrites() []payoutWrite {
	rotate, redeliver, replay := routeNamed("RotateWebhookSecret"), routeNamed("RedeliverWebhookDelivery"), routeNamed("ReplayDeadLetter")
	return []payoutWrite{
		{name: "PutPayoutMethod", method: "PUT", path: "/v1/providers/p-001/payout-method", body: routeNamed("PutPayoutMethod").body,
			bad: `{"type":"bank","account_name":"","account_number":"12"}`},
		{name: "PutKyc", method: "PUT", path: "/v1/providers/p-001/kyc", body: `{"status":"pending","reference":"kyc-h9"}`, bad: `{"status":"approved"}`},
		{name: "CreateWebhook", method: "POST", path: "/v1/providers/p-001/webhooks", body: routeNamed("CreateWebhook").body,
			bad: `{"url":"http://127.0.0.1:9/x","secret":"short"}`},
		{name: "RotateWebhookSecret", method: "POST", path: rotate.url(rotate.arg), body: rotate.body, bad: `{"secret":"short","grace_period":"-1s"}`,
			missing: "/v1/providers/p-001/webhooks/wh-nobody:rotate-secret"},
		{name: "CancelPayout", method: "POST", path: "/v1/payouts/" + seedCancel + ":cancel", body: `{"reason":"duplicate"}`, finance: true,
			missing: "/v1/payouts/po-nobody:cancel", reason: true, seeded: true},
		{name: "RetryPayout", method: "POST", path: "/v1/payouts/" + seedRetry + ":retry", body: `{"reason":"new account"}`, finance: true,
			missing: "/v1/payouts/po-nobody:retry", reason: true, seeded: true},
		{name: "ResolvePayoutAmountMismatch", method: "POST", path: "/v1/payouts/" + seedMismatch + ":resolve-amount-mismatch",
			body: routeNamed("ResolvePayoutAmountMismatch").body, bad: `{"rail_amount":"","reason":" "}`, finance: true,
			missing: "/v1/payouts/po-nobody:resolve-amount-mismatch", reason: true, seeded: true},
		{name: "SettlePayoutOutside", method: "POST", path: "/v1/payouts/" + seedSettle + ":settle-outside", body: routeNamed("SettlePayoutOutside").body,
			bad: `{"transaction_id":"tx-1","reason":"paid"}`, finance: true, missing: "/v1/payouts/po-nobody:settle-outside", reason: true, seeded: true,
			bads: []string{
				// The seeded entry paying it named twice, the second
				// upper-cased: the same transaction once canonical (taken
				// twice, a 409 against the claim of one).
				`{"transaction_ids":["` + seededSettleTx + `","` + strings.ToUpper(seededSettleTx) + `"],"reason":"paid"}`,
				`{"transaction_id":"00000000-0000-4000-8000-000000000000","transaction_ids":["00000000-0000-4000-8000-00000000000b"],"reason":"paid"}`,
				`{"transaction_ids":["00000000-0000-4000-8000-00000000000b","tx-1"],"reason":"paid"}`,
				`{"transaction_ids":[""],"reason":"paid"}`,
				`{"transaction_ids":[` + strings.Repeat(`"00000000-0000-4000-8000-00000000000b",`, 20) + `"00000000-0000-4000-8000-00000000000c"],"reason":"paid"}`,
			}},
		{name: "ResolveBankTransfer", method: "POST", path: "/v1/bank-transfers/" + seedE2E + ":resolve", body: routeNamed("ResolveBankTransfer").body,
			bad: `{"resolution":"refund","reason":""}`, finance: true, missing: "/v1/bank-transfers/E2E-nobody:resolve", reason: true, seeded: true},
		{name: "ReleaseBankFileRestoreHold", method: "POST", path: "/v1/bank-files:release-restore-hold", body: `{}`, finance: true},
		{name: "DeleteWebhook", method: "DELETE", path: "/v1/providers/p-001/webhooks/wh-nobody", body: `{}`, bodiless: true,
			missing: "/v1/providers/p-001/webhooks/wh-nobody"},
		{name: "RedeliverWebhookDelivery", method: "POST", path: redeliver.url(redeliver.arg), body: `{}`,
			missing: "/v1/providers/p-001/webhooks/wh-nobody/deliveries/1:redeliver",
			outside: []string{redeliver.url("+" + redeliver.arg), redeliver.url("0" + redeliver.arg), redeliver.url("-0" + redeliver.arg)}},
		{name: "HoldProviderPayouts", method: "PUT", path: "/v1/providers/p-001/payout-hold", body: `{"reason":"dispute"}`, finance: true,
			reason: true},
		{name: "UpdatePayoutSettings", method: "PATCH", path: "/v1/payout-settings", body: routeNamed("UpdatePayoutSettings").body, finance: true,
			bad: `{"minimums":{"CNY":"-1","XXX":"1"},"webhook_rotation_grace":"1y"}`},
		// Not payout's, but finance's alone on an id as these are.
		{name: "ResolveReconciliationItems", method: "POST", path: "/v1/reconciliations/rec-nobody/resolutions", body: routeNamed("ResolveReconciliationItems").body,
			bad: `{"action":"merge","lines":[],"reason":" "}`, finance: true, missing: "/v1/reconciliations/rec-nobody/resolutions"},
		// Ops', finance's and admin's: "<service>-<number>", written one way.
		{name: "ReplayDeadLetter", method: "POST", path: replay.url(replay.arg), body: `{}`, finance: true,
			unknown: []string{replay.url("pricing-999999"), replay.url("ledger-999999")},
			outside: []string{replay.url(strings.Replace(replay.arg, "-", "-+", 1)), replay.url(strings.Replace(replay.arg, "-", "-0", 1)),
				replay.url(strings.Replace(replay.arg, "-", "-00000000000000000000", 1)), replay.url(replay.arg + " "), replay.url(" " + replay.arg),
				replay.url("pricing-0"), replay.url("pricing--1"), replay.url("pricing-nobody"), replay.url("nobody-1"), replay.url("PRICING-1"),
				replay.url("pricing-" + strings.Repeat("9", 300)), replay.url(strings.Repeat("n", 300)), replay.url("pricing-1\x00")}},
	}
}

// internals are words of what a client must never read: database errors,
// Go panics and stacks, file paths.
var internals = regexp.MustCompile(`(?i)SQLSTATE|pgx|pgconn|panic|goroutine|runtime error|nil pointer|\.go:\d|/work/|duplicate key|violates`)

// TestPayoutWritesRefuseHostileInput sends each payout write route malformed
// JSON, a body over 1 MiB, ids that are bad or nobody's, and callers of the
// wrong role or none. Each is a 4xx of its kind with the gRPC status JSON
// and the request id, never a 5xx, and no answer tells internals; the
// valid body (where the route names no id nobody has, or a seeded one) is
// taken, and sent again answers the same. A dead letter's id is read as it
// is written: "pricing-+1" and "pricing-01" replayed pricing-1.
func TestPayoutWritesRefuseHostileInput(t *testing.T) {
	other, err := auth.Issue([]byte(secret), auth.RoleProvider, "p-002", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	renter := tokens[auth.RoleRenter]
	huge := append(append([]byte(`{"reason":"`), bytes.Repeat([]byte("x"), bodyBytesMax)...), `"}`...)
	for _, r := range payoutWrites() {
		t.Run(r.name, func(t *testing.T) {
			type probe struct {
				what, method, path, token string
				body                      []byte
				want                      int
			}
			var probes []probe
			if !r.bodiless {
				probes = append(probes,
					probe{"truncated JSON", r.method, r.path, tokens[auth.RoleFinance], []byte(r.body[:len(r.body)/2]), http.StatusBadRequest},
					probe{"a JSON array", r.method, r.path, tokens[auth.RoleFinance], []byte(`[1,2]`), http.StatusBadRequest},
					probe{"not JSON", r.method, r.path, tokens[auth.RoleFinance], []byte(`reason=dispute`), http.StatusBadRequest},
					probe{"a body over 1 MiB", r.method, r.path, tokens[auth.RoleFinance], huge, http.StatusRequestEntityTooLarge})
			}
			probes = append(probes, []probe{
				{"no token", r.method, r.path, "", []byte(r.body), http.StatusUnauthorized},
				{"a forged token", r.method, r.path, tokens[auth.RoleFinance][:len(tokens[auth.RoleFinance])-4] + "AAAA", []byte(r.body), http.StatusUnauthorized},
				{"a renter", r.method, r.path, renter, []byte(r.body), http.StatusForbidden},
				{"another provider", r.method, r.path, other, []byte(r.body), http.StatusForbidden},
			}...)
			if r.missing == "" || r.seeded { // the handler runs: a valid body is taken
				probes = append(probes, probe{"the valid body", r.method, r.path, tokens[auth.RoleFinance], []byte(r.body), http.StatusOK},
					probe{"the valid body again", r.method, r.path, tokens[auth.RoleFinance], []byte(r.body), http.StatusOK})
			}
			if r.bad != "" {
				probes = append(probes, probe{"a body the route's checks refuse", r.method, r.path, tokens[auth.RoleFinance], []byte(r.bad), http.StatusBadRequest})
			}
			for i, b := range r.bads {
				probes = append(probes, probe{fmt.Sprintf("a body the route's checks refuse (%d)", i), r.method, r.path, tokens[auth.RoleFinance], []byte(b), http.StatusBadRequest})
			}
			if r.finance {
				probes = append(probes, probe{"the provider itself", r.method, r.path, tokens[auth.RoleProvider], []byte(r.body), http.StatusForbidden})
			}
			if r.missing != "" {
				probes = append(probes,
					probe{"an id nobody has", r.method, r.missing, tokens[auth.RoleFinance], []byte(r.body), http.StatusNotFound},
					probe{"an id of 300 characters", r.method, strings.Replace(r.missing, "nobody", strings.Repeat("n", 300), 1), tokens[auth.RoleFinance], []byte(r.body), http.StatusNotFound},
					probe{"an id with a NUL byte", r.method, strings.Replace(r.missing, "nobody", "no%00body", 1), tokens[auth.RoleFinance], []byte(r.body), http.StatusBadRequest})
				// An unknown field is ignored (DEVELOPERS.md): the answer is
				// the valid body's.
				probes = append(probes, probe{"an unknown field", r.method, r.missing, tokens[auth.RoleFinance],
					mutate(t, r.body, "zz_unknown", map[string]any{"a": []any{1}}), http.StatusNotFound})
			}
			if strings.Contains(r.path, "/p-001/") {
				probes = append(probes,
					probe{"a provider id with a NUL byte", r.method, strings.Replace(r.path, "p-001", "p-0%0001", 1), tokens[auth.RoleFinance], []byte(r.body), http.StatusBadRequest},
					probe{"a provider id of invalid UTF-8", r.method, strings.Replace(r.path, "p-001", "p-%ff01", 1), tokens[auth.RoleFinance], []byte(r.body), http.StatusBadRequest},
					// Outside the id grammar: stored under it, it reached no
					// provider ("p-001 " held no one: p-001 was paid during
					// its dispute) and answered 200.
					probe{"a provider id with a trailing space", r.method, strings.Replace(r.path, "p-001", "p-001%20", 1), tokens[auth.RoleFinance], []byte(r.body), http.StatusBadRequest},
					probe{"a provider id of 300 characters", r.method, strings.Replace(r.path, "p-001", strings.Repeat("p", 300), 1), tokens[auth.RoleFinance], []byte(r.body), http.StatusBadRequest})
			}
			if r.reason {
				// Kept in the payout's history and shown to the provider
				// (a hold's): a reason of ~1 MiB was stored and served on
				// every page of the provider's payouts.
				probes = append(probes, probe{"a reason over 500 bytes", r.method, r.path, tokens[auth.RoleFinance],
					mutate(t, r.body, "reason", strings.Repeat("r", 501)), http.StatusBadRequest})
			}
			for _, path := range r.unknown {
				probes = append(probes, probe{"an id no one has: " + path, r.method, path, tokens[auth.RoleFinance], []byte(r.body), http.StatusNotFound})
			}
			for _, path := range r.outside {
				probes = append(probes, probe{"an id outside the grammar: " + path, r.method, path, tokens[auth.RoleFinance], []byte(r.body), http.StatusBadRequest})
			}
			for _, p := range probes {
				a := send(p.method, p.path, p.token, p.body)
				switch {
				case a.code != p.want:
					t.Errorf("%s: HTTP %d, want %d: %.300s", p.what, a.code, p.want, a.raw)
				case a.header.Get("X-Request-Id") == "" || a.code >= 400 && a.requestID() != a.header.Get("X-Request-Id"):
					t.Errorf("%s: HTTP %d without the request id in body and header: %.300s", p.what, a.code, a.raw)
				case internals.Match(a.raw):
					t.Errorf("%s: HTTP %d tells internals: %.300s", p.what, a.code, a.raw)
				}
			}
		})
	}
}

// TestOneTimeWritesApplyOnce sends each one-time write on payouts and bank
// transfers (cancel, retry, the two resolutions, the restore hold's
// release) several times at once, as clients retrying after a lost answer
// do, on payouts of its own: every answer is a 200, and the write is
// applied once, as the tables say (one status change, one new attempt,
// one resolution note, one review resolved, one hold released).
func TestOneTimeWritesApplyOnce(t *testing.T) {
	const sends = 4
	ctx := context.Background()
	db, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	set := oneTimeSet{"po-hw2-cancel", "po-hw2-retry", "po-hw2-mismatch", "po-hw2-bank", "E2E-HW-2",
		[4]string{"cyc-20260630", "cyc-20260814", "cyc-20260928", "cyc-20261112"}}
	if err := seedPayouts(ctx, db, set); err != nil {
		t.Fatal(err)
	}
	if err := openRestoreHold(ctx, db); err != nil {
		t.Fatal(err)
	}
	writes := []struct{ name, path, body string }{
		{"CancelPayout", "/v1/payouts/" + set.cancel + ":cancel", `{"reason":"duplicate"}`},
		{"RetryPayout", "/v1/payouts/" + set.retry + ":retry", `{"reason":"new account"}`},
		{"ResolvePayoutAmountMismatch", "/v1/payouts/" + set.mismatch + ":resolve-amount-mismatch", routeNamed("ResolvePayoutAmountMismatch").body},
		{"ResolveBankTransfer", "/v1/bank-transfers/" + set.e2e + ":resolve", routeNamed("ResolveBankTransfer").body},
		{"ReleaseBankFileRestoreHold", "/v1/bank-files:release-restore-hold", `{}`},
	}
	for _, w := range writes {
		answers := make([]answer, sends)
		var wg sync.WaitGroup
		for i := range sends {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = send(http.MethodPost, w.path, tokens[auth.RoleFinance], []byte(w.body))
			}()
		}
		wg.Wait()
		for i, a := range answers {
			if a.code != http.StatusOK {
				t.Errorf("%s, send %d of %d: HTTP %d: %.300s", w.name, i+1, sends, a.code, a.raw)
			}
		}
	}
	// Each count is what one application leaves.
	for _, c := range []struct {
		what, sql string
		args      []any
		want      int
	}{
		{"cancel: canceled once", `select count(*) from payout.status_history where payout_id = $1 and status = 'canceled'`, []any{set.cancel}, 1},
		{"retry: one new attempt", `select count(*) from payout.status_history where payout_id = $1 and note like 'retry (attempt%'`, []any{set.retry}, 1},
		{"retry: attempt 2", `select attempt from payout.payouts where payout_id = $1`, []any{set.retry}, 2},
		{"resolution noted once", `select count(*) from payout.status_history where payout_id = $1 and note like 'rail_amount_mismatch resolved by%'`, []any{set.mismatch}, 1},
		{"review resolved once", `select count(*) from payout.bank_transfer_reviews where reference = $1 and resolution = 'paid'`, []any{set.transfer}, 1},
		{"transfer booked", `select count(*) from payout.bank_transfers where reference = $1 and state = 'booked'`, []any{set.transfer}, 1},
		{"no hold open", `select count(*) from payout.bank_file_holds where released_at is null`, nil, 0},
	} {
		var got int
		if err := db.QueryRow(ctx, c.sql, c.args...).Scan(&got); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
}
