package ledger_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
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
		{"renter's own charges", r1, "/v1/transactions?account=renter:r-1:wallet", 200, `"renter:r-1:wallet"`},
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
	TransactionID    string            `json:"transaction_id"`
	IdempotencyKey   string            `json:"idempotency_key"`
	Description      string            `json:"description"`
	Metadata         map[string]string `json:"metadata"`
	Postings         []posting         `json:"postings"`
	Hash             string            `json:"hash"`
	PostingsWithheld *bool             `json:"postings_withheld"`
}

type posting struct{ Account, Direction, Amount, Currency string }

// TestRESTPartiesSeeOnlyTheirOwnPostings: a provider or renter reading a
// transaction that moves other accounts too is answered only the postings
// on its own accounts. Finance's refund of r-1's money to r-2 showed r-1
// r-2's wallet, the amount and finance's text naming r-2; a charge showed
// the provider the renter's wallet and the renter in its metadata. The
// entry's description, metadata and idempotency key (written by finance or
// the posting service about the whole entry, free to name any party) and
// its hash (a commitment to the withheld postings) are withheld with them,
// and postings_withheld says so. Finance and auditors read it whole.
func TestRESTPartiesSeeOnlyTheirOwnPostings(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	token := func(role, sub string) restClient {
		return restClient{t: t, base: base, token: testkit.Token(t, secret, role, sub, time.Hour)}
	}
	fin := token(auth.RoleFinance, "")
	post := func(path, body string) string {
		code, out := fin.do("POST", path, body)
		var tx partyTx
		if err := json.Unmarshal([]byte(out), &tx); code != 200 || err != nil || tx.TransactionID == "" {
			t.Fatalf("POST %s: %d %s (%v)", path, code, out, err)
		}
		return tx.TransactionID
	}
	post("/v1/deposits", `{"renter_id":"r-1","amount":"50.00","currency":"CNY","external_ref":"dep-r-1"}`)
	refund := post("/v1/transactions", `{"idempotency_key":"refund-r-1-to-r-2","description":"r-1 overpaid; refunded to r-2 (FIN-9)",
		"metadata":{"ticket":"FIN-9","beneficiary":"r-2"},"postings":[
		{"account":"renter:r-1:wallet","direction":"debit","amount":"12.50","currency":"CNY"},
		{"account":"renter:r-2:wallet","direction":"credit","amount":"12.50","currency":"CNY"}]}`)
	charge := post("/v1/transactions", `{"idempotency_key":"charge-l-1","metadata":{"renter_id":"r-1","lease_id":"l-1"},"postings":[
		{"account":"renter:r-1:wallet","direction":"debit","amount":"7.25","currency":"CNY"},
		{"account":"provider:p-1:pending:cyc-20261112","direction":"credit","amount":"7.25","currency":"CNY"}]}`)
	chainAll(t, f) // every entry hashed: a withheld hash is not one not yet made (one pass may stop short of a transaction still committing)
	r1, r2, p1 := token(auth.RoleRenter, "r-1"), token(auth.RoleRenter, "r-2"), token(auth.RoleProvider, "p-1")
	r1Refund := posting{"renter:r-1:wallet", "debit", "12.50", "CNY"}
	r2Refund := posting{"renter:r-2:wallet", "credit", "12.50", "CNY"}
	r1Charge := posting{"renter:r-1:wallet", "debit", "7.25", "CNY"}
	p1Charge := posting{"provider:p-1:pending:cyc-20261112", "credit", "7.25", "CNY"}

	one := func(t *testing.T, c restClient, path string) (partyTx, string) {
		c.t = t
		code, body := c.do("GET", path, "")
		var tx partyTx
		if err := json.Unmarshal([]byte(body), &tx); code != 200 || err != nil {
			t.Fatalf("GET %s: %d %s (%v)", path, code, body, err)
		}
		return tx, body
	}
	inList := func(t *testing.T, c restClient, path, id string) (partyTx, string) {
		c.t = t
		code, body := c.do("GET", path, "")
		var page struct{ Transactions []json.RawMessage }
		if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil {
			t.Fatalf("GET %s: %d %s (%v)", path, code, body, err)
		}
		for _, raw := range page.Transactions {
			var tx partyTx
			if err := json.Unmarshal(raw, &tx); err != nil {
				t.Fatal(err)
			}
			if tx.TransactionID == id {
				return tx, string(raw)
			}
		}
		t.Fatalf("GET %s: %s holds no %s", path, body, id)
		return partyTx{}, ""
	}
	tests := []struct {
		name     string
		read     func(t *testing.T) (partyTx, string)
		want     []posting
		notNamed []string // in no byte of the answer
	}{
		{"the refund to its payer", func(t *testing.T) (partyTx, string) { return one(t, r1, "/v1/transactions/"+refund) },
			[]posting{r1Refund}, []string{"r-2", "FIN-9"}},
		{"the refund in its payer's listing", func(t *testing.T) (partyTx, string) {
			return inList(t, r1, "/v1/transactions?account=renter:r-1:wallet", refund)
		}, []posting{r1Refund}, []string{"r-2", "FIN-9"}},
		{"the refund to its payee", func(t *testing.T) (partyTx, string) { return one(t, r2, "/v1/transactions/"+refund) },
			[]posting{r2Refund}, []string{"r-1", "FIN-9"}},
		{"the charge to its provider", func(t *testing.T) (partyTx, string) { return one(t, p1, "/v1/transactions/"+charge) },
			[]posting{p1Charge}, []string{"r-1", "l-1"}},
		{"the charge in its provider's listing", func(t *testing.T) (partyTx, string) {
			return inList(t, p1, "/v1/transactions?account=provider:p-1:pending:cyc-20261112", charge)
		}, []posting{p1Charge}, []string{"r-1", "l-1"}},
		{"the charge to its renter", func(t *testing.T) (partyTx, string) { return one(t, r1, "/v1/transactions/"+charge) },
			[]posting{r1Charge}, []string{"p-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, body := tt.read(t)
			if !slices.Equal(tx.Postings, tt.want) || tx.PostingsWithheld == nil || !*tx.PostingsWithheld {
				t.Errorf("postings %v, postings_withheld %v; want %v, true", tx.Postings, tx.PostingsWithheld, tt.want)
			}
			if tx.Description != "" || len(tx.Metadata) != 0 || tx.IdempotencyKey != "" || tx.Hash != "" {
				t.Errorf("description %q, metadata %v, idempotency key %q, hash %q; want all withheld", tx.Description, tx.Metadata, tx.IdempotencyKey, tx.Hash)
			}
			for _, s := range tt.notNamed {
				if strings.Contains(body, s) {
					t.Errorf("answer names %s: %s", s, body)
				}
			}
		})
	}
	// A key is withheld, so a party may not look entries up by one: asked
	// for the refund's key on its own account, r-1 was answered the refund,
	// confirming a key it guessed (which may name another party).
	for _, q := range []string{"?account=renter:r-1:wallet&idempotency_keys=refund-r-1-to-r-2", "?account=renter:r-1:wallet&idempotency_keys=nobody"} {
		r1.t = t
		if code, body := r1.do("GET", "/v1/transactions"+q, ""); code != 403 || strings.Contains(body, refund) {
			t.Errorf("GET /v1/transactions%s as r-1: %d %s; want 403, the same for any key", q, code, body)
		}
	}
	// By ids, finance's and the services' alone: a party reads its entries
	// one at a time (GET /v1/transactions/{id}).
	for _, q := range []string{"?transaction_ids=" + refund, "?account=renter:r-1:wallet&transaction_ids=" + refund} {
		r1.t = t
		if code, body := r1.do("GET", "/v1/transactions"+q, ""); code != 403 || strings.Contains(body, "refund-r-1") {
			t.Errorf("GET /v1/transactions%s as r-1: %d %s; want 403", q, code, body)
		}
	}
	// Staff read the entry whole, hash and text included.
	for _, c := range []restClient{fin, token(auth.RoleAuditor, "")} {
		for _, id := range []string{refund, charge} {
			tx, body := one(t, c, "/v1/transactions/"+id)
			if len(tx.Postings) != 2 || tx.PostingsWithheld == nil || *tx.PostingsWithheld || tx.IdempotencyKey == "" || tx.Hash == "" || len(tx.Metadata) == 0 {
				t.Errorf("staff read of %s: %s; want both postings, key, metadata and hash, postings_withheld false", id, body)
			}
		}
	}
	if tx, _ := one(t, fin, "/v1/transactions/"+refund); !slices.Equal(tx.Postings, []posting{r1Refund, r2Refund}) || tx.Description == "" {
		t.Errorf("finance's read of the refund: %+v", tx)
	}
}

