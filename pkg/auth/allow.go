package auth

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// AllowEnvPrefix + the role in upper case names a role's allowlist
// (GPUBILL_ALLOW_FINANCE=10.0.0.0/8,192.168.1.7).
const AllowEnvPrefix = "GPUBILL_ALLOW_"

// Allowlist limits each listed role to client addresses in its prefixes. A
// role without an entry may call from any address.
type Allowlist map[string][]netip.Prefix

// ParsePrefixes reads comma-separated CIDRs or bare addresses (a bare
// address is its own /32 or /128).
func ParsePrefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q: not a CIDR or address", f)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q: not a CIDR or address", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// AllowlistFromEnv reads GPUBILL_ALLOW_<ROLE> for every role (getenv is
// os.Getenv outside tests). A set but empty or unparsable list is refused,
// so a typo never opens a role to every address.
func AllowlistFromEnv(getenv func(string) string) (Allowlist, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	a := Allowlist{}
	for _, role := range Roles() {
		name := AllowEnvPrefix + strings.ToUpper(role)
		v := getenv(name)
		if v == "" {
			continue
		}
		ps, err := ParsePrefixes(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(ps) == 0 {
			return nil, fmt.Errorf("%s: no address in %q", name, v)
		}
		a[role] = ps
	}
	return a, nil
}

// Check refuses role from addr when the role has an allowlist that does not
// contain addr (an unknown address is refused too).
func (a Allowlist) Check(role string, addr netip.Addr) error {
	ps, ok := a[role]
	if !ok {
		return nil
	}
	if addr.IsValid() && slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(addr.Unmap()) }) {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "role %s may not call from address %s (%s%s)", role, addr, AllowEnvPrefix, strings.ToUpper(role))
}
