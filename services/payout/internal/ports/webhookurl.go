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
)

// WebhookGuard keeps webhook deliveries off the platform's own network
// (SSRF): a webhook URL is http or https, and its host must not resolve to
// a loopback, private, link-local, multicast or unspecified address unless
// AllowPrivate (GPUBILL_WEBHOOK_ALLOW_PRIVATE; tests with a loopback
// receiver). The URL is checked when the webhook is created and the
// address again at each delivery's connection (DNS may have changed).
type WebhookGuard struct {
	AllowPrivate bool
	// Resolver looks hosts up (nil: net.DefaultResolver).
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
}

// thisNetwork is 0.0.0.0/8, which Linux connects to the local host.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// forbiddenAddr says why a webhook may not be delivered to a ("" if it may).
func forbiddenAddr(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return "an invalid address"
	case a.IsLoopback():
		return "a loopback address"
	case a.IsUnspecified() || (a.Is4() && thisNetwork.Contains(a)):
		return "an unspecified address"
	case a.IsPrivate():
		return "a private address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsMulticast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast():
		return "a multicast address"
	}
	return ""
}

// errForbiddenAddr marks a webhook address refused by the guard.
var errForbiddenAddr = errors.New("webhook address not allowed")

// checkAddr refuses a forbidden address unless AllowPrivate.
func (g WebhookGuard) checkAddr(host string, a netip.Addr) error {
	if g.AllowPrivate {
		return nil
	}
	if why := forbiddenAddr(a); why != "" {
		// The address is not named: a provider would read the platform's
		// internal network from it, host by host.
		return fmt.Errorf("%s resolves to an address webhooks may not reach (%s): %w", host, why, errForbiddenAddr)
	}
	return nil
}

// CheckURL checks a webhook URL: http(s), a host, and every address the
// host resolves to allowed. The error is meant for the client (field url).
func (g WebhookGuard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || len(raw) > webhookURLLenMax {
		return errors.New("want an http(s) URL of at most 2048 characters")
	}
	if u.User != nil {
		return errors.New("credentials in the URL are not allowed")
	}
	host := u.Hostname()
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