// TestStatementLinesCarryOnlyWhatTheProviderReads: a statement line of one
// entry carries the entry's description and renter_id only where its
// provider reads the entry whole (GET /v1/transactions/{id}: every posting
// on its own accounts), by the same rule. Finance's transfer from p-2 to p-1
// reached both statements with its text naming the renter of p-2's dispute
// ("dispute: renter r-secret of p-2 …", renter_id r-secret) while both
// providers' reads of the entry withheld it. Tagged with p-2's lease
// (metadata lease_id lease-2, renter_id r-secret, a GPU model and hours),
// the same transfer, and a goodwill credit from bank:operating, became a
// lease line of p-1's naming lease-2 and r-secret: only an entry of a
// charge's shape (the provider's own accounts and its renter's wallet)
// makes a lease line.
func TestStatementLinesCarryOnlyWhatTheProviderReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	const cyc, later = "cyc-20261112", "cyc-20261227"
	pending := func(p, cycle string) string { return "provider:" + p + ":pending:" + cycle }
	// lease: the metadata's lease_id ("": none), with a GPU model and hours.
	post := func(key, desc, renter, from, to, amount, lease string) {
		in := transfer(key, from, to, amount, "CNY")
		in.Description, in.Metadata = desc, map[string]string{"renter_id": renter}
		if lease != "" {
			in.Metadata["lease_id"], in.Metadata["gpu_model"], in.Metadata["gpu_hours"] = lease, "H100", "2"
		}
		if _, err := f.app.CreateTransaction(f.ctx, in); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
	post("c-1", "GPU hours", "r-1", "renter:r-1:wallet", pending("p-1", cyc), "10.00", "l-1")
	post("c-2", "GPU hours", "r-secret", "renter:r-secret:wallet", pending("p-2", cyc), "10.00", "lease-2")
	post("c-3", "GPU hours", "r-1", "renter:r-1:wallet", pending("p-1", later), "5.00", "l-1")
	const dispute = "dispute: renter r-secret of p-2 (lease-2) compensated; p-2 pays p-1 for the failover"
	post("dispute", dispute, "r-secret", pending("p-2", cyc), pending("p-1", cyc), "1.00", "")
	post("dispute-lease", dispute, "r-secret", pending("p-2", cyc), pending("p-1", cyc), "1.10", "lease-2")
	post("goodwill-lease", "goodwill for r-secret's lease-2 (FIN-8)", "r-secret", "bank:operating", pending("p-1", cyc), "0.60", "lease-2")
	post("moved", "p-1's late hours moved into "+cyc, "r-1", pending("p-1", later), pending("p-1", cyc), "2.50", "")
	post("refund", "r-1 refunded for an outage of r-2's lease", "r-1", pending("p-1", cyc), "renter:r-1:wallet", "0.75", "")
	post("goodwill", "goodwill from r-1 (FIN-7)", "r-1", "renter:r-1:wallet", pending("p-1", cyc), "0.40", "")

	type text struct{ Description, RenterID string }
	tests := []struct {
		give   string          // provider
		want   map[string]text // a line of one entry, by amount
		leases []string        // its lease lines: lease, renter, GPU model, hours, amount
	}{
		{"p-1", map[string]text{"1.00": {}, "1.10": {}, "0.60": {}, "2.50": {"p-1's late hours moved into " + cyc, "r-1"}, "-0.75": {}, "0.40": {}},
			[]string{"l-1 r-1 H100 2 10.00"}},
		{"p-2", map[string]text{"-1.00": {}, "-1.10": {}}, []string{"lease-2 r-secret H100 2 10.00"}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			c := restClient{t: t, base: base, token: testkit.Token(t, secret, auth.RoleProvider, tt.give, time.Hour)}
			ls, err := f.app.StatementLines(f.ctx, pending(tt.give, cyc), "CNY", nil)
			if err != nil {
				t.Fatal(err)
			}
			got, leases := map[string]text{}, []string(nil)
			for _, l := range ls {
				if l.GPUModel != "" && l.TransactionID != "" {
					t.Errorf("line %s of one entry names GPU model %s", l.TransactionID, l.GPUModel)
				}
				if l.TransactionID == "" {
					// A lease's line: its own renter, by design.
					leases = append(leases, fmt.Sprintf("%s %s %s %s %s", l.LeaseID, l.RenterID, l.GPUModel, l.GPUHours, l.Amount.StringFixed(2)))
					continue
				}
				amount := l.Amount.StringFixed(2)
				got[amount] = text{l.Description, l.RenterID}
				code, body := c.do("GET", "/v1/transactions/"+l.TransactionID, "")
				var tx partyTx
				if err := json.Unmarshal([]byte(body), &tx); code != 200 || err != nil {
					t.Fatalf("GET /v1/transactions/%s as %s: %d %s (%v)", l.TransactionID, tt.give, code, body, err)
				}
				if read := (text{tx.Description, tx.Metadata["renter_id"]}); read != got[amount] {
					t.Errorf("line %s carries %+v; %s reads the entry as %+v", amount, got[amount], tt.give, read)
				}
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("lines of one entry %+v, want %+v", got, tt.want)
			}
			if !slices.Equal(leases, tt.leases) {
				t.Errorf("lease lines %q, want %q", leases, tt.leases)
			}
		})
	}
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
