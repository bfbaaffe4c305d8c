package simulate

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestLeaseReceiverStopsAndResumes: the simulated scheduler applies a
// signed stop once (a redelivery changes nothing), refuses a bad or stale
// signature, and a resume lets the renter run again.
func TestLeaseReceiverStopsAndResumes(t *testing.T) {
	r, err := NewLeaseReceiver(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	post := func(secret string, at time.Time, body string) int {
		t.Helper()
		ts := at.Unix()
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(fmt.Appendf(nil, "%d.", ts))
		m.Write([]byte(body))
		req, err := http.NewRequest(http.MethodPost, r.URL(), bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Gpubill-Timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("Gpubill-Signature", "v1="+hex.EncodeToString(m.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	stop := `{"event_id":"lease-r-9-CNY-1-stop_requested","renter_id":"r-9","kind":"stop_requested"}`
	resume := `{"event_id":"lease-r-9-CNY-1-resume_allowed","renter_id":"r-9","kind":"resume_allowed"}`
	now := time.Now()
	if code := post("not-the-secret", now, stop); code != http.StatusUnauthorized || r.Stopped("r-9") {
		t.Fatalf("wrong secret: HTTP %d, stopped %v", code, r.Stopped("r-9"))
	}
	if code := post(r.Secret, now.Add(-time.Hour), stop); code != http.StatusUnauthorized || r.Stopped("r-9") {
		t.Fatalf("stale signature: HTTP %d, stopped %v", code, r.Stopped("r-9"))
	}
	if code := post(r.Secret, now, stop); code != http.StatusNoContent || !r.Stopped("r-9") {
		t.Fatalf("stop: HTTP %d, stopped %v", code, r.Stopped("r-9"))
	}
	if code := post(r.Secret, now, resume); code != http.StatusNoContent || r.Stopped("r-9") {
		t.Fatalf("resume: HTTP %d, stopped %v", code, r.Stopped("r-9"))
	}
	// The stop delivered again (a retry the scheduler already answered)
	// does not stop the renter a second time.
	if code := post(r.Secret, now, stop); code != http.StatusNoContent || r.Stopped("r-9") {
		t.Fatalf("redelivered stop: HTTP %d, stopped %v", code, r.Stopped("r-9"))
	}
}
