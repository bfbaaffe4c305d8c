package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/webhook"
)

func TestSignIsTheDocumentedHMAC(t *testing.T) {
	// HMAC-SHA256("secret", "1700000000.{}"), computed independently with
	// `printf '1700000000.{}' | openssl dgst -sha256 -hmac secret`.
	const want = "v1=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
	got := webhook.Sign([]byte("secret"), 1700000000, []byte("{}"))
	if got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if !webhook.Verify([]byte("secret"), 1700000000, []byte("{}"), got) {
		t.Fatal("Verify refused its own signature")
	}
	for _, bad := range []struct {
		secret string
		ts     int64
		body   string
	}{{"other", 1700000000, "{}"}, {"secret", 1700000001, "{}"}, {"secret", 1700000000, "{ }"}} {
		if webhook.Verify([]byte(bad.secret), bad.ts, []byte(bad.body), got) {
			t.Errorf("Verify accepted %+v", bad)
		}
	}
}

func TestPostSignsAndReportsStatus(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	status := http.StatusNoContent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		ts, err := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64)
		if err != nil || !webhook.Verify(secret, ts, body, r.Header.Get(webhook.HeaderSignature)) || r.Header.Get(webhook.HeaderEventID) != "ev-1" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	code, err := webhook.Post(context.Background(), srv.Client(), srv.URL, secret, time.Now().Unix(), "ev-1", []byte(`{"a":1}`), time.Second)
	if err != nil || code != http.StatusNoContent {
		t.Fatalf("Post = %d, %v; want 204, nil", code, err)
	}
	status = http.StatusInternalServerError
	if code, err := webhook.Post(context.Background(), srv.Client(), srv.URL, secret, time.Now().Unix(), "ev-1", []byte(`{}`), time.Second); err == nil || code != 500 {
		t.Fatalf("Post to a failing receiver = %d, %v; want 500 and an error", code, err)
	}
}

func TestBackoffDoublesUpToMax(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 9: time.Minute, 50: time.Minute} {
		if got := webhook.Backoff(time.Second, time.Minute, attempt); got != want {
			t.Errorf("Backoff(attempt %d) = %s, want %s", attempt, got, want)
		}
	}
}

// During a rotation a delivery carries both signatures: a receiver with the
// new secret and one still on the previous secret both accept it, anyone
// else refuses it; a lone signature still verifies as before.
func TestRotationSignsWithBothSecrets(t *testing.T) {
	newS, oldS, other := []byte("new-secret-0123456789"), []byte("old-secret-0123456789"), []byte("other-secret-012345678")
	body := []byte(`{"payout_id":"po-1"}`)
	sig := webhook.SignAll([][]byte{newS, oldS}, 1700000000, body)
	if want := webhook.Sign(newS, 1700000000, body) + "," + webhook.Sign(oldS, 1700000000, body); sig != want {
		t.Fatalf("SignAll = %s, want %s", sig, want)
	}
	for _, s := range [][]byte{newS, oldS} {
		if !webhook.Verify(s, 1700000000, body, sig) {
			t.Errorf("Verify(%s) refused the rotation header", s)
		}
	}
	if webhook.Verify(other, 1700000000, body, sig) || webhook.Verify(newS, 1700000001, body, sig) {
		t.Error("Verify accepted another secret or timestamp")
	}
	if !webhook.Verify(newS, 1700000000, body, webhook.Sign(newS, 1700000000, body)) {
		t.Error("Verify of a single signature changed")
	}
}
