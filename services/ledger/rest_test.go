package ledger_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

type restClient struct {
	t      *testing.T
	base   string
	token  string
	header map[string]string
}

func (c restClient) do(method, path, body string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: body: %v", method, path, err)
	}
	return resp.StatusCode, string(b)
}

func startServer(t *testing.T, f *fixture, opts ...func(*server.Options)) (string, []byte) {
	t.Helper()
	secret := []byte("ledger-rest-test-secret-0123456789abcdef")
	o := server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: secret,
		Log: slog.Default(), Services: []server.Service{f.svc}}
	for _, opt := range opts {
		opt(&o)
	}
	srv, err := server.Start(f.ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(f.ctx) })
	return "http://" + srv.HTTPAddr, secret
}

// financeREST is a fixture served over REST and a client with a finance token.
func financeREST(t *testing.T) (*fixture, restClient) {
	t.Helper()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	tok, err := auth.Issue(secret, auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return f, restClient{t: t, base: base, token: tok}
}

// Writes no answer could carry, or ids in another form than the journal's,
// were taken as given: a manual entry to a pending account of a cycle id
// that starts no cycle was posted (settlement never settled it, and the
// closed-cycle rule never saw it); one effective in year 10000 was posted
// and every read of it answered 500; a transaction id in upper case was
// 404, with two characters round it 500.
func TestRESTRefusesWhatNoCycleOrAnswerHolds(t *testing.T) {
	t.Parallel()
	f, c := financeREST(t)
	entry := func(key, account string) string {
		return `{"idempotency_key":"` + key + `","postings":[{"account":"renter:r-1:wallet","direction":"debit","amount":"5","currency":"CNY"},
			{"account":"` + account + `","direction":"credit","amount":"5","currency":"CNY"}]}`
	}
	code, body := c.do("POST", "/v1/transactions", entry("no-cycle", "provider:p-1:pending:cyc-20260102"))
	if code != 400 || !strings.Contains(body, "postings[1].account") || !strings.Contains(body, "2026-01-02 is in cyc-20260101") {
		t.Errorf("entry to a cycle id that starts no cycle: %d %s; want 400 naming postings[1].account and cyc-20260101", code, body)
	}
	eff := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	in := transfer("far", "renter:r-1:wallet", "provider:p-1:pending:cyc-20261112", "5", "CNY")
	in.EffectiveAt = &eff
	if _, err := f.app.CreateTransaction(f.ctx, in); err == nil || !strings.Contains(err.Error(), "effective_at") {
		t.Errorf("entry effective in year 10000: %v; want invalid effective_at", err)
	}

	code, body = c.do("POST", "/v1/transactions", entry("ok", "provider:p-1:pending:cyc-20261112"))
	var tx struct {
		TransactionID string `json:"transaction_id"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &tx) != nil || tx.TransactionID == "" {
		t.Fatalf("entry: %d %s", code, body)
	}
	for _, tt := range []struct {
		name, id string
		want     int
	}{
		{"upper case", strings.ToUpper(tx.TransactionID), 200},
		{"braces", "{" + tx.TransactionID + "}", 400},
		{"any two around", "x" + tx.TransactionID + "x", 400},
		{"urn", "urn:uuid:" + tx.TransactionID, 400},
		{"no hyphens", strings.ReplaceAll(tx.TransactionID, "-", ""), 400},
	} {
		if code, body := c.do("GET", "/v1/transactions/"+tt.id, ""); code != tt.want || (code == 200 && !strings.Contains(body, tx.TransactionID)) {
			t.Errorf("GET a transaction id %s: %d %s; want %d", tt.name, code, body, tt.want)
		}
	}
	if code, body = c.do("POST", "/v1/transactions/"+strings.ToUpper(tx.TransactionID)+":reverse", `{}`); code != 200 || !strings.Contains(body, `"reverses":"`+tx.TransactionID+`"`) {
		t.Fatalf("reverse by the upper-case id: %d %s", code, body)
	}
	if code, body = c.do("POST", "/v1/transactions/"+tx.TransactionID+":reverse", `{}`); code != 200 || !strings.Contains(body, `"reverses":"`+tx.TransactionID+`"`) {
		t.Fatalf("reverse again by the journal's id: %d %s; want the same reversal", code, body)
	}
}

func TestREST(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	tok, err := auth.Issue(secret, auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := restClient{t: t, base: base, token: tok}

	code, body := c.do("POST", "/v1/deposits", `{"renter_id":"r-1","amount":"120.50","currency":"CNY","external_ref":"wx-1"}`)
	if code != 200 {
		t.Fatalf("deposit: %d %s", code, body)
	}
	var dep struct {
		TransactionID string `json:"transaction_id"`
		Postings      []struct{ Account, Direction, Amount, Currency string }
	}
	if err := json.Unmarshal([]byte(body), &dep); err != nil || dep.TransactionID == "" || len(dep.Postings) != 2 {
		t.Fatalf("deposit answer %s (%v)", body, err)
	}

	code, body = c.do("GET", "/v1/accounts/renter:r-1:wallet", "")
	want := `{"address":"renter:r-1:wallet","kind":"liability","fund_pool":"client","balances":[{"currency":"CNY","amount":"120.50"}]}`
	if code != 200 || compactJSON(t, body) != compactJSON(t, want) {
		t.Fatalf("GET account: %d %s\nwant %s", code, body, want)
	}
	// Percent-encoded colons work too.
	if code, body = c.do("GET", "/v1/accounts/renter%3Ar-1%3Awallet", ""); code != 200 || compactJSON(t, body) != compactJSON(t, want) {
		t.Fatalf("GET account (encoded): %d %s", code, body)
	}

	// A settlement-shaped entry on a cycle account, read back by its raw path.
	code, body = c.do("POST", "/v1/transactions", `{"idempotency_key":"m-1","description":"usage","metadata":{"ticket":"OPS-7"},
		"postings":[{"account":"renter:r-1:wallet","direction":"debit","amount":"20","currency":"CNY"},
		{"account":"provider:p-001:pending:cyc-20261112","direction":"credit","amount":"20","currency":"CNY"}]}`)
	if code != 200 {
		t.Fatalf("create transaction: %d %s", code, body)
	}
	var tx struct {
		TransactionID string `json:"transaction_id"`
	}
	if err := json.Unmarshal([]byte(body), &tx); err != nil || tx.TransactionID == "" {
		t.Fatalf("create transaction answer %s: %v", body, err)
	}
	code, body = c.do("GET", "/v1/accounts/provider:p-001:pending:cyc-20261112", "")
	if code != 200 || !strings.Contains(body, `"amount":"20.00"`) {
		t.Fatalf("GET cycle account: %d %s", code, body)
	}
	code, body = c.do("GET", "/v1/transactions/"+tx.TransactionID, "")
	if code != 200 || !strings.Contains(body, `"ticket":"OPS-7"`) {
		t.Fatalf("GET transaction: %d %s", code, body)
	}
	// Reverse through the :reverse verb.
	code, body = c.do("POST", "/v1/transactions/"+tx.TransactionID+":reverse", `{}`)
	if code != 200 || !strings.Contains(body, `"reverses":"`+tx.TransactionID+`"`) {
		t.Fatalf("reverse: %d %s", code, body)
	}
	code, body = c.do("GET", "/v1/transactions?account=renter:r-1:wallet&page_size=2", "")
	if code != 200 || !strings.Contains(body, `"next_page_token":"`) || strings.Contains(body, `"next_page_token":""`) {
		t.Fatalf("list transactions page 1: %d %s", code, body)
	}

	tests := []struct {
		name, method, path, body string
		token                    string
		want                     int
	}{
		{"unbalanced", "POST", "/v1/transactions", `{"idempotency_key":"m-2","postings":[{"account":"bank:client","direction":"debit","amount":"1","currency":"USD"},{"account":"renter:r-1:wallet","direction":"credit","amount":"2","currency":"USD"}]}`, tok, 400},
		{"bad address", "GET", "/v1/accounts/renter:r-1", "", tok, 400},
		{"unknown account", "GET", "/v1/accounts/renter:nobody:wallet", "", tok, 404},
		{"no token", "GET", "/v1/accounts/renter:r-1:wallet", "", "", 401},
		{"conflicting replay", "POST", "/v1/deposits", `{"renter_id":"r-1","amount":"1.00","currency":"CNY","external_ref":"wx-1"}`, tok, 409},
		{"bad page token", "GET", "/v1/transactions?page_token=zz", "", tok, 400},
		{"bad as_of", "GET", "/v1/accounts/renter:r-1:wallet?as_of=yesterday", "", tok, 400},
		{"as_of to come", "GET", "/v1/accounts/renter:r-1:wallet?as_of=" + time.Now().UTC().Add(time.Hour).Format(time.RFC3339), "", tok, 400},
		{"as_of to come, listed", "GET", "/v1/accounts?prefix=renter:&as_of=" + time.Now().UTC().Add(time.Hour).Format(time.RFC3339), "", tok, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := restClient{t: t, base: base, token: tt.token}
			if code, body := cc.do(tt.method, tt.path, tt.body); code != tt.want {
				t.Fatalf("%s %s: %d %s, want %d", tt.method, tt.path, code, body, tt.want)
			}
		})
	}
	// Roles: a renter may not read another renter's wallet (own reads: access_test.go).
	rtok := testkit.Token(t, secret, auth.RoleRenter, "r-2", time.Hour)
	if code, _ := (restClient{t: t, base: base, token: rtok}).do("GET", "/v1/accounts/renter:r-1:wallet", ""); code != 403 {
		t.Fatalf("renter reading another's wallet: %d, want 403", code)
	}
}

