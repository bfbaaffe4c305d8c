// Package auth issues and checks the bearer tokens of DESIGN §7: HS256 JWTs
// carrying a role, an audience and, for providers and renters, a subject id;
// and enforces, in one gRPC interceptor, the method → roles policy and the
// optional per-role address allowlist.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/ids"
)

// Roles.
const (
	RoleFinance  = "finance"
	RoleAuditor  = "auditor"
	RoleProvider = "provider"
	RoleRenter   = "renter"
	RoleMeter    = "meter"
	RoleAdmin    = "admin"
	// RoleService is the stack's own identity on its internal connection
	// (settlement's activities → ledger, tax). No person holds it; the
	// internal-only RPCs accept nothing else.
	RoleService = "service"
)

// Any allows every role a client holds (POST /v1/quotes); the internal
// service identity is not among them.
var Any = []string{RoleFinance, RoleAuditor, RoleProvider, RoleRenter, RoleMeter, RoleAdmin}

// Roles lists every role, the internal service identity included.
func Roles() []string { return append(slices.Clone(Any), RoleService) }

// Principal is the authenticated caller.
type Principal struct {
	Role    string
	Subject string
}

type claims struct {
	Role string `json:"role"`
	jwt.RegisteredClaims
}

const (
	issuer = "gpubill"
	// Audience is the audience every gpubill token carries and every service
	// requires: a token minted for another system with the same key (or a
	// gpubill token without it) is refused.
	Audience = "gpubill-api"
	// SecretBytesMin is the shortest signing key a service accepts: HS256
	// with a guessable key lets anyone mint a finance token.
	SecretBytesMin = 32
)

// CheckSecret refuses a signing key shorter than SecretBytesMin.
func CheckSecret(secret []byte) error {
	if len(secret) < SecretBytesMin {
		return fmt.Errorf("auth secret is %d bytes; at least %d are required (GPUBILL_AUTH_SECRET, e.g. openssl rand -hex 32)", len(secret), SecretBytesMin)
	}
	return nil
}

// needsSubject says whether a role's tokens must name whose data they see.
func needsSubject(role string) bool { return role == RoleProvider || role == RoleRenter }

// Issue signs a token for role (and subject, required for provider/renter;
// for a meter, optional: the one provider it ingests for).
func Issue(secret []byte, role, subject string, ttl time.Duration) (string, error) {
	if err := CheckSecret(secret); err != nil {
		return "", err
	}
	if !slices.Contains(Roles(), role) {
		return "", fmt.Errorf("unknown role %q (want one of %s)", role, strings.Join(Roles(), ", "))
	}
	if needsSubject(role) && subject == "" {
		return "", fmt.Errorf("role %s needs a subject (--sub)", role)
	}
	// A token the services would refuse is not issued: one already
	// expired, or naming a party no id can match (a pasted space).
	if ttl <= 0 {
		return "", fmt.Errorf("a token's lifetime must be positive, got %s", ttl)
	}
	if subject != strings.TrimSpace(subject) {
		return "", fmt.Errorf("subject %q has white space around it", subject)
	}
	// A meter's subject, when given, is the provider whose usage it alone
	// may ingest (metering refuses the others').
	if needsSubject(role) || (role == RoleMeter && subject != "") {
		if err := ids.CheckPartyID(subject); err != nil {
			return "", fmt.Errorf("subject: %w", err)
		}
	}
	return signClaims(secret, role, subject, ttl)
}

// signClaims signs the claims of a token of role and subject expiring ttl from now.
func signClaims(secret []byte, role, subject string, ttl time.Duration) (string, error) {
	now := time.Now()
	c := claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: issuer, Subject: subject, Audience: jwt.ClaimStrings{Audience}, IssuedAt: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// Verify parses and checks a token: signature, issuer, audience, expiry, a
// known role, and a subject for providers and renters (a provider token
// without one would otherwise match a request with an empty id).
func Verify(secret []byte, token string) (Principal, error) {
	p, _, err := verify(secret, token)
	return p, err
}

// verify is Verify, also answering when the token expires.
func verify(secret []byte, token string) (Principal, time.Time, error) {
	if err := CheckSecret(secret); err != nil {
		return Principal{}, time.Time{}, err
	}
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(issuer), jwt.WithAudience(Audience),
		jwt.WithExpirationRequired())
	if err != nil {
		return Principal{}, time.Time{}, err
	}
	if !slices.Contains(Roles(), c.Role) {
		return Principal{}, time.Time{}, fmt.Errorf("unknown role %q", c.Role)
	}
	if needsSubject(c.Role) && strings.TrimSpace(c.Subject) == "" {
		return Principal{}, time.Time{}, fmt.Errorf("a %s token must carry a subject", c.Role)
	}
	return Principal{Role: c.Role, Subject: c.Subject}, c.ExpiresAt.Time, nil
}

// LoadOrCreateSecret returns the configured secret or reads (creating on
// first start) a random one in dataDir/auth.secret; either way it must be
// at least SecretBytesMin long.
func LoadOrCreateSecret(configured, dataDir string) ([]byte, error) {
	if configured != "" {
		return []byte(configured), CheckSecret([]byte(configured))
	}
	path := filepath.Join(dataDir, "auth.secret")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		s := []byte(strings.TrimSpace(string(b)))
		return s, CheckSecret(s)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return nil, err
	}
	s := hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

type ctxKey struct{}

// WithPrincipal stores p in ctx (tests, internal callers).
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the caller.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// Policy maps full gRPC method names ("/gpubill.ledger.v1.LedgerService/GetAccount")
// to the roles allowed to call them. Methods absent from every policy are
// refused (fail closed), except the public ones.
type Policy map[string][]string

