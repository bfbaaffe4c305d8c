package app

import (
	"fmt"
	"strings"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// PayoutKeyPrefix begins the keys of a payout's own ledger steps
// (payout-{id}-{attempt}-{step}, payout's domain.LedgerKey); only a
// service identity posts under it (ServiceKeyPrefixes).
const PayoutKeyPrefix = "payout-"

// checkServiceOwned refuses the reversal of a transaction a service posted
// and still tracks, whose reversal that service would never see (a
// FailedPrecondition naming what finance does instead):
//   - a payout's own step (its key under PayoutKeyPrefix): reversing
//     submitted in flight emptied in_transit (the paid posting refused for
//     good) and freed the net in available for another payout (paid
//     twice); reversing paid left the payout paid with its net stuck in
//     in_transit; reversing failed, canceled or returned left a retry
//     waiting for ever. The payout's own routes move it.
//   - a commission sweep settlement posted on its own (metadata kind
//     commission_sweep, which only a service may give, or its key
//     settle-…:sweep): the statement kept its sweep, a repost under the key
//     replayed the reversed sweep, the commission sat in bank:client for
//     good, and finance's only way back was a segregation breach. A sweep
//     inside the joint settlement is refused by the closed cycle
//     (checkClosedCycles).
//
// Finance's own entries, even one whose metadata names a payout, stay
// reversible; so do the other services' postings whose service sees the
// reversal (a tax remittance: tax's RemitReversed; a charge; a deposit).
func checkServiceOwned(orig *domain.Transaction) error {
	if orig.Kind != domain.TxManual {
		return nil
	}
	key := orig.IdempotencyKey
	switch {
	case strings.HasPrefix(key, PayoutKeyPrefix):
		id, attempt, step := payoutStep(orig)
		inTransit, available := payoutAccounts(orig)
		return fmt.Errorf("transaction %s is payout %s's own %s step (attempt %s, key %s): the payout service posted it and "+
			"would not see its reversal (the payout, %s and %s would disagree for good); "+
			"it is not reversed: %s: %w", orig.ID, id, step, attempt, key, inTransit, available,
			payoutRoute(id, step, available), apperr.ErrPrecondition)
	case orig.Metadata["kind"] == domain.KindCommissionSweep || strings.HasPrefix(key, "settle-") && strings.HasSuffix(key, ":sweep"):
		return fmt.Errorf("transaction %s is the commission sweep settlement posted for provider %s in %s (key %s): it records "+
			"the transfer of that commission from bank:client to bank:operating, which settlement owns (the provider's statement "+
			"names it as its sweep) and would not see reversed; it is not reversed: have treasury make the bank transfer it "+
			"records (reference %s, as reconciliation matches it); a commission itself wrong is corrected for the provider "+
			"through an open cycle: %w", orig.ID, orig.Metadata["provider_id"], orig.Metadata["cycle_id"], key,
			orig.Metadata["cycle_id"], apperr.ErrPrecondition)
	}
	return nil
}

// payoutStep reads a payout step's payout id, attempt and step from the
// metadata payout gives it, else from its key
// (payout-{id}-{attempt}-{step}).
func payoutStep(t *domain.Transaction) (id, attempt, step string) {
	rest := strings.TrimPrefix(t.IdempotencyKey, PayoutKeyPrefix)
	if i := strings.LastIndexByte(rest, '-'); i >= 0 {
		rest, step = rest[:i], rest[i+1:]
		if j := strings.LastIndexByte(rest, '-'); j >= 0 {
			id, attempt = rest[:j], rest[j+1:]
		}
	}
	if v := t.Metadata["payout_id"]; v != "" {
		id = v
	}
	if v := t.Metadata["step"]; v != "" {
		step = v
	}
	if id == "" {
		id = rest
	}
	return id, attempt, step
}

// payoutAccounts names the in_transit and available accounts of the
// payout step's provider: its metadata's provider_id (payout gives one),
// else the provider of its postings; the placeholders when neither names
// one.
func payoutAccounts(t *domain.Transaction) (inTransit, available string) {
	provider := t.Metadata["provider_id"]
	for _, p := range t.Postings {
		if provider != "" {
			break
		}
		if a := p.Account; a.Class == domain.ClassProvider && (a.Sub == domain.ProviderInTransit || a.Sub == domain.ProviderAvailable) {
			provider = a.Party
		}
	}
	if provider == "" {
		return "provider:{id}:in_transit", "provider:{id}:available"
	}
	return ids.ProviderInTransit(provider), ids.ProviderAvailable(provider)
}

// payoutRoute is what finance does about a payout instead of reversing
// its step (available: the provider's available account).
func payoutRoute(id, step, available string) string {
	p := "POST /v1/payouts/" + id
	settle := p + ":retry pays it again, " + p + ":settle-outside records it paid by hand"
	switch step {
	case "submitted":
		return "stop it with " + p + ":cancel while its bank transfer still waits in the bank-file queue; once the rail " +
			"fails or returns it (its own step puts the net back), " + settle + "; one flagged rail_amount_mismatch is settled by " +
			p + ":resolve-amount-mismatch"
	case "paid":
		return "money the rail sends back is the payout's return, which the payout service posts when the rail reports it; " +
			"once returned, " + settle
	case "canceled":
		return "its net is back in " + available + " and joins the provider's next payout; correct an amount there " +
			"by an entry on available"
	}
	return settle
}
