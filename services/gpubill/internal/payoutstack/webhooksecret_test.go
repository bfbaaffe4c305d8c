package payoutstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/pkg/webhook"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout"
)

// hookCall is one delivery a test receiver got.
type hookCall struct {
	ts, sig, status, payout string
	body                    []byte
}

// Webhook secrets are stored sealed (no plaintext in the table, not even in
// the sealed bytes), answered masked over REST, and rotatable: during the
// grace period each delivery carries the new signature then the previous
// one (a receiver on either secret accepts it), a rotation with no grace
// signs with the new secret alone. Refused: another provider's rotation,
// an unknown webhook, a short secret, a grace over 7 days.
func TestPayoutWebhookSecretSealedAndRotated(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{WebhookAllowPrivate: true})
	ctx := context.Background()
	const s1, s2, s3 = "whsec-first-0123456789", "whsec-second-0123456789", "whsec-third-0123456789"
	var mu sync.Mutex
	var calls []hookCall
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ev payout.WebhookEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		calls = append(calls, hookCall{r.Header.Get(webhook.HeaderTimestamp), r.Header.Get(webhook.HeaderSignature), ev.Status, ev.PayoutID, body})
		mu.Unlock()
	}))
	defer recv.Close()

	wh, err := st.s.API().CreateWebhook(as(auth.RoleProvider, "p-rot"), &payoutv1.CreateWebhookRequest{ProviderId: "p-rot", Url: recv.URL, Secret: s1})
	if err != nil {
		t.Fatal(err)
	}
	id := wh.Webhook.WebhookId
	var plain *string
	var sealed []byte
	if err := st.d.Pool.QueryRow(ctx, `select secret, secret_sealed from payout.webhooks where webhook_id = $1`, id).Scan(&plain, &sealed); err != nil {
		t.Fatal(err)
	}
	if plain != nil || len(sealed) == 0 || bytes.Contains(sealed, []byte("first-0123")) {
		t.Fatalf("stored secret: plaintext %v, sealed %q", plain, sealed)
	}
	code, _, body := st.rest(t, "GET", "/v1/providers/p-rot/webhooks", auth.RoleProvider, "p-rot", "")
	if code != 200 || strings.Contains(body, "first-0123") || !strings.Contains(body, `"secret":"****6789"`) {
		t.Fatalf("GET webhooks: %d %s", code, body)
	}

	// Rotate with an hour's grace: both signatures, the new one first.
	code, body = st.restAs(t, "POST", "/v1/providers/p-rot/webhooks/"+id+":rotate-secret", auth.RoleProvider, "p-rot",
		`{"secret":"`+s2+`","grace_period":"3600s"}`)
	if code != 200 || strings.Contains(body, "second-0123") || !strings.Contains(body, `"previous_secret_expires_at":"20`) || !strings.Contains(body, `"secret_rotated_at":"20`) {
		t.Fatalf("rotate: %d %s", code, body)
	}
	// The client's retry of that rotation changes nothing: it made s2 the
	// previous secret too, and s1, the one the grace was for, was gone.
	code, again := st.restAs(t, "POST", "/v1/providers/p-rot/webhooks/"+id+":rotate-secret", auth.RoleProvider, "p-rot",
		`{"secret":"`+s2+`","grace_period":"3600s"}`)
	if code != 200 || again != body {
		t.Fatalf("the rotation again: %d %s; want the first answer %s", code, again, body)
	}
	st.setup(t, "p-rot", "6222000011117771")
	st.settle(t, "p-rot", "cyc-20260101", "CNY", "250.00")
	first := st.waitStatus(t, "p-rot", "cyc-20260101", "paid", waitLong)
	got := waitHook(t, &mu, &calls, first.PayoutId, "paid")
	for _, c := range got {
		ts := atoi64(t, c.ts)
		sigs := strings.Split(c.sig, ",")
		if len(sigs) != 2 || sigs[0] != webhook.Sign([]byte(s2), ts, c.body) || sigs[1] != webhook.Sign([]byte(s1), ts, c.body) {
			t.Errorf("%s during the grace period: signature %q, want new then previous", c.status, c.sig)
		}
		if !webhook.Verify([]byte(s1), ts, c.body, c.sig) || !webhook.Verify([]byte(s2), ts, c.body, c.sig) {
			t.Errorf("%s: a receiver on either secret refuses %q", c.status, c.sig)
		}
	}

	// Rotate again with no grace: the new secret alone.
	code, body = st.restAs(t, "POST", "/v1/providers/p-rot/webhooks/"+id+":rotate-secret", auth.RoleProvider, "p-rot",
		`{"secret":"`+s3+`","grace_period":"0s"}`)
	if code != 200 || strings.Contains(body, "previous_secret_expires_at\":\"20") {
		t.Fatalf("rotate without grace: %d %s", code, body)
	}
	st.settle(t, "p-rot", "cyc-20260215", "CNY", "250.00")
	second := st.waitStatus(t, "p-rot", "cyc-20260215", "paid", waitLong)
	for _, c := range waitHook(t, &mu, &calls, second.PayoutId, "paid") {
		ts := atoi64(t, c.ts)
		if c.sig != webhook.Sign([]byte(s3), ts, c.body) || webhook.Verify([]byte(s2), ts, c.body, c.sig) {
			t.Errorf("%s after a rotation without grace: signature %q, want the new secret's alone", c.status, c.sig)
		}
	}

	for _, bad := range []struct {
		name, sub, path, body string
		want                  int
	}{
		{"another provider", "p-other", "/v1/providers/p-rot/webhooks/" + id + ":rotate-secret", `{"secret":"` + s1 + `"}`, http.StatusForbidden},
		{"unknown webhook", "p-rot", "/v1/providers/p-rot/webhooks/wh-nope:rotate-secret", `{"secret":"` + s1 + `"}`, http.StatusNotFound},
		{"another's webhook by its own path", "p-other", "/v1/providers/p-other/webhooks/" + id + ":rotate-secret", `{"secret":"` + s1 + `"}`, http.StatusNotFound},
		{"short secret", "p-rot", "/v1/providers/p-rot/webhooks/" + id + ":rotate-secret", `{"secret":"short"}`, http.StatusBadRequest},
		{"grace over 7 days", "p-rot", "/v1/providers/p-rot/webhooks/" + id + ":rotate-secret", `{"secret":"` + s1 + `","grace_period":"700000s"}`, http.StatusBadRequest},
		{"negative grace", "p-rot", "/v1/providers/p-rot/webhooks/" + id + ":rotate-secret", `{"secret":"` + s1 + `","grace_period":"-5s"}`, http.StatusBadRequest},
	} {
		if code, body := st.restAs(t, "POST", bad.path, auth.RoleProvider, bad.sub, bad.body); code != bad.want {
			t.Errorf("%s: HTTP %d, want %d: %s", bad.name, code, bad.want, body)
		}
	}
}

