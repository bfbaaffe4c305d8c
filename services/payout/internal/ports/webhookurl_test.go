package ports

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// A webhook URL is https and its host resolves only to public addresses,
// unless private addresses are allowed (then http too: a test's receiver).
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
		{"https://hooks.example.com:8443/x", false, ""},
		{"https://93.184.216.34/x", false, ""},
		{"http://hooks.example.com:8080/x", false, "https"}, // a payout's status unencrypted
		{"http://93.184.216.34/x", false, "https"},
		{"HTTP://hooks.example.com/x", false, "https"},
		{"ftp://hooks.example.com/x", false, "want an https URL of at most"},
		{"file:///etc/passwd", false, "want an https URL of at most"},
		{"gopher://127.0.0.1:25/", true, "http(s)"}, // http is allowed then
		{"https://hooks.example.com/" + strings.Repeat("x", 2048), false, "want an https URL of at most 2048"},
		{"https:///nohost", false, "want an https URL of at most"},
		{"not a url", false, "want an https URL of at most"},
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
		{"http://[fe80::1%25eth0]/hook", false, "link-local"},
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

// specialPurpose are addresses of the IANA special-purpose registries (and
// IPv6 addresses carrying one of IPv4's) that webhooks may not reach, each
// with a word of the reason given.
var specialPurpose = []struct {
	give string
	want string
}{
	{"100.64.0.1", "shared address"},
	{"100.100.100.200", "shared address"}, // Alibaba Cloud's metadata server
	{"100.127.255.254", "shared address"},
	{"198.18.0.1", "benchmarking"},
	{"198.19.255.254", "benchmarking"},
	{"0.0.0.0", "this network"},
	{"0.255.255.255", "this network"},
	{"192.0.0.1", "protocol assignment"},
	{"192.0.0.170", "protocol assignment"},
	{"192.0.2.1", "documentation"},
	{"198.51.100.1", "documentation"},
	{"203.0.113.1", "documentation"},
	{"192.88.99.1", "6to4 relay"},
	{"240.0.0.1", "reserved"},
	{"255.255.255.255", "reserved"},
	{"224.0.0.251", "multicast"},
	{"239.255.255.250", "multicast"},
	{"127.0.0.1", "loopback"},
	{"10.0.0.1", "private"},
	{"169.254.169.254", "link-local"},
	{"::", "unspecified"},
	{"::1", "loopback"},
	{"::ffff:127.0.0.1", "IPv4-mapped address of a loopback"},
	{"::ffff:100.100.100.200", "IPv4-mapped address of a shared address"},
	{"::ffff:169.254.169.254", "IPv4-mapped address of a link-local"},
	{"64:ff9b::a9fe:a9fe", "NAT64 address of a link-local"}, // 169.254.169.254
	{"64:ff9b::7f00:1", "NAT64 address of a loopback"},
	{"64:ff9b::a00:1", "NAT64 address of a private"},
	{"64:ff9b::6464:64c8", "NAT64 address of a shared address"}, // 100.100.100.200
	{"64:ff9b:1::a9fe:a9fe", "local-use NAT64"},
	{"2002:a9fe:a9fe::1", "6to4 address of a link-local"},
	{"2002:7f00:1::", "6to4 address of a loopback"},
	{"2002:c0a8:101::1", "6to4 address of a private"},
	{"::127.0.0.1", "IPv4-compatible address of a loopback"},
	{"::169.254.169.254", "IPv4-compatible address of a link-local"},
	{"::10.0.0.1", "IPv4-compatible address of a private"},
	{"2001::a9fe:a9fe", "protocol assignment"}, // Teredo
	{"2001:2::1", "protocol assignment"},
	{"2001:db8::1", "documentation"},
	{"3fff::1", "documentation"},
	{"100::1", "discard-only"},
	{"5f00::1", "segment"},
	{"fc00::1", "private"},
	{"fd00:ec2::254", "private"}, // AWS's IPv6 metadata server
	{"fe80::1", "link-local"},
	{"fec0::1", "site-local"},
	{"ff02::1", "multicast"},
	{"ff0e::1", "multicast"},
	{"4000::1", "outside IPv6 global unicast"},
}

// Every special-purpose address is refused, as a literal in the URL, as
// what a name resolves to, and at the delivery's connection: one check in
// all three places. Public addresses, IPv4 ones carried in IPv6 too, pass.
func TestWebhookGuardSpecialPurposeAddresses(t *testing.T) {
	for _, tt := range specialPurpose {
		t.Run(tt.give, func(t *testing.T) {
			a := netip.MustParseAddr(tt.give)
			host := a.String()
			if a.Is6() {
				host = "[" + host + "]"
			}
			g := WebhookGuard{Resolver: fakeResolver{"hook.example.com": {tt.give}}}
			for _, u := range []string{"https://" + host + "/hook", "https://hook.example.com/hook"} {
				if err := g.CheckURL(context.Background(), u); !errors.Is(err, errForbiddenAddr) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("CheckURL(%s): %v, want refused as %q", u, err, tt.want)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "POST", "http://"+net.JoinHostPort(a.String(), "9"), strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := g.Client().Do(req)
			if err == nil {
				resp.Body.Close()
			}
			if !errors.Is(err, errForbiddenAddr) {
				t.Errorf("delivery to %s: %v, want refused before connecting", tt.give, err)
			}
		})
	}
	r := fakeResolver{"hook.example.com": {"93.184.216.34"}}
	for _, give := range []string{
		"93.184.216.34", "8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.1", "198.17.255.255", "198.20.0.1",
		"192.0.1.1", "223.255.255.255", "2606:4700:4700::1111", "2a00:1450:4001::1",
		"::ffff:93.184.216.34", "64:ff9b::5db8:d822", "2002:5db8:d822::1", "::93.184.216.34",
	} {
		a := netip.MustParseAddr(give)
		if why := forbiddenAddr(a); why != "" {
			t.Errorf("%s refused as %s, want allowed", give, why)
		}
		host := give
		if a.Is6() {
			host = "[" + give + "]"
		}
		if err := (WebhookGuard{Resolver: r}).CheckURL(context.Background(), "https://"+host+"/hook"); err != nil {
			t.Errorf("CheckURL(%s): %v, want allowed", host, err)
		}
	}
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