func compactJSON(t *testing.T, s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %s", s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var _ = testkit.Context

// A service asks which of its writes landed by their idempotency keys (the tax
// service confirms settlements before remitting their tax): the transactions
// posted under the keys named, in the journal's order, keys no transaction
// holds left out, narrowed to an account when one is named.
func TestRESTListsTransactionsByIdempotencyKey(t *testing.T) {
	t.Parallel()
	f, c := financeREST(t)
	a := f.deposit(t, "r-1", "10", "CNY", "ref-a")
	b := f.deposit(t, "r-2", "10", "CNY", "ref-b")
	keys := func(body string) []string {
		t.Helper()
		var resp struct {
			Transactions []struct {
				TransactionID  string `json:"transaction_id"`
				IdempotencyKey string `json:"idempotency_key"`
			} `json:"transactions"`
			Next string `json:"next_page_token"`
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		var out []string
		for _, tx := range resp.Transactions {
			out = append(out, tx.TransactionID)
		}
		return out
	}
	q := "/v1/transactions?idempotency_keys=" + b.IdempotencyKey + "&idempotency_keys=nobody&idempotency_keys=" + a.IdempotencyKey
	code, body := c.do("GET", q, "")
	if got := keys(body); code != 200 || strings.Join(got, ",") != a.ID+","+b.ID {
		t.Fatalf("by keys: %d %s; want %s then %s", code, body, a.ID, b.ID)
	}
	code, body = c.do("GET", q+"&account=renter:r-2:wallet", "")
	if got := keys(body); code != 200 || strings.Join(got, ",") != b.ID {
		t.Fatalf("by keys on renter:r-2:wallet: %d %s; want %s alone", code, body, b.ID)
	}
	if code, body = c.do("GET", "/v1/transactions?idempotency_keys=nobody", ""); code != 200 || len(keys(body)) != 0 {
		t.Fatalf("a key nothing holds: %d %s; want no transaction", code, body)
	}
	many := strings.Repeat("&idempotency_keys=k", app.MaxLookupKeys+1)[1:]
	for _, bad := range []string{"?" + many, strings.TrimPrefix(q, "/v1/transactions") + "&page_token=x", "?idempotency_keys=a&idempotency_keys="} {
		if code, body := c.do("GET", "/v1/transactions"+bad, ""); code != 400 || !strings.Contains(body, "idempotency_keys") && !strings.Contains(body, "page_token") {
			t.Errorf("GET /v1/transactions%.60s: %d %s; want 400 naming the field", bad, code, body)
		}
	}
}

// A service reads many entries in one call by their ids (payout's
// settled-outside check asked GetTransaction once per claimed entry, every
// pass): the transactions named, in the journal's order, each with its
// reversed_by, ids the journal holds nothing under left out. A listing of
// its own: with an account, keys or a page token, more than MaxLookupKeys
// ids, or an id that is none, it is a 400 naming the field.
func TestRESTListsTransactionsByID(t *testing.T) {
	t.Parallel()
	f, c := financeREST(t)
	a := f.deposit(t, "r-1", "10", "CNY", "ref-a")
	b := f.deposit(t, "r-2", "10", "CNY", "ref-b")
	code, body := c.do("POST", "/v1/transactions/"+a.ID+":reverse", `{}`)
	if code != 200 {
		t.Fatalf("reverse: %d %s", code, body)
	}
	var resp struct {
		Transactions []struct {
			TransactionID string `json:"transaction_id"`
			ReversedBy    string `json:"reversed_by"`
		} `json:"transactions"`
	}
	nobody := "0190a4c2-0000-7000-8000-000000000000"
	q := "/v1/transactions?transaction_ids=" + b.ID + "&transaction_ids=" + nobody + "&transaction_ids=" + strings.ToUpper(a.ID)
	code, body = c.do("GET", q, "")
	if err := json.Unmarshal([]byte(body), &resp); code != 200 || err != nil || len(resp.Transactions) != 2 {
		t.Fatalf("by ids: %d %s %v; want %s and %s", code, body, err, a.ID, b.ID)
	}
	reversedBy := map[string]string{}
	for _, x := range resp.Transactions {
		reversedBy[x.TransactionID] = x.ReversedBy
	}
	if rb, ok := reversedBy[b.ID]; !ok || rb != "" || reversedBy[a.ID] == "" {
		t.Fatalf("by ids: %+v; want %s reversed, %s not", resp.Transactions, a.ID, b.ID)
	}
	many := strings.Repeat("&transaction_ids="+b.ID, app.MaxLookupKeys+1)[1:]
	for _, bad := range []string{"?" + many, "?transaction_ids=x", "?transaction_ids=" + b.ID + "&account=renter:r-2:wallet",
		"?transaction_ids=" + b.ID + "&idempotency_keys=k", "?transaction_ids=" + b.ID + "&page_token=x"} {
		if code, body := c.do("GET", "/v1/transactions"+bad, ""); code != 400 ||
			!strings.Contains(body, "transaction_ids") && !strings.Contains(body, "account") && !strings.Contains(body, "idempotency_keys") && !strings.Contains(body, "page_token") {
			t.Errorf("GET /v1/transactions%.60s: %d %s; want 400 naming the field", bad, code, body)
		}
	}
}
