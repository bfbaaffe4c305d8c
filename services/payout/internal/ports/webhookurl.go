package ports

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// WebhookGuard keeps webhook deliveries off the platform's own network
// (SSRF): a webhook URL is https, and every address its host resolves to
// must be global unicast (forbiddenAddr), unless AllowPrivate
// (GPUBILL_WEBHOOK_ALLOW_PRIVATE; tests with a loopback receiver), which
// allows http and any address. The URL
// is checked when the webhook is created and the address again at each
// delivery's connection (DNS may have changed), by the same checkAddr.
type WebhookGuard struct {
	AllowPrivate bool
	// Resolver looks hosts up (nil: net.DefaultResolver).
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
}

// addrRange is a range webhooks may not reach and why.
type addrRange struct {
	prefix netip.Prefix
	why    string
}

func deny(prefix, why string) addrRange {
	return addrRange{netip.MustParsePrefix(prefix), why}
}

// deniedRanges are the IANA IPv4 and IPv6 special-purpose address
// registries' ranges (RFC 6890 and later), multicast and IPv4's reserved
// block: none is a receiver on the internet, and several reach the
// platform's own network or a cloud's metadata server (100.100.100.200 is
// Alibaba Cloud's, in the shared address space; fd00:ec2::254 AWS's). The
// registries' few globally reachable entries inside a denied block (PCP and
// TURN anycast in 192.0.0.0/24 and 2001::/23) are no webhook receiver.
var deniedRanges = []addrRange{
	deny("0.0.0.0/8", "an unspecified address (this network: Linux connects it to the local host)"),
	deny("10.0.0.0/8", "a private address"),
	deny("100.64.0.0/10", "a shared address (carrier-grade NAT)"),
	deny("127.0.0.0/8", "a loopback address"),
	deny("169.254.0.0/16", "a link-local address"),
	deny("172.16.0.0/12", "a private address"),
	deny("192.0.0.0/24", "an IETF protocol assignment"),
	deny("192.0.2.0/24", "a documentation address"),
	deny("192.88.99.0/24", "a 6to4 relay anycast address (deprecated)"),
	deny("192.168.0.0/16", "a private address"),
	deny("198.18.0.0/15", "a benchmarking address"),
	deny("198.51.100.0/24", "a documentation address"),
	deny("203.0.113.0/24", "a documentation address"),
	deny("224.0.0.0/4", "a multicast address"),
	deny("240.0.0.0/4", "a reserved address (or broadcast)"),
	deny("::/128", "an unspecified address"),
	deny("::1/128", "a loopback address"),
	deny("64:ff9b:1::/48", "a local-use NAT64 address"),
	deny("100::/64", "a discard-only address"),
	deny("100:0:0:1::/64", "a dummy address"),
	deny("2001::/23", "an IETF protocol assignment (Teredo, benchmarking, ORCHID)"),
	deny("2001:db8::/32", "a documentation address"),
	deny("3fff::/20", "a documentation address"),
	deny("5f00::/16", "a segment routing (SRv6) address"),
	deny("fc00::/7", "a private (unique local) address"),
	deny("fe80::/10", "a link-local address"),
	deny("fec0::/10", "a site-local address"),
	deny("ff00::/8", "a multicast address"),
}

// ipv4Carriers are IPv6 ranges whose addresses carry an IPv4 address, at
// byte at: the host reached is (or may be, through a translator or tunnel)
// that IPv4 address, which passes the guard only if it would alone
// (64:ff9b::a9fe:a9fe reaches 169.254.169.254 through NAT64). Checked after
// deniedRanges: ::/96 holds :: and ::1.
var ipv4Carriers = []struct {
	prefix netip.Prefix
	name   string
	at     int
}{
	{netip.MustParsePrefix("::ffff:0:0/96"), "an IPv4-mapped address of ", 12},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address of ", 12},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 address of ", 2},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address of ", 12},
}

// globalUnicast6 is IPv6's global unicast space (IANA's IPv6 address space
// registry): the rest is reserved by the IETF.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// forbiddenAddr says why a webhook may not be delivered to a ("" if it
// may): only global unicast addresses outside deniedRanges pass, and an
// IPv4 address carried in IPv6 is checked as itself.
func forbiddenAddr(a netip.Addr) string {
	a = a.WithZone("") // a zoned address is in no prefix (netip.Prefix.Contains)
	if !a.IsValid() {
		return "an invalid address"
	}
	for _, r := range deniedRanges {
		if r.prefix.Contains(a) {
			return r.why
		}
	}
	if a.Is4() {
		return ""
	}
	b := a.As16()
	for _, c := range ipv4Carriers {
		if c.prefix.Contains(a) {
			if why := forbiddenAddr(netip.AddrFrom4([4]byte(b[c.at : c.at+4]))); why != "" {
				return c.name + why
			}
			return ""
		}
	}
	if !globalUnicast6.Contains(a) {
		return "an address outside IPv6 global unicast (2000::/3)"
	}
	return ""
}

