package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/jsonplain"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// CreateTransactionInput is a manual entry.
type CreateTransactionInput struct {
	IdempotencyKey string
	Description    string
	EffectiveAt    *time.Time // nil: now
	Metadata       map[string]string
	Postings       []domain.RawPosting
	// Internal: posted by the stack's own service identity (settlement),
	// which alone may name a settlement in the metadata (SettlementKinds).
	Internal bool
}

// SettlementKinds are the metadata kinds of settlement's own postings:
// the one that empties a closed cycle's pending account (checkClosedCycles
// takes no other debit of it) and what reconciliation classifies as a
// settlement movement. A finance entry naming one is refused.
var SettlementKinds = map[string]bool{domain.KindSettlement: true, domain.KindCommissionSweep: true}

// ServiceKeyPrefixes begin the idempotency keys gpubill's services post
// under (settlement and its sweep, payout's steps, the tax remittances,
// pricing's charges): a finance entry under one of them took the key first,
// and the service's own post was then a conflict for good (a remittance,
// a provider's settlement stalled).
var ServiceKeyPrefixes = []string{"settle-", "payout-", "rem-", "chg_"}

// checkServiceKey refuses a key of ServiceKeyPrefixes chosen by anyone but
// a service (internal).
func checkServiceKey(key string, internal bool) []domain.Violation {
	for _, p := range ServiceKeyPrefixes {
		if strings.HasPrefix(key, p) && !internal {
			return []domain.Violation{{Field: "idempotency_key", Reason: fmt.Sprintf(
				"keys starting %s are gpubill's services' own (settlement, payout, tax remittance, charges)", strings.Join(ServiceKeyPrefixes, ", "))}}
		}
	}
	return nil
}

// CreateTransaction posts a manual entry (or a settlement's postings).
func (a *App) CreateTransaction(ctx context.Context, in CreateTransactionInput) (*domain.Transaction, error) {
	var vs []domain.Violation
	key := strings.TrimSpace(in.IdempotencyKey)
	if key == "" || len(key) > domain.IdempotencyKeyMax {
		vs = append(vs, domain.Violation{Field: "idempotency_key", Reason: "required, at most 256 characters"})
	}
	vs = append(vs, domain.CheckChosenKey(key, "")...)
	if len(in.Description) > domain.DescriptionMax {
		vs = append(vs, domain.Violation{Field: "description", Reason: "at most 1024 characters"})
	}
	vs = append(vs, domain.CheckMetadata(in.Metadata)...)
	vs = append(vs, checkServiceKey(key, in.Internal)...)
	if k := in.Metadata["kind"]; SettlementKinds[k] && !in.Internal {
		vs = append(vs, domain.Violation{Field: "metadata.kind", Reason: fmt.Sprintf("%q is settlement's own; a manual entry may not name it", k)})
	}
	vs = append(vs, domain.CheckEffectiveAt(in.EffectiveAt)...)
	postings, pvs := domain.ParsePostings(in.Postings)
	vs = append(vs, pvs...)
	vs = append(vs, a.checkCycles(postings)...)
	kind, kvs := houseEntryKind(in.Metadata, postings)
	vs = append(vs, kvs...)
	if err := invalid(vs); err != nil {
		return nil, err
	}
	if kind == domain.TxBadDebtWriteOff {
		if err := a.checkWriteOffClosed(ctx, key, postings); err != nil {
			return nil, err
		}
	}
	if kind == domain.TxManual {
		if err := a.checkClosedCredits(ctx, key, postings); err != nil {
			return nil, err
		}
	}
	if in.Metadata["kind"] == domain.KindRailRefund {
		if err := a.checkRailRefund(ctx, key, in.Metadata["external_ref"], postings); err != nil {
			return nil, err
		}
	}
	now := a.now()
	eff, effStr := now, ""
	if in.EffectiveAt != nil {
		eff = in.EffectiveAt.UTC().Truncate(time.Microsecond)
		effStr = eff.Format(time.RFC3339Nano)
	}
	hash, err := transactionRequestHash(in.Description, effStr, in.Metadata, domain.CanonicalPostings(postings))
	if err != nil {
		return nil, err
	}
	t := &domain.Transaction{
		ID: ids.New(""), IdempotencyKey: key, Kind: kind, Description: in.Description,
		EffectiveAt: eff, CreatedAt: now, Metadata: in.Metadata, Postings: postings, RequestHash: hash,
	}
	// Its audit record, as the interceptor would store it for this
	// answer (CreateTransactionResponse: the request's ids and the
	// transaction's id), goes into the write's own transaction when the
	// group commits in one (PostNew). A write-off or a refund is posted
	// alone (postsAlone).
	return a.postGrouped(ctx, t, audited(audit.ClaimFrom(ctx), "transaction_id="+t.ID))
}

