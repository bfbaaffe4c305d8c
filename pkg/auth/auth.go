// Package auth issues and checks the bearer tokens of DESIGN §7: HS256 JWTs
// carrying a role and, for providers and renters, a subject id.
package auth

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Roles.
const (
	RoleFinance  = "finance"
	RoleAuditor  = "auditor"
	RoleProvider = "provider"
	RoleRenter   = "renter"
	RoleMeter    = "meter"
	RoleAdmin    = "admin"
)

// Any allows every authenticated role (POST /v1/quotes).
var Any = []string{RoleFinance, RoleAuditor, RoleProvider, RoleRenter, RoleMeter, RoleAdmin}

// Roles lists every role.
func Roles() []string { return slices.Clone(Any) }

// Principal is the authenticated caller.
type Principal struct {
	Role    string
	Subject string
}

type claims struct {
	Role string `json:"role"`
	jwt.RegisteredClaims
}

const issuer = "gpubill"

// Issue signs a token for role (and subject, required for provider/renter).
func Issue(secret []byte, role, subject string, ttl time.Duration) (string, error) {
	if !slices.Contains(Any, role) {
		return "", fmt.Errorf("unknown role %q (want one of %s)", role, strings.Join(Any, ", "))
	}
	if (role == RoleProvider || role == RoleRenter) && subject == "" {
		return "", fmt.Errorf("role %s needs a subject (--sub)", role)
	}
	now := time.Now()
	c := claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: issuer, Subject: subject, IssuedAt: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// Verify parses and checks a token.
func Verify(secret []byte, token string) (Principal, error) {
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(issuer), jwt.WithExpirationRequired())
	if err != nil {
		return Principal{}, err
	}
	if !slices.Contains(Any, c.Role) {
		return Principal{}, fmt.Errorf("unknown role %q", c.Role)
	}
	return Principal{Role: c.Role, Subject: c.Subject}, nil
}

// LoadOrCreateSecret returns the configured secret or reads (creating on
// first start) a random one in dataDir/auth.secret.
func LoadOrCreateSecret(configured, dataDir string) ([]byte, error) {
	if configured != "" {
		return []byte(configured), nil
	}
	path := filepath.Join(dataDir, "auth.secret")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return []byte(strings.TrimSpace(string(b))), nil
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

// UnaryInterceptor authenticates calls and enforces policy.
func UnaryInterceptor(secret []byte, policy Policy) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		for _, p := range public {
			if strings.HasPrefix(info.FullMethod, p) {
				return handler(ctx, req)
			}
		}
		allowed, ok := policy[info.FullMethod]
		if !ok {
			return nil, status.Errorf(codes.PermissionDenied, "method %s is not open to any role", info.FullMethod)
		}
		p, err := principalFromMetadata(ctx, secret)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(allowed, p.Role) {
			return nil, status.Errorf(codes.PermissionDenied, "role %s may not call %s", p.Role, info.FullMethod)
		}
		return handler(WithPrincipal(ctx, p), req)
	}
}

func principalFromMetadata(ctx context.Context, secret []byte) (Principal, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return Principal{}, status.Error(codes.Unauthenticated, "missing Authorization: Bearer <token>")
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok {
		return Principal{}, status.Error(codes.Unauthenticated, "Authorization must be 'Bearer <token>'")
	}
	p, err := Verify(secret, strings.TrimSpace(tok))
	if err != nil {
		return Principal{}, status.Errorf(codes.Unauthenticated, "invalid token: %v", err)
	}
	return p, nil
}

// ErrForbidden is returned when a provider or renter asks for another's data.
var ErrForbidden = errors.New("forbidden")

// CheckOwner lets finance/admin/auditor through and lets a provider or renter
// see only its own id. It returns a gRPC PermissionDenied status otherwise.
func CheckOwner(ctx context.Context, role, id string) error {
	p, ok := FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "no caller")
	}
	switch p.Role {
	case RoleFinance, RoleAdmin, RoleAuditor:
		return nil
	case role:
		if p.Subject == id {
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
