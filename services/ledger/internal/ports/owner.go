package ports

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A provider or renter reads only the accounts of its own party: a renter
// its wallet, a provider its pending, available and in-transit accounts.
// Staff roles pass (the policy already limited who gets here).

// partyPrefix is "renter:{id}:" or "provider:{id}:" for a provider or renter
// caller, "" for every other role.
func partyPrefix(ctx context.Context) (string, bool) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return "", false
	}
	switch p.Role {
	case auth.RoleProvider, auth.RoleRenter:
		return p.Role + ":" + p.Subject + ":", true
	}
	return "", false
}

// isService: the caller is the stack's own service identity.
func isService(ctx context.Context) bool {
	p, ok := auth.FromContext(ctx)
	return ok && p.Role == auth.RoleService
}

func denied(ctx context.Context, what string) error {
	p, _ := auth.FromContext(ctx)
	return status.Errorf(codes.PermissionDenied, "%s %s may not read %s", p.Role, p.Subject, what)
}

// checkOwnAccount refuses a provider or renter an account that is not its own.
func checkOwnAccount(ctx context.Context, address string) error {
	own, scoped := partyPrefix(ctx)
	if !scoped || strings.HasPrefix(address, own) {
		return nil
	}
	return denied(ctx, "account "+address)
}

// ownPrefix narrows a provider's or renter's account listing to its own
// accounts: no prefix or "provider:p-1" become "provider:p-1:"; anything
// outside them is refused.
func ownPrefix(ctx context.Context, prefix string) (string, error) {
	own, scoped := partyPrefix(ctx)
	switch {
	case !scoped:
		return prefix, nil
	case prefix == "" || prefix == strings.TrimSuffix(own, ":"):
		return own, nil
	case strings.HasPrefix(prefix, own):
		return prefix, nil
	}
	return "", denied(ctx, "accounts under "+prefix)
}

// touchesOwn says whether a transaction moves one of the caller's accounts
// (always true for staff roles).
func touchesOwn(ctx context.Context, t *domain.Transaction) bool {
	own, scoped := partyPrefix(ctx)
	if !scoped {
		return true
	}
	for _, p := range t.Postings {
		if strings.HasPrefix(p.Account.Address, own) {
			return true
		}
	}
	return false
}