// postsAlone: t is posted alone, never in a group (postGrouped diverts
// it): a bad debt write-off or a renter's refund has its wallet's balance
// judged before the commit (checkWriteOffs, checkRefunds), which postOne
// alone does; a group's one-round-trip write (PostNew) does not for a
// credit, nor for a wallet, which may go negative, and commitGroup's Post
// judges overdrafts only.
func postsAlone(t *domain.Transaction) bool {
	return t.Kind == domain.TxBadDebtWriteOff || domain.IsRenterRefund(t.Postings) || len(paidFromWallets(t)) > 0
}

// paidFromWallets are the renter wallets (address|currency) a finance
// entry t takes money out of, on its net, by any shape but a charge's
// (credits on providers' pending accounts only, which may take a wallet
// below zero: its credit limit): a refund (Dr wallets / Cr bank:client),
// a move to another renter's wallet, a payout with a fee to the house, a
// charge mixed with any of these. Each pays out at most what the wallet
// holds (checkRefunds): taken below zero, the wallet's draw was other
// renters' money in bank:client, handed to whoever was credited (a
// second wallet then refunded, the rail, the house). A rail_refund
// records money already gone and is not judged; nor is a reversal, nor
// a service's posting (settlement's touch no wallet).
func paidFromWallets(t *domain.Transaction) map[string]bool {
	if t.Kind != domain.TxManual || t.Metadata["kind"] == domain.KindRailRefund {
		return nil
	}
	charge := true
	for _, p := range t.Postings {
		if p.Direction == domain.Credit && (p.Account.Class != domain.ClassProvider || p.Account.Cycle == "") {
			charge = false // credits something other than a provider's pending account
		}
	}
	if charge {
		return nil
	}
	var out map[string]bool
	for k, d := range renterNets(t.Postings) {
		if d.IsNegative() {
			if out == nil {
				out = map[string]bool{}
			}
			out[k] = true
		}
	}
	return out
}

// renterNets is what postings net to on each renter wallet, credits less
// debits, by walletKey: positive, the entry credits the wallet; negative,
// it takes money out of it.
func renterNets(ps []domain.Posting) map[string]decimal.Decimal {
	net := map[string]decimal.Decimal{}
	for _, p := range ps {
		if p.Account.Class != domain.ClassRenter {
			continue
		}
		k := walletKey(p.Account.Address, p.Currency)
		if p.Direction == domain.Credit {
			net[k] = net[k].Add(p.Amount)
		} else {
			net[k] = net[k].Sub(p.Amount)
		}
	}
	return net
}

// walletKey names a renter wallet's balance in a currency, as
// paidFromWallets names them and checkRefunds looks them up.
func walletKey(address, currency string) string { return address + "|" + currency }

// reasonMax bounds the reason finance gives for an entry of the house's
// own money into the client pool.
const reasonMax = 1024