var public = []string{"/grpc.health.v1.Health/", "/grpc.reflection."}

// IsPublic says whether a method is open without a token (health, reflection).
func IsPublic(method string) bool {
	for _, p := range public {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// Guard is what the interceptor enforces.
type Guard struct {
	Secret []byte
	Policy Policy
	// Allow limits roles to client addresses (GPUBILL_ALLOW_<ROLE>); a role
	// without an entry may call from anywhere.
	Allow Allowlist
	// GatewayKey is the per-process value the REST gateway of this process
	// sends in GatewayKeyHeader; only a call carrying it may state the
	// HTTP client's address in ClientAddrHeader. Empty: nobody may.
	GatewayKey string
	// Tokens, when set, remembers the tokens this guard verified, so a
	// client polling with one token pays the signature check once.
	Tokens *TokenCache
}

// Metadata the REST gateway of this process adds to its loopback gRPC calls.
const (
	GatewayKeyHeader = "x-gpubill-gateway-key"
	ClientAddrHeader = "x-gpubill-client-addr"
)

// UnaryInterceptor authenticates calls and enforces policy (no allowlist).
func UnaryInterceptor(secret []byte, policy Policy) grpc.UnaryServerInterceptor {
	return Guard{Secret: secret, Policy: policy}.UnaryInterceptor()
}

// UnaryInterceptor authenticates calls, enforces the policy and the
// allowlist, and puts the Principal in the handler's context.
func (g Guard) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if IsPublic(info.FullMethod) {
			return handler(ctx, req)
		}
		p, err := g.Authorize(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(WithPrincipal(ctx, p), req)
	}
}

// Authorize checks the caller of method: a valid token (401 otherwise), a
// role the policy opens method to, and an allowed client address (403).
func (g Guard) Authorize(ctx context.Context, method string) (Principal, error) {
	allowed, ok := g.Policy[method]
	if !ok {
		return Principal{}, status.Errorf(codes.PermissionDenied, "method %s is not open to any role", method)
	}
	p, err := g.Principal(ctx)
	if err != nil {
		return Principal{}, err
	}
	if !slices.Contains(allowed, p.Role) {
		return Principal{}, status.Errorf(codes.PermissionDenied, "role %s may not call %s", p.Role, method)
	}
	if err := g.Allow.Check(p.Role, g.ClientAddr(ctx)); err != nil {
		return Principal{}, err
	}
	return p, nil
}

// Principal is the caller named by the call's token (not yet authorised).
func (g Guard) Principal(ctx context.Context) (Principal, error) {
	return principalFromMetadata(ctx, g.Secret, g.Tokens)
}

// ClientAddr is the caller's address: the gRPC peer, or, for a call from
// this process's own REST gateway (proved by GatewayKey), the HTTP client
// address the gateway stated. Invalid when unknown.
func (g Guard) ClientAddr(ctx context.Context) netip.Addr {
	if g.GatewayKey != "" {
		// ValueFromIncomingContext, not FromIncomingContext: that copies
		// every key and value of the call's metadata.
		if k := metadata.ValueFromIncomingContext(ctx, GatewayKeyHeader); len(k) == 1 && subtle.ConstantTimeCompare([]byte(k[0]), []byte(g.GatewayKey)) == 1 {
			if a := metadata.ValueFromIncomingContext(ctx, ClientAddrHeader); len(a) == 1 {
				if addr, err := netip.ParseAddr(a[0]); err == nil {
					return addr.Unmap()
				}
			}
			return netip.Addr{}
		}
	}
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		if ap, err := netip.ParseAddrPort(pr.Addr.String()); err == nil {
			return ap.Addr().Unmap()
		}
	}
	return netip.Addr{}
}

// PrincipalFromMetadata verifies the call's bearer token.
func PrincipalFromMetadata(ctx context.Context, secret []byte) (Principal, error) {
	return principalFromMetadata(ctx, secret, nil)
}

func principalFromMetadata(ctx context.Context, secret []byte, cache *TokenCache) (Principal, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(vals) == 0 {
		return Principal{}, status.Error(codes.Unauthenticated, "missing Authorization: Bearer <token>")
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok {
		return Principal{}, status.Error(codes.Unauthenticated, "Authorization must be 'Bearer <token>'")
	}
	tok = strings.TrimSpace(tok)
	if p, ok := cache.get(tok); ok {
		return p, nil
	}
	p, exp, err := verify(secret, tok)
	if err != nil {
		return Principal{}, status.Errorf(codes.Unauthenticated, "invalid token: %v", err)
	}
	cache.put(tok, p, exp)
	return p, nil
}

// ErrForbidden is returned when a provider or renter asks for another's data.
var ErrForbidden = errors.New("forbidden")

// CheckOwner lets finance/admin/auditor/service through and lets a provider or renter
// see only its own id. It returns a gRPC PermissionDenied status otherwise.
func CheckOwner(ctx context.Context, role, id string) error {
	p, ok := FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "no caller")
	}
	switch p.Role {
	case RoleFinance, RoleAdmin, RoleAuditor, RoleService:
		return nil
	case role:
		if p.Subject != "" && p.Subject == id {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "%s %s may not access %s %s", p.Role, p.Subject, role, id)
}

// BearerCreds attaches a token to every outgoing gRPC call.
type BearerCreds string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b BearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials; the
// internal connection is loopback (or a service mesh) in every deployment.
func (BearerCreds) RequireTransportSecurity() bool { return false }
