package ports

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/auth"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
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
		return domain.PartyPrefix(domain.Class(p.Role), p.Subject), true
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

// partyTx is t as the caller may read it (false: none of it). Staff read
// every entry whole. A provider or renter reads only an entry that moves
// one of its accounts, and of it only the postings on its own accounts: the
// rest (another party's wallet, the platform's accounts) is not its data.
// The entry's description, metadata and idempotency key are written by
// finance or the posting service about the whole entry and may name any
// party (a refund's "r-1 overpaid; refunded to r-2", a charge's renter_id),
// and its hash is a commitment to every posting: withheld with the
// postings, and postings_withheld says so. Whether the entry is read whole
// is domain.PartyReadsWhole, which a provider's statement lines ask too.
func partyTx(ctx context.Context, t *domain.Transaction) (*ledgerv1.Transaction, bool) {
	out := toProtoTx(t)
	own, scoped := partyPrefix(ctx)
	if !scoped {
		return out, true
	}
	accounts := make([]string, 0, len(out.Postings))
	mine := make([]*ledgerv1.Posting, 0, len(out.Postings))
	for _, p := range out.Postings {
		accounts = append(accounts, p.Account)
		if strings.HasPrefix(p.Account, own) {
			mine = append(mine, p)
		}
	}
	switch {
	case len(mine) == 0:
		return nil, false
	case domain.PartyReadsWhole(own, accounts):
		return out, true
	}
	out.Postings, out.PostingsWithheld = mine, true
	out.Description, out.IdempotencyKey, out.Hash, out.Metadata = "", "", "", map[string]string{}
	return out, true
}