// houseEntryKind is the transaction kind of a finance entry: the house's
// own money into the client pool when its metadata kind names one and its
// postings have that shape, with a reason (metadata.reason); else manual.
// platform:expense:bad_debt takes a write-off's postings only, so its
// balance is what the house wrote off.
func houseEntryKind(md map[string]string, ps []domain.Posting) (domain.TxKind, []domain.Violation) {
	var vs []domain.Violation
	kind := domain.TxManual
	switch md["kind"] {
	case domain.KindClientMoneyFunding:
		kind = domain.TxClientMoneyFunding
		if !domain.IsClientMoneyFunding(ps) {
			vs = append(vs, domain.Violation{Field: "postings", Reason: "client_money_funding moves house money into the client pool only: debits on bank:client, credits on bank:operating"})
		}
	case domain.KindBadDebtWriteOff:
		kind = domain.TxBadDebtWriteOff
		if !domain.IsBadDebtWriteOff(ps) {
			vs = append(vs, domain.Violation{Field: "postings", Reason: "bad_debt_write_off debits platform:expense:bad_debt and credits renter wallets only"})
		}
	default:
		for i, p := range ps {
			if p.Account.Address == domain.PlatformBadDebt {
				vs = append(vs, domain.Violation{Field: fmt.Sprintf("postings[%d].account", i),
					Reason: "platform:expense:bad_debt takes a bad_debt_write_off entry only (metadata.kind)"})
			}
		}
		return kind, vs
	}
	if r := strings.TrimSpace(md["reason"]); r == "" || len(r) > reasonMax {
		vs = append(vs, domain.Violation{Field: "metadata.reason", Reason: fmt.Sprintf("required for %s, at most %d bytes", md["kind"], reasonMax)})
	}
	return kind, vs
}

// checkWriteOffs refuses a bad debt write-off that takes a renter wallet
// above zero: only a debit balance (the renter's debt) is written off; more
// would hand the house's money to the renter.
func checkWriteOffs(txs []*domain.Transaction, changes []domain.BalanceChange) error {
	written := false
	for _, t := range txs {
		written = written || t.Kind == domain.TxBadDebtWriteOff
	}
	if !written {
		return nil
	}
	var vs []domain.Violation
	for _, c := range changes {
		if c.Account.Class == domain.ClassRenter && c.Delta.IsPositive() && c.After.IsPositive() {
			vs = append(vs, domain.Violation{Field: "postings", Reason: fmt.Sprintf(
				"%s would be %s in %s after this write-off (%s before): a write-off clears at most the renter's debit balance",
				c.Account.Address, c.After.String(), c.Currency, c.Before().String())})
		}
	}
	return invalid(vs)
}

// checkWriteOffClosed refuses a bad debt write-off crediting the wallet of
// a renter the ledger does not know as closed (ledger.renters, from
// party.updated; one it has no record of is not closed): the credit puts
// the wallet back within its credit limit, and lease control resumes a
// stopped renter that is not closed (the sweep's resumableSQL), which then
// runs GPUs and builds the debt anew. A closed renter stays stopped, and
// closing is final (metering), so the check holds at the post. A
// write-off posted under key before is answered as any replay is.
func (a *App) checkWriteOffClosed(ctx context.Context, key string, ps []domain.Posting) error {
	var vs []domain.Violation
	seen := map[string]bool{}
	for _, p := range ps {
		r := p.Account.Party
		if p.Direction != domain.Credit || p.Account.Class != domain.ClassRenter || seen[r] {
			continue
		}
		seen[r] = true
		closedAt, err := a.Store.RenterClosedAt(ctx, r)
		if err != nil {
			return fmt.Errorf("bad debt write-off %s: %w", key, err)
		}
		if closedAt.IsZero() {
			vs = append(vs, domain.Violation{Field: "postings", Reason: fmt.Sprintf(
				"renter %s is not closed in the ledger: a bad_debt_write_off clears a closed renter's debt only (an open renter written off runs GPUs again); "+
					"close the renter first (PATCH /v1/renters/%s, status closed), and if it was just closed, retry once the close has reached the ledger", r, r)})
		}
	}
	if len(vs) == 0 {
		return nil
	}
	if posted, err := a.keyPosted(ctx, key); err != nil || posted {
		return err // posted before: postOne answers the replay (or the key's conflict)
	}
	return invalid(vs)
}

