package payoutstack_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout"
)

// Every status change reaches the provider's webhook (a receiver on
// loopback) at least once, signed with HMAC-SHA256 over the timestamp and
// body; a receiver that fails is retried with backoff, and the delivery
// log shows the attempts. The same changes are on JetStream as
// payout.status_changed.{provider}.
func TestPayoutWebhooks(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{WebhookAllowPrivate: true}) // the receiver is on loopback
	const secret = "whsec-0123456789abcdef"
	var mu sync.Mutex
	got := map[string]bool{} // statuses received with a valid signature
	calls, bad := 0, 0
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 { // the receiver is down for its first two requests
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		ts, err := strconv.ParseInt(r.Header.Get("Gpubill-Timestamp"), 10, 64)
		if err != nil || time.Since(time.Unix(ts, 0)) > time.Minute ||
			!hmac.Equal([]byte(r.Header.Get("Gpubill-Signature")), []byte(wantSignature(secret, r.Header.Get("Gpubill-Timestamp"), body))) {
			bad++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var ev payout.WebhookEvent
		if err := json.Unmarshal(body, &ev); err != nil || ev.ProviderID != "p-hook" || ev.EventID != r.Header.Get("Gpubill-Event-Id") {
			bad++
			return
		}
		got[ev.Status] = true
	}))
	defer recv.Close()

	wh, err := st.s.API().CreateWebhook(as(auth.RoleProvider, "p-hook"), &payoutv1.CreateWebhookRequest{ProviderId: "p-hook", Url: recv.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if wh.Webhook.Secret == secret {
		t.Error("secret answered in clear")
	}
	if _, err := st.s.API().CreateWebhook(as(auth.RoleProvider, "p-other"), &payoutv1.CreateWebhookRequest{ProviderId: "p-hook", Url: recv.URL, Secret: secret}); err == nil {
		t.Error("another provider subscribed to p-hook")
	}
	if _, err := st.s.API().CreateWebhook(as(auth.RoleProvider, "p-hook"), &payoutv1.CreateWebhookRequest{ProviderId: "p-hook", Url: "ftp://x", Secret: "short"}); err == nil {
		t.Error("bad url and secret accepted")
	}
	st.setup(t, "p-hook", "6222000011115551")
	st.settle(t, "p-hook", "cyc-20260101", "CNY", "250.00")
	st.waitStatus(t, "p-hook", "cyc-20260101", "paid", waitLong)
	testkit.Eventually(t, waitLong, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["created"] && got["submitted"] && got["in_transit"] && got["paid"]
	}, "every status change delivered")
	mu.Lock()
	if bad != 0 {
		t.Errorf("%d deliveries with a bad signature or body", bad)
	}
	mu.Unlock()
	ds, err := st.s.API().ListWebhookDeliveries(as(auth.RoleProvider, "p-hook"), &payoutv1.ListWebhookDeliveriesRequest{ProviderId: "p-hook", WebhookId: wh.Webhook.WebhookId})
	if err != nil {
		t.Fatal(err)
	}
	retried := false
	for _, d := range ds.Deliveries {
		if d.Attempts >= 2 && d.Status == "delivered" && d.LastStatusCode == 200 {
			retried = true
		}
	}
	if !retried || len(ds.Deliveries) < 4 {
		t.Errorf("delivery log: %d deliveries, none delivered after a retry: %v", len(ds.Deliveries), ds.Deliveries)
	}
	// Paged, newest first: every delivery once (the log was its newest
	// 200, with no way past them). An id the provider has no webhook of is
	// a 404 (it was an empty log); a token is the webhook's own.
	var paged []string
	req := &payoutv1.ListWebhookDeliveriesRequest{ProviderId: "p-hook", WebhookId: wh.Webhook.WebhookId, PageSize: 1}
	for range len(ds.Deliveries) + 1 {
		page, err := st.s.API().ListWebhookDeliveries(as(auth.RoleProvider, "p-hook"), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Deliveries {
			paged = append(paged, d.DeliveryId)
		}
		if req.PageToken = page.NextPageToken; req.PageToken == "" {
			break
		}
	}
	var whole []string
	for _, d := range ds.Deliveries {
		whole = append(whole, d.DeliveryId)
	}
	if fmt.Sprint(paged) != fmt.Sprint(whole) {
		t.Errorf("pages of one delivery listed %v; the whole log %v", paged, whole)
	}
	unknown := &payoutv1.ListWebhookDeliveriesRequest{ProviderId: "p-hook", WebhookId: "wh_no_such_webhook"}
	if _, err := st.s.API().ListWebhookDeliveries(as(auth.RoleProvider, "p-hook"), unknown); status.Code(apperr.ToStatus(err)) != codes.NotFound {
		t.Errorf("deliveries of a webhook p-hook has none of: %v, want NotFound", err)
	}
	other, err := st.s.API().CreateWebhook(as(auth.RoleProvider, "p-hook"), &payoutv1.CreateWebhookRequest{ProviderId: "p-hook", Url: recv.URL + "/2", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.s.API().ListWebhookDeliveries(as(auth.RoleProvider, "p-hook"),
		&payoutv1.ListWebhookDeliveriesRequest{ProviderId: "p-hook", WebhookId: wh.Webhook.WebhookId, PageSize: 1})
	if err != nil || first.NextPageToken == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	foreign := &payoutv1.ListWebhookDeliveriesRequest{ProviderId: "p-hook", WebhookId: other.Webhook.WebhookId, PageToken: first.NextPageToken}
	if _, err := st.s.API().ListWebhookDeliveries(as(auth.RoleProvider, "p-hook"), foreign); status.Code(apperr.ToStatus(err)) != codes.InvalidArgument {
		t.Errorf("another webhook's page token: %v, want InvalidArgument", err)
	}

	// JetStream: payout.status_changed.p-hook carries the same changes.
	testkit.Eventually(t, waitLong, func() bool {
		s, err := st.js.Stream(context.Background(), "PAYOUT")
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("payout.status_changed.p-hook"))
		return err == nil && info.State.Subjects["payout.status_changed.p-hook"] >= 4
	}, "status changes on JetStream")
}

// wantSignature computes the documented signature independently of the
// code under test: "v1=" + hex(HMAC-SHA256(secret, timestamp + "." + body)).
func wantSignature(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// Webhooks are no SSRF hole: without GPUBILL_WEBHOOK_ALLOW_PRIVATE a URL on
// loopback is a 400 naming url; a webhook whose host turns private later
// (stored as if DNS had changed) is not sent to: a delivery fails with
// the reason in the delivery log (the payout's later ones wait behind it),
// which does not name the address (it did: the provider read the
// platform's internal addresses from it), and the receiver sees nothing.
func TestPayoutWebhookPrivateRefused(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{})
	var hits atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer recv.Close()

	tok, err := auth.Issue(st.secret, auth.RoleProvider, "p-ssrf", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"url":"` + recv.URL + `/hook","secret":"whsec-0123456789abcdef"}`
	req, err := http.NewRequest("POST", "http://"+st.http+"/v1/providers/p-ssrf/webhooks", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"url"`) || !strings.Contains(string(b), "loopback") {
		t.Fatalf("POST webhook %s: %d %s", recv.URL, resp.StatusCode, b)
	}

	// As if the host had resolved to a public address at creation.
	wh := payout.Webhook{ID: "wh-ssrf", ProviderID: "p-ssrf", URL: recv.URL + "/hook", Secret: "whsec-0123456789abcdef", CreatedAt: time.Now()}
	if err := st.s.TestHooks().CreateWebhook(context.Background(), wh); err != nil {
		t.Fatal(err)
	}
	st.setup(t, "p-ssrf", "6222000011115561")
	st.settle(t, "p-ssrf", "cyc-20260101", "CNY", "250.00")
	st.waitStatus(t, "p-ssrf", "cyc-20260101", "paid", waitLong)
	testkit.Eventually(t, waitLong, func() bool {
		ds, err := st.s.API().ListWebhookDeliveries(as(auth.RoleProvider, "p-ssrf"), &payoutv1.ListWebhookDeliveriesRequest{ProviderId: "p-ssrf", WebhookId: wh.ID})
		if err != nil || len(ds.Deliveries) < 4 {
			return false
		}
		// The payout's first change is tried, refused with the reason
		// logged; its later ones wait behind it (in order per payout).
		tried := 0
		for _, d := range ds.Deliveries {
			if d.Status == "delivered" {
				t.Fatalf("delivery %s delivered to loopback", d.DeliveryId)
			}
			if d.Attempts >= 1 {
				if !strings.Contains(d.LastError, "loopback") {
					return false
				}
				// The provider reads the log: the address its host
				// resolved to is not told (the platform's network).
				if strings.Contains(d.LastError, "127.0.0.1") || strings.Contains(d.LastError, "::1") {
					t.Fatalf("delivery %s: last error %q names the address", d.DeliveryId, d.LastError)
				}
				tried++
			}
		}
		return tried >= 1
	}, "the deliveries refused with the reason logged")
	if n := hits.Load(); n != 0 {
		t.Errorf("receiver on loopback hit %d times", n)
	}
}

// A payout's deliveries go out in the order of its changes: a "paid" the
// receiver refuses a few times is retried before the "returned" after it
// is sent. Each was retried on its own backoff, so "returned" arrived
// first and an integration keeping the last event showed paid money that
// had come back.
func TestPayoutWebhooksInOrder(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{WebhookAllowPrivate: true})
	const secret = "whsec-0123456789abcdef"
	var mu sync.Mutex
	var order []string
	refusedPaid := 0
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev payout.WebhookEvent
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if ev.Status == "paid" && refusedPaid < 5 { // 0.1+0.2+0.4+0.8+1.6 s of backoff
			refusedPaid++
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		order = append(order, ev.Status)
	}))
	defer recv.Close()
	if _, err := st.s.API().CreateWebhook(as(auth.RoleProvider, "p-back"), &payoutv1.CreateWebhookRequest{ProviderId: "p-back", Url: recv.URL, Secret: secret}); err != nil {
		t.Fatal(err)
	}
	st.setup(t, "p-back", "6222000011110003") // paid, then returned a second later
	st.settle(t, "p-back", "cyc-20260101", "CNY", "250.00")
	st.waitStatus(t, "p-back", "cyc-20260101", "returned", waitLong)
	testkit.Eventually(t, waitLong, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(order, "paid") && slices.Contains(order, "returned")
	}, "paid and returned delivered")
	mu.Lock()
	defer mu.Unlock()
	if o := strings.Join(order, ">"); !strings.HasSuffix(o, "paid>returned") {
		t.Errorf("deliveries accepted in the order %s; want returned after paid", o)
	}
}

