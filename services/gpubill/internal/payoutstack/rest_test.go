package payoutstack_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/services/payout"
)

// rest calls the stack's REST API with a token of role and subject.
func (st *stack) rest(t testing.TB, method, path, role, sub, ifNoneMatch string) (int, http.Header, string) {
	t.Helper()
	tok, err := auth.Issue(st.secret, role, sub, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, "http://"+st.http+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if ifNoneMatch != "" {
		req.Header.Set("If-None-Match", ifNoneMatch)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// Providers poll cheaply over REST: an ETag on every answer, 304 without a
// body for If-None-Match with the current one, a new ETag after a status
// change; someone else's payout is 404; account numbers are masked in the
// payout method answer and never in any payout answer.
func TestPayoutRESTPolling(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{})
	st.setup(t, "p-poll", "6222000011114441")
	st.settle(t, "p-poll", "cyc-20260101", "CNY", "330.00")
	p := st.waitStatus(t, "p-poll", "cyc-20260101", "paid", waitLong)
	path := "/v1/payouts/" + p.PayoutId

	code, h, body := st.rest(t, "GET", path, auth.RoleProvider, "p-poll", "")
	tag := h.Get("ETag")
	if code != 200 || tag == "" || !strings.Contains(body, `"status":"paid"`) || !strings.Contains(body, `"expected_arrival_date"`) {
		t.Fatalf("GET %s: %d etag %q %s", path, code, tag, body)
	}
	code, h, body = st.rest(t, "GET", path, auth.RoleProvider, "p-poll", tag)
	if code != http.StatusNotModified || body != "" || h.Get("ETag") != tag {
		t.Errorf("If-None-Match current: %d %q etag %q", code, body, h.Get("ETag"))
	}
	code, _, _ = st.rest(t, "GET", path, auth.RoleProvider, "p-poll", `"stale.1"`)
	if code != 200 {
		t.Errorf("If-None-Match stale: %d", code)
	}
	code, _, _ = st.rest(t, "GET", path, auth.RoleProvider, "p-someone-else", "")
	if code != http.StatusNotFound {
		t.Errorf("another provider: %d", code)
	}
	code, _, _ = st.rest(t, "GET", path, auth.RoleProvider, "p-someone-else", tag)
	if code != http.StatusNotFound {
		t.Errorf("another provider with the ETag: %d", code)
	}

	// The list: ETag, 304, and a new ETag once a payout changes.
	list := "/v1/providers/p-poll/payouts?status=paid"
	code, h, _ = st.rest(t, "GET", list, auth.RoleProvider, "p-poll", "")
	ltag := h.Get("ETag")
	if code != 200 || ltag == "" {
		t.Fatalf("list: %d %q", code, ltag)
	}
	if code, _, _ = st.rest(t, "GET", list, auth.RoleProvider, "p-poll", ltag); code != http.StatusNotModified {
		t.Errorf("list If-None-Match: %d", code)
	}
	if code, _, _ = st.rest(t, "GET", "/v1/providers/p-poll/payouts?status=bogus", auth.RoleProvider, "p-poll", ""); code != http.StatusBadRequest {
		t.Errorf("bad status filter: %d", code)
	}
	st.settle(t, "p-poll", "cyc-20260215", "CNY", "120.00")
	st.waitStatus(t, "p-poll", "cyc-20260215", "paid", waitLong)
	if code, h, _ = st.rest(t, "GET", list, auth.RoleProvider, "p-poll", ltag); code != 200 || h.Get("ETag") == ltag {
		t.Errorf("list after a change: %d etag %q (was %q)", code, h.Get("ETag"), ltag)
	}
	if code, _, _ = st.rest(t, "GET", path, auth.RoleFinance, "", tag); code != http.StatusNotModified {
		t.Errorf("finance If-None-Match: %d", code)
	}

	// Masked everywhere.
	code, _, body = st.rest(t, "GET", "/v1/providers/p-poll/payout-method", auth.RoleProvider, "p-poll", "")
	if code != 200 || !strings.Contains(body, "****4441") || strings.Contains(body, "62220000111") {
		t.Errorf("payout method answer: %d %s", code, body)
	}
	_, _, body = st.rest(t, "GET", "/v1/providers/p-poll/payouts", auth.RoleFinance, "", "")
	if strings.Contains(body, "62220000111") || !strings.Contains(body, "bank ****4441") {
		t.Errorf("payout list leaks or lacks the masked method: %s", body)
	}
}