// keyPosted tells whether a transaction is stored under the idempotency
// key: posted before, its replay is answered by the post (the original,
// or the key's conflict for another request), not judged again by rules
// for new writes that may have come after it, nor against a state (a
// renter closed since) that has changed.
func (a *App) keyPosted(ctx context.Context, key string) (bool, error) {
	_, _, err := a.Store.TxByKey(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, apperr.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("idempotency key %q: %w", key, err)
}

// checkRefunds refuses a renter's refund (domain.IsRenterRefund), or any
// finance entry paying money out of a wallet by another shape
// (paidFromWallets), that takes a wallet it debits below zero: it pays
// out at most what the wallet holds, so a second refund of the same
// balance (two operators, two keys) is refused, not paid from other
// clients' money. Judged on the balance after the post, under the balance
// row's lock: two refunds at once are judged one after the other. A
// rail_refund records money a rail already returned, and may.
func checkRefunds(txs []*domain.Transaction, changes []domain.BalanceChange) error {
	debited := map[string]bool{}
	for _, t := range txs {
		for k := range paidFromWallets(t) {
			debited[k] = true
		}
	}
	var vs []domain.Violation
	for _, c := range changes {
		if debited[walletKey(c.Account.Address, c.Currency)] && c.Delta.IsNegative() && c.After.IsNegative() {
			vs = append(vs, domain.Violation{Field: "postings", Reason: fmt.Sprintf(
				"%s holds %s %s: a refund, or any entry paying out of a renter's wallet but a charge, pays out at most what the wallet holds (%s after it); metadata.kind rail_refund is only for a top-up the rail itself has already returned to its payer (naming that deposit), not a way past this check",
				c.Account.Address, c.Before().String(), c.Currency, c.After.String())})
		}
	}
	return invalid(vs)
}

// checkClosedCredits refuses (409, naming the renter) a finance entry
// whose net credits the wallet of a renter the ledger knows as closed
// (ledger.renters, from party.updated), as a deposit is refused
// (checkRenterOpen): the renter has left and its balance was refunded, and
// money credited after that (from bank:client, another wallet, a
// provider) is client money in a wallet nobody spends or claims. A closed
// wallet is credited by a bad_debt_write_off (up to 0: checkWriteOffs)
// and by a reversal, which restores the reversed entry's state exactly (a
// refund the bank returned is owed to the renter again, with its money
// back in bank:client); neither comes here. An entry posted under key
// before the close is answered as any replay is.
func (a *App) checkClosedCredits(ctx context.Context, key string, ps []domain.Posting) error {
	net := renterNets(ps)
	asked := map[string]bool{}
	for _, p := range ps {
		r := p.Account.Party
		if p.Account.Class != domain.ClassRenter || asked[r] || !net[walletKey(p.Account.Address, p.Currency)].IsPositive() {
			continue
		}
		asked[r] = true
		closedAt, err := a.renterClosedAt(ctx, r)
		if err != nil {
			return fmt.Errorf("entry %s: %w", key, err)
		}
		if closedAt.IsZero() {
			continue
		}
		if posted, err := a.keyPosted(ctx, key); err != nil || posted {
			return err // posted before: the post answers the replay (or the key's conflict)
		}
		return fmt.Errorf("renter %s is closed (since %s): a finance entry may not credit a closed renter's wallet "+
			"(its debt is cleared by a bad_debt_write_off, a wrong entry by its reversal); return the money to where it came from: %w",
			r, closedAt.UTC().Format(time.RFC3339), apperr.ErrConflict)
	}
	return nil
}

// checkRailRefund: a rail_refund debits renter wallets and credits
// bank:client only, and names, by external_ref, a deposit to a renter
// whose wallet it debits, in the deposit's currency (the top-up the rail
// refunded); what it takes of the deposit is judged with the post
// (checkRailRefunds). A rail_refund posted under key before is answered
// as any replay is, looked up first: one accepted before a rule of these
// (the currency's, 27b6e2c2) answers as it did, not 400.
func (a *App) checkRailRefund(ctx context.Context, key, ref string, ps []domain.Posting) error {
	if posted, err := a.keyPosted(ctx, key); err != nil || posted {
		return err // posted before: postOne answers the replay (or the key's conflict)
	}
	if !domain.IsRenterRefund(ps) {
		return invalid([]domain.Violation{{Field: "postings", Reason: "rail_refund debits renter wallets and credits bank:client only"}})
	}
	bad := func(reason string) error {
		return invalid([]domain.Violation{{Field: "metadata.external_ref", Reason: reason}})
	}
	if strings.TrimSpace(ref) == "" {
		return bad("required for rail_refund: the refunded deposit's external_ref (alipay:<trade_no>, wechatpay:<transaction_id>)")
	}
	id, _, err := a.Store.TxByKey(ctx, domain.DepositKeyPrefix+ref)
	if errors.Is(err, apperr.ErrNotFound) {
		return bad(fmt.Sprintf("no deposit has external_ref %q", ref))
	}
	if err != nil {
		return fmt.Errorf("rail refund of %s: %w", ref, err)
	}
	dep, err := a.getTransaction(ctx, id)
	if err != nil {
		return fmt.Errorf("rail refund of %s: %w", ref, err)
	}
	for _, p := range ps {
		if p.Direction == domain.Debit && p.Account.Address != domain.RenterWallet(dep.Metadata["renter_id"]) {
			return bad(fmt.Sprintf("deposit %q is to %s, not %s", ref, dep.Metadata["renter_id"], p.Account.Address))
		}
		if len(dep.Postings) > 0 && p.Currency != dep.Postings[0].Currency {
			return bad(fmt.Sprintf("deposit %q is in %s, not %s", ref, dep.Postings[0].Currency, p.Currency))
		}
	}
	return nil
}

// checkCycles refuses a posting to a provider's pending account of a cycle
// id that is not a cycle's: the address grammar takes any cyc-YYYYMMDD, and
// money credited to cyc-20260102 was never settled (settlement lists real
// cycles), nor refused once the cycle holding that day had closed.
func (a *App) checkCycles(postings []domain.Posting) []domain.Violation {
	var vs []domain.Violation
	for i, p := range postings {
		if p.Account.Cycle == "" {
			continue
		}
		if _, err := a.Calendar.Parse(p.Account.Cycle); err != nil {
			reason := err.Error()
			if day, perr := time.Parse("20060102", strings.TrimPrefix(p.Account.Cycle, "cyc-")); perr == nil {
				reason += fmt.Sprintf("; %s is in %s", day.Format(time.DateOnly), a.Calendar.At(day).ID)
			}
			vs = append(vs, domain.Violation{Field: fmt.Sprintf("postings[%d].account", i), Reason: reason})
		}
	}
	return vs
}

// transactionRequestHash equals domain.RequestHash("transaction", the same
// fields as a map), whose encoding/json by reflection showed in the REST
// write's profile: the same bytes (keys sorted, strings as encoding/json
// writes them: pkg/jsonplain) appended by hand, so the hashes stored for
// earlier requests still match their replays.
func transactionRequestHash(description, effectiveAt string, metadata map[string]string, postings []string) ([32]byte, error) {
	b := make([]byte, 0, 128+len(description)+64*len(postings)+32*len(metadata))
	b = append(b, `{"kind":"transaction","fields":{"description":`...)
	b, err := jsonplain.AppendString(b, description)
	if err != nil {
		return [32]byte{}, err
	}
	b = append(b, `,"effective_at":`...)
	if b, err = jsonplain.AppendString(b, effectiveAt); err != nil {
		return [32]byte{}, err
	}
	b = append(b, `,"metadata":`...)
	if b, err = domain.AppendJSONStrings(b, metadata); err != nil {
		return [32]byte{}, err
	}
	b = append(b, `,"postings":`...)
	if postings == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, p := range postings {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = jsonplain.AppendString(b, p); err != nil {
				return [32]byte{}, err
			}
		}
		b = append(b, ']')
	}
	b = append(b, "}}"...)
	return sha256.Sum256(b), nil
}