// The webhook routes a provider removes a subscription and resends a
// delivery with, through the gateway: DELETE answers 200 again and again
// (idempotent), another provider's token is refused, the removed webhook
// is no longer listed; :redeliver of a delivery the webhook has none of is
// a 404 and of a malformed id a 400 naming delivery_id.
func TestPayoutWebhookRemoveAndRedeliverRoutes(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{WebhookAllowPrivate: true})
	wh, err := st.s.API().CreateWebhook(as(auth.RoleProvider, "p-rm"), &payoutv1.CreateWebhookRequest{ProviderId: "p-rm",
		Url: "http://127.0.0.1:9/hook", Secret: "whsec-0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	call := func(sub, method, path string) (int, string) {
		t.Helper()
		tok, err := auth.Issue(st.secret, auth.RoleProvider, sub, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(method, "http://"+st.http+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
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
	hook := "/v1/providers/p-rm/webhooks/" + wh.Webhook.WebhookId
	if code, body := call("p-other", "DELETE", hook); code != http.StatusForbidden {
		t.Errorf("DELETE by another provider: %d %s", code, body)
	}
	for range 2 {
		if code, body := call("p-rm", "DELETE", hook); code != http.StatusOK {
			t.Fatalf("DELETE %s: %d %s", hook, code, body)
		}
	}
	ws, err := st.s.API().ListWebhooks(as(auth.RoleProvider, "p-rm"), &payoutv1.ListWebhooksRequest{ProviderId: "p-rm"})
	if err != nil || len(ws.Webhooks) != 0 {
		t.Errorf("webhooks after the removal: %v, %v", ws, err)
	}
	if code, body := call("p-rm", "DELETE", "/v1/providers/p-rm/webhooks/wh_no_such_webhook"); code != http.StatusNotFound {
		t.Errorf("DELETE of a webhook p-rm has none of: %d %s", code, body)
	}
	if code, body := call("p-rm", "POST", hook+"/deliveries/123:redeliver"); code != http.StatusNotFound {
		t.Errorf("redeliver a delivery of a removed webhook: %d %s", code, body)
	}
	if code, body := call("p-rm", "POST", hook+"/deliveries/x1:redeliver"); code != http.StatusBadRequest || !strings.Contains(body, "delivery_id") {
		t.Errorf("redeliver a malformed delivery id: %d %s", code, body)
	}
}

// A payout's status (provider, payout, net, currency, notes) is not sent
// across the internet unencrypted: a webhook at an http:// URL is a 400
// naming url, and none is stored. (With GPUBILL_WEBHOOK_ALLOW_PRIVATE, a
// test's or the simulation's receiver on loopback, http stays allowed.)
func TestPayoutWebhookPlainHTTPRefused(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{})
	code, body := st.restAs(t, "POST", "/v1/providers/p-plain/webhooks", auth.RoleProvider, "p-plain",
		`{"url":"http://93.184.216.34/hook","secret":"whsec-0123456789abcdef"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, `"url"`) || !strings.Contains(body, "https") {
		t.Fatalf("POST webhook at http://: %d %s, want 400 naming url", code, body)
	}
	code, body = st.restAs(t, "GET", "/v1/providers/p-plain/webhooks", auth.RoleProvider, "p-plain", "")
	if code != http.StatusOK || strings.Contains(body, "93.184.216.34") {
		t.Fatalf("webhooks of p-plain: %d %s, want none", code, body)
	}
}