// A secret stored in plaintext by an older version is sealed at the next
// start; a start with another key than the one that sealed the secrets is
// refused, naming both keys.
func TestPayoutWebhookSecretsSealedAtStartAndKeyChecked(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{})
	ctx := context.Background()
	if _, err := st.d.Pool.Exec(ctx, `insert into payout.webhooks (webhook_id, provider_id, url, secret, created_at)
		values ('wh-legacy', 'p-legacy', 'https://example.com/hook', 'whsec-legacy-0123456789', now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := payout.New(ctx, st.d, st.tc, st.queue, st.cfg); err != nil {
		t.Fatal(err)
	}
	var plain *string
	var sealed []byte
	if err := st.d.Pool.QueryRow(ctx, `select secret, secret_sealed from payout.webhooks where webhook_id = 'wh-legacy'`).Scan(&plain, &sealed); err != nil {
		t.Fatal(err)
	}
	if plain != nil || len(sealed) == 0 {
		t.Fatalf("legacy secret after a start: plaintext %v, sealed %d bytes", plain, len(sealed))
	}
	ws, err := st.s.API().ListWebhooks(as(auth.RoleProvider, "p-legacy"), &payoutv1.ListWebhooksRequest{ProviderId: "p-legacy"})
	if err != nil || len(ws.Webhooks) != 1 || ws.Webhooks[0].Secret != "****6789" {
		t.Fatalf("legacy webhook: %v %v", ws, err)
	}
	other := st.cfg
	other.WebhookKey = bytes.Repeat([]byte{7}, 32)
	if _, err := payout.New(ctx, st.d, st.tc, st.queue, other); err == nil || !strings.Contains(err.Error(), "not the configured key") {
		t.Fatalf("start with another webhook key: %v", err)
	}
}

// waitHook waits for the delivery of a payout's status and returns every
// delivery of that payout so far.
func waitHook(t *testing.T, mu *sync.Mutex, calls *[]hookCall, payoutID, status string) []hookCall {
	t.Helper()
	var got []hookCall
	testkit.Eventually(t, waitLong, func() bool {
		mu.Lock()
		defer mu.Unlock()
		got = got[:0]
		done := false
		for _, c := range *calls {
			if c.payout == payoutID {
				got = append(got, c)
				done = done || c.status == status
			}
		}
		return done
	}, "delivery of "+payoutID+" "+status)
	return got
}

// restAs calls the REST API with a JSON body and a token of role and subject.
func (st *stack) restAs(t testing.TB, method, path, role, sub, body string) (int, string) {
	t.Helper()
	tok, err := auth.Issue(st.secret, role, sub, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, "http://"+st.http+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func atoi64(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
