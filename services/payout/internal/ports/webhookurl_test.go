package ports

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeResolver answers fixed addresses per host.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range f[host] {
		out = append(out, netip.MustParseAddr(s))
	}
	if len(out) == 0 {
		return nil, errors.New("no such host")
	}
	return out, nil
}

// A webhook URL is http(s) and its host resolves only to public addresses,
// unless private addresses are allowed.
func TestWebhookGuardCheckURL(t *testing.T) {
	r := fakeResolver{
		"hooks.example.com": {"93.184.216.34", "2606:2800:220:1::1"},
		"evil.example.com":  {"93.184.216.34", "10.0.0.5"}, // one private answer is enough to refuse
		"local.example.com": {"127.0.0.1"},
		"meta.example.com":  {"169.254.169.254"},
	}
	for _, c := range []struct {
		url          string
		allowPrivate bool
		wantErr      string // "" = accepted
	}{
		{"https://hooks.example.com/gpubill", false, ""},
		{"http://hooks.example.com:8080/x", false, ""},
		{"https://93.184.216.34/x", false, ""},
		{"ftp://hooks.example.com/x", false, "http(s)"},
		{"file:///etc/passwd", false, "http(s)"},
		{"gopher://127.0.0.1:25/", true, "http(s)"},
		{"https:///nohost", false, "http(s)"},
		{"not a url", false, "http(s)"},
		{"https://user:pw@hooks.example.com/", false, "credentials"},
		{"http://127.0.0.1:8080/hook", false, "loopback"},
		{"http://127.9.9.9/hook", false, "loopback"},
		{"http://[::1]/hook", false, "loopback"},
		{"http://[::ffff:127.0.0.1]/hook", false, "loopback"},
		{"http://10.1.2.3/hook", false, "private"},
		{"http://172.16.0.1/hook", false, "private"},
		{"http://192.168.1.1/hook", false, "private"},
		{"http://[fd00::1]/hook", false, "private"},
		{"http://169.254.169.254/latest/meta-data", false, "link-local"},
		{"http://[fe80::1]/hook", false, "link-local"},
		{"http://224.0.0.1/hook", false, "multicast"},
		{"http://[ff02::1]/hook", false, "multicast"},
		{"http://0.0.0.0:8080/hook", false, "unspecified"},
		{"http://0.1.2.3/hook", false, "unspecified"},
		{"http://[::]/hook", false, "unspecified"},
		{"http://local.example.com/hook", false, "loopback"},
		{"http://meta.example.com/hook", false, "link-local"},
		{"http://evil.example.com/hook", false, "private"},
		{"http://nowhere.example.com/hook", false, "does not resolve"},
		{"http://127.0.0.1:8080/hook", true, ""},
		{"http://local.example.com/hook", true, ""},
		{"http://10.1.2.3/hook", true, ""},
	} {
		err := WebhookGuard{AllowPrivate: c.allowPrivate, Resolver: r}.CheckURL(context.Background(), c.url)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s (allow private %v): refused: %v", c.url, c.allowPrivate, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s (allow private %v): %v, want an error about %q", c.url, c.allowPrivate, err, c.wantErr)
		case err != nil && strings.Contains(c.url, ".example.com") && namesAnAddress(err.Error(), r):
			// A name's private address is not told: a provider read the
			// platform's internal network from it, host by host.
			t.Errorf("%s: %v names the address it resolves to", c.url, err)
		}
	}
}

// namesAnAddress reports whether msg names an address r resolves a name to.
func namesAnAddress(msg string, r fakeResolver) bool {
	for _, as := range r {
		for _, a := range as {
			if strings.Contains(msg, a) {
				return true
			}
		}
	}
	return false
}

// The delivery client checks the address it connects to: a receiver on
// loopback is never sent anything unless private addresses are allowed.
func TestWebhookGuardClient(t *testing.T) {
	var hits atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer recv.Close()
	resp, err := WebhookGuard{}.Client().Post(recv.URL, "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, errForbiddenAddr) || hits.Load() != 0 {
		t.Errorf("delivery to loopback: err %v, receiver hit %d times", err, hits.Load())
	}
	resp, err = WebhookGuard{AllowPrivate: true}.Client().Post(recv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("delivery with private allowed: %v", err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Errorf("receiver hit %d times, want 1", hits.Load())
	}
}

// A receiver's redirect is the delivery's answer: the client does not
// follow it (a 302 sent the POST on as a GET without its body, and a 200 to
// that GET counted as delivered).
func TestWebhookClientDoesNotFollowRedirects(t *testing.T) {
	var gets atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			gets.Add(1)
			return
		}
		http.Redirect(w, r, "/moved", http.StatusFound)
	}))
	defer recv.Close()
	resp, err := WebhookGuard{AllowPrivate: true}.Client().Post(recv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || gets.Load() != 0 {
		t.Fatalf("answer %d, %d GETs at the redirect's target; want the 302, none", resp.StatusCode, gets.Load())
	}
}