// errForbiddenAddr marks a webhook address refused by the guard.
var errForbiddenAddr = errors.New("webhook address not allowed")

// forbiddenAddrError is a host refused by the guard and why (forbiddenAddr).
type forbiddenAddrError struct{ host, why string }

// The address is not named: a provider would read the platform's internal
// network from it, host by host.
func (e *forbiddenAddrError) Error() string {
	return fmt.Sprintf("%s resolves to an address webhooks may not reach (%s): %v", e.host, e.why, errForbiddenAddr)
}

func (e *forbiddenAddrError) Unwrap() error { return errForbiddenAddr }

// deliveryError is what the delivery log keeps of a failed attempt. A
// refused address is a fixed text with why: the dial's error names the
// address the host resolved to (the platform's network, in a log the
// provider reads).
func deliveryError(err error) string {
	var fe *forbiddenAddrError
	if errors.As(err, &fe) {
		return "receiver address not allowed (" + fe.why + ")"
	}
	return apperr.Clip(err.Error(), deliveryErrorLenMax)
}

// checkAddr refuses a forbidden address unless AllowPrivate.
func (g WebhookGuard) checkAddr(host string, a netip.Addr) error {
	if g.AllowPrivate {
		return nil
	}
	if why := forbiddenAddr(a); why != "" {
		return &forbiddenAddrError{host: host, why: why}
	}
	return nil
}

// CheckURL checks a webhook URL: https (http too if AllowPrivate), a host,
// and every address the host resolves to allowed. The error is meant for
// the client (field url). The address is checked first: a URL the guard
// refuses is told why, whatever its scheme.
func (g WebhookGuard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || len(raw) > webhookURLLenMax {
		// Named as accepted: http only where AllowPrivate lets it in
		// (below); "http(s)" told a provider an http URL would do.
		if g.AllowPrivate {
			return fmt.Errorf("want an http(s) URL of at most %d characters", webhookURLLenMax)
		}
		return fmt.Errorf("want an https URL of at most %d characters", webhookURLLenMax)
	}
	if u.User != nil {
		return errors.New("credentials in the URL are not allowed")
	}
	if err := g.checkHost(ctx, u.Hostname()); err != nil {
		return err
	}
	// A delivery carries the payout's status (provider, payout, net,
	// currency, notes): not across the internet in clear text. A receiver
	// on loopback (tests; AllowPrivate) may be http. Webhooks
	// stored at an http URL before this check keep being delivered.
	if u.Scheme != "https" && !g.AllowPrivate {
		return errors.New("want an https URL: a payout's status is not sent unencrypted")
	}
	return nil
}

// checkHost refuses a host that is, or resolves to, a forbidden address
// (unless AllowPrivate) or does not resolve.
func (g WebhookGuard) checkHost(ctx context.Context, host string) error {
	if a, err := netip.ParseAddr(host); err == nil {
		return g.checkAddr(host, a)
	}
	if g.AllowPrivate {
		return nil
	}
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("host %s does not resolve", host)
	}
	for _, a := range addrs {
		if err := g.checkAddr(host, a); err != nil {
			return err
		}
	}
	return nil
}

// Client is the HTTP client of deliveries: every connection's address,
// once resolved, passes the guard (no proxy: the address dialed is the
// receiver's).
func (g WebhookGuard) Client() *http.Client {
	d := &net.Dialer{Timeout: deliveryTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook address %q: %w", address, err)
		}
		return g.checkAddr(address, ap.Addr())
	}}
	// A redirect is the delivery's answer (not 2xx: retried): followed, a
	// 301/302/303 sent the POST on as a GET without its body, and a 2xx to
	// that GET marked the delivery done, the receiver never told.
	return &http.Client{Timeout: deliveryTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			Proxy: nil, DialContext: d.DialContext, ForceAttemptHTTP2: true,
			TLSHandshakeTimeout: deliveryTimeout, MaxIdleConns: 100, IdleConnTimeout: 90 * time.Second,
		}}
}
