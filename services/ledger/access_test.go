package ledger_test

import (
	"encoding/json"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestRESTPartiesReadOwnAccounts: a renter reads its own wallet and the
// charges on it, a provider its own available and pending balances; neither
// reads anyone else's (DESIGN §7: 403 or 404).
func TestRESTPartiesReadOwnAccounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	token := func(role, sub string) restClient {
		tok, err := auth.Issue(secret, role, sub, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return restClient{t: t, base: base, token: tok}
	}
	fin := token(auth.RoleFinance, "")
	for _, r := range []string{"r-1", "r-2"} {
		if code, body := fin.do("POST", "/v1/deposits", `{"renter_id":"`+r+`","amount":"50.00","currency":"CNY","external_ref":"dep-`+r+`"}`); code != 200 {
			t.Fatalf("deposit %s: %d %s", r, code, body)
		}
	}
	var charge struct {
		TransactionID string `json:"transaction_id"`
	}
	for _, p := range []string{"p-1", "p-2"} {
		code, body := fin.do("POST", "/v1/transactions", `{"idempotency_key":"charge-`+p+`","postings":[
			{"account":"renter:r-1:wallet","direction":"debit","amount":"7.25","currency":"CNY"},
			{"account":"provider:`+p+`:pending:cyc-20261112","direction":"credit","amount":"7.25","currency":"CNY"}]}`)
		if code != 200 {
			t.Fatalf("charge %s: %d %s", p, code, body)
		}
		if p == "p-1" {
			if err := json.Unmarshal([]byte(body), &charge); err != nil {
				t.Fatalf("charge %s: %v", body, err)
			}
		}
	}
	r1, p1 := token(auth.RoleRenter, "r-1"), token(auth.RoleProvider, "p-1")

	tests := []struct {
		name     string
		c        restClient
		path     string
		wantCode int
		wantBody string // substring of the answer
	}{
		{"renter's own wallet", r1, "/v1/accounts/renter:r-1:wallet", 200, `"amount":"35.50"`},
		{"renter's own charges", r1, "/v1/transactions?account=renter:r-1:wallet", 200, `"provider:p-2:pending:cyc-20261112"`},
		{"renter's own charge by id", r1, "/v1/transactions/" + charge.TransactionID, 200, `"amount":"7.25"`},
		{"renter's own accounts", r1, "/v1/accounts?prefix=renter:r-1", 200, `"renter:r-1:wallet"`},
		{"another renter's wallet", r1, "/v1/accounts/renter:r-2:wallet", 403, ""},
		{"another renter's charges", r1, "/v1/transactions?account=renter:r-2:wallet", 403, ""},
		{"a renter lists every wallet", r1, "/v1/accounts?prefix=renter:", 403, ""},
		{"a renter reads the whole journal", r1, "/v1/transactions", 403, ""},
		{"a provider's account to a renter", r1, "/v1/accounts/provider:p-1:available", 403, ""},
		{"provider's own pending", p1, "/v1/accounts/provider:p-1:pending:cyc-20261112", 200, `"amount":"7.25"`},
		{"provider's own balances", p1, "/v1/accounts?prefix=provider:p-1", 200, `"provider:p-1:pending:cyc-20261112"`},
		{"provider's own charge by id", p1, "/v1/transactions/" + charge.TransactionID, 200, `"amount":"7.25"`},
		{"provider's own available (none yet)", p1, "/v1/accounts/provider:p-1:available", 404, ""},
		{"another provider's pending", p1, "/v1/accounts/provider:p-2:pending:cyc-20261112", 403, ""},
		{"prefix p-1 must not reach p-10", p1, "/v1/accounts?prefix=provider:p-", 403, ""},
		{"the renter's wallet to a provider", p1, "/v1/accounts/renter:r-1:wallet", 403, ""},
		{"another provider's charge by id", token(auth.RoleProvider, "p-3"), "/v1/transactions/" + charge.TransactionID, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.c.t = t
			code, body := tt.c.do("GET", tt.path, "")
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("GET %s: %d %s, want %d with %s", tt.path, code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
	// The listing answers only the provider's own accounts.
	if _, body := p1.do("GET", "/v1/accounts?prefix=provider:p-1", ""); strings.Contains(body, "p-2") {
		t.Fatalf("provider p-1's listing shows p-2: %s", body)
	}
}

// TestRESTAllowlist: GPUBILL_ALLOW_<ROLE> holds over REST, on the client's
// address as the gateway saw it; X-Forwarded-For is ignored unless the peer
// is a trusted proxy.
func TestRESTAllowlist(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	only := func(cidr string) auth.Allowlist {
		return auth.Allowlist{auth.RoleFinance: {netip.MustParsePrefix(cidr)}}
	}
	tests := []struct {
		name    string
		allow   auth.Allowlist
		proxies []netip.Prefix
		xff     string
		want    int
	}{
		{"finance from loopback, loopback allowed", only("127.0.0.0/8"), nil, "", 404},
		{"finance from loopback, only 10/8 allowed", only("10.0.0.0/8"), nil, "", 403},
		{"a forged X-Forwarded-For is ignored", only("10.0.0.0/8"), nil, "10.1.2.3", 403},
		{"a trusted proxy's X-Forwarded-For counts", only("10.0.0.0/8"), []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, "10.1.2.3", 404},
		{"behind a trusted proxy, an outside client", only("10.0.0.0/8"), []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, "10.1.2.3, 203.0.113.7", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, secret := startServer(t, f, func(o *server.Options) { o.Allow, o.TrustedProxies = tt.allow, tt.proxies })
			tok := testkit.Token(t, secret, auth.RoleFinance, "", time.Hour)
			c := restClient{t: t, base: base, token: tok, header: map[string]string{"X-Forwarded-For": tt.xff}}
			if code, body := c.do("GET", "/v1/accounts/renter:nobody:wallet", ""); code != tt.want {
				t.Fatalf("HTTP %d %s, want %d", code, body, tt.want)
			}
			// Auditors have no list: any address.
			atok := testkit.Token(t, secret, auth.RoleAuditor, "", time.Hour)
			if code, _ := (restClient{t: t, base: base, token: atok}).do("GET", "/v1/accounts/renter:nobody:wallet", ""); code != 404 {
				t.Fatalf("auditor: HTTP %d, want 404", code)
			}
		})
	}
}

// partyTx is a transaction as a party's answer carries it.
type partyTx struct {
	TransactionID string `json:"transaction_id"`
}

// requestID is the request id every error answer carries (its own each).
var requestID = regexp.MustCompile(`"request_id":"[0-9a-f]*"`)

// TestRESTAnotherPartysTransactionReadsAsMissing: GET /v1/transactions/{id}
// of another party's transaction answers, byte for byte, what a missing
// transaction answers ("transaction <id> not found" against "transaction
// <id>: not found" told a party which ids exist).
func TestRESTAnotherPartysTransactionReadsAsMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	fin := restClient{t: t, base: base, token: testkit.Token(t, secret, auth.RoleFinance, "", time.Hour)}
	code, body := fin.do("POST", "/v1/transactions", `{"idempotency_key":"charge-1","postings":[
		{"account":"renter:r-1:wallet","direction":"debit","amount":"7.25","currency":"CNY"},
		{"account":"provider:p-1:pending:cyc-20261112","direction":"credit","amount":"7.25","currency":"CNY"}]}`)
	var tx partyTx
	if err := json.Unmarshal([]byte(body), &tx); code != 200 || err != nil {
		t.Fatalf("charge: %d %s (%v)", code, body, err)
	}
	missing := "0193a3c2-5b1e-7c4d-9e2f-123456789abc"
	for _, c := range []restClient{
		{t: t, base: base, token: testkit.Token(t, secret, auth.RoleProvider, "p-2", time.Hour)},
		{t: t, base: base, token: testkit.Token(t, secret, auth.RoleRenter, "r-2", time.Hour)},
	} {
		for _, form := range []func(string) string{func(s string) string { return s }, strings.ToUpper} {
			theirs, theirsBody := c.do("GET", "/v1/transactions/"+form(tx.TransactionID), "")
			none, noneBody := c.do("GET", "/v1/transactions/"+form(missing), "")
			// Apart from the id asked for and the request's own id.
			theirsBody = requestID.ReplaceAllString(strings.ReplaceAll(theirsBody, tx.TransactionID, "<id>"), "")
			noneBody = requestID.ReplaceAllString(strings.ReplaceAll(noneBody, missing, "<id>"), "")
			if theirs != 404 || theirs != none || theirsBody != noneBody {
				t.Errorf("another party's %s: %d %s\nmissing %s: %d %s\nwant both 404, byte for byte", form(tx.TransactionID), theirs, theirsBody, form(missing), none, noneBody)
			}
		}
	}
	// What a missing transaction answers is what staff are told of one.
	if none, noneBody := fin.do("GET", "/v1/transactions/"+missing, ""); none != 404 || !strings.Contains(noneBody, "transaction "+missing+": not found") {
		t.Errorf("missing to finance: %d %s", none, noneBody)
	}
}
