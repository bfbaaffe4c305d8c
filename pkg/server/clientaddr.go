package server

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/gpubill/gpubill/pkg/auth"
)

// newGatewayKey is the per-process secret the REST gateway sends with its
// loopback gRPC calls, so the interceptor believes the client address it
// states and no outside gRPC caller can state one.
func newGatewayKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("gateway key: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ClientAddr is the address of a REST caller: the TCP peer, unless the peer
// is a trusted proxy, in which case X-Forwarded-For is read from the right
// (nearest hop first) and the first address that is not a trusted proxy is
// the client. With no trusted proxies X-Forwarded-For is ignored: any
// client can write it.
func ClientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	addr := peer.Addr().Unmap()
	isTrusted := func(a netip.Addr) bool {
		return slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	if !isTrusted(addr) {
		return addr
	}
	var hops []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(h, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return netip.Addr{} // a garbled chain names nobody: refused where a role has an allowlist
		}
		if a = a.Unmap(); !isTrusted(a) {
			return a
		}
	}
	return addr
}

// allowlisted applies the per-role allowlist to a plain HTTP route: the
// handler still checks the token and the role itself; this refuses a valid
// token presented from an address its role may not call from.
func allowlisted(h http.Handler, secret []byte, allow auth.Allowlist, trusted []netip.Prefix) http.Handler {
	if len(allow) == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if ok {
			if p, err := auth.Verify(secret, strings.TrimSpace(tok)); err == nil {
				if err := allow.Check(p.Role, ClientAddr(r, trusted)); err != nil {
					writeJSON(w, http.StatusForbidden, map[string]any{"code": 7, "message": "address not allowed for role " + p.Role})
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}
