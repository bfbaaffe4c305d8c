package app

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// SettleProvider is the provider workflow's one local activity: prepare (hold,
// tier, gross per currency), then per unsettled currency the tax split, the
// settlement transaction with its commission sweep and the statement with
// settlement.settled. Every step is idempotent (tax and ledger on the
// settlement/sweep keys, the statement on the settlement row and outbox
// message id), so a retry after a crash anywhere repeats nothing.
func (s *Steps) SettleProvider(ctx context.Context, in ProviderInput) (ProviderResult, error) {
	prep, err := s.prepareProvider(ctx, in)
	if err != nil {
		return ProviderResult{}, step("prepare", err)
	}
	if prep.Held {
		return ProviderResult{Held: true}, nil
	}
	var res ProviderResult
	for _, it := range prep.Items {
		if it.Status == domain.ItemSettled || it.Gross.IsNegative() {
			continue
		}
		if err := s.settleCurrency(ctx, in, prep, it); err != nil {
			return res, err
		}
		res.Settled = append(res.Settled, it.Currency)
	}
	return res, nil
}

// settleCurrency settles one currency of a prepared provider: the tax
// split, the ledger transaction and the statement. A gross of 0 (only
// charges billed at 0.00 in the cycle) has nothing to split, withhold or
// move: its statement of 0.00, which carries their GPU-hours, is written
// alone. The tax service is not asked (a withholding no settlement posts
// stays unremitted, and late, for good) and nothing is posted (the ledger
// refuses a posting of 0).
func (s *Steps) settleCurrency(ctx context.Context, in ProviderInput, prep Prepared, it Item) error {
	tax := TaxResult{Split: domain.Split{Currency: it.Currency, Gross: it.Gross, CommissionRate: prep.CommissionRate}}
	var posted Posted
	if !it.Gross.IsZero() {
		var err error
		tax, err = s.computeTax(ctx, TaxInput{
			CycleID: in.CycleID, ProviderID: in.ProviderID, Currency: it.Currency, Gross: it.Gross,
			CommissionRate: prep.CommissionRate, ClosedAt: prep.ClosedAt,
			IdempotencyKey: domain.SettlementKey(in.CycleID, in.ProviderID, it.Currency),
		})
		if err != nil {
			return step("tax of "+it.Currency, err)
		}
		if posted, err = s.PostSettlement(ctx, PostInput{CycleID: in.CycleID, ProviderID: in.ProviderID, Split: tax.Split}); err != nil {
			return step("post settlement of "+it.Currency, err)
		}
	}
	if err := s.finalizeSettlement(ctx, FinalizeInput{
		CycleID: in.CycleID, ProviderID: in.ProviderID, Tier: prep.Tier, Tax: tax,
		TransactionID: posted.TransactionID, SweepID: posted.SweepID,
	}); err != nil {
		return step("finalize "+it.Currency, err)
	}
	return nil
}

// prepareProvider reads the provider's hold, tier (→ commission rate) and
// gross per currency.
func (s *Steps) prepareProvider(ctx context.Context, in ProviderInput) (Prepared, error) {
	held, tier, snapped, closedAt, items, err := s.Store.Prepare(ctx, in.CycleID, in.ProviderID)
	if err != nil {
		return Prepared{}, err
	}
	if tier == "" {
		// No party.updated seen yet: the standard tier (DESIGN §5's
		// default tier for new providers).
		tier = split.TierStandard
	}
	// The rate of the tier at the snapshot, kept with it: worked out again
	// at each attempt, a worker with other GPUBILL_COMMISSION_RATES (a
	// rolling deploy during a close) asked the tax service for another
	// rate on the withholding it had recorded, refused for good, the net
	// already in available and no statement ever written. A row
	// snapshotted before the rate was kept takes the policy's.
	rate := snapped.Decimal
	if !snapped.Valid {
		if rate, err = s.Commission.Rate(tier); err != nil {
			return Prepared{}, Rejected(fmt.Errorf("commission of %s: %w", in.ProviderID, err))
		}
	}
	p := Prepared{Held: held, Tier: tier, CommissionRate: rate, ClosedAt: closedAt}
	for _, it := range items {
		p.Items = append(p.Items, Item{Currency: it.Currency, Gross: it.Gross, Status: it.Status})
	}
	return p, nil
}

// computeTax asks the tax service to split gross and record the withholding
// (rule set and version from its rule table; idempotent on the key), and
// checks the split it answers.
func (s *Steps) computeTax(ctx context.Context, in TaxInput) (TaxResult, error) {
	res, err := s.Tax.ComputeWithholding(ctx, in)
	if err != nil {
		return TaxResult{}, err
	}
	if err := res.Split.Check(); err != nil {
		return TaxResult{}, Rejected(err)
	}
	return res, nil
}

// PostSettlement posts the provider's settlement and its commission sweep as
// ONE ledger transaction (DESIGN §4), so no report ever reads the commission
// earned but still in the client bank account: Dr
// provider:{id}:pending:{cycle} gross; Cr platform:revenue:commission,
// tax:withheld:{j}, provider:{id}:available net; Dr bank:operating, Cr
// bank:client the commission. Idempotent on the settlement key. It returns the
// transaction id and the id of the transaction that swept the commission (the
// same one; "" without a commission).
//
// A settlement posted before the sweep joined it (the same key, without the
// sweep legs) conflicts with the joint body: it is then replayed as it was and
// its sweep posted on its own key, as that code did.
//
// When bank:client cannot fund the sweep (renters on credit, or a refund
// that emptied it: the ledger refuses to overdraw it), the joint body is
// refused as a whole; the provider's settlement must not wait on client
// money that is not the provider's concern. The settlement is then posted
// without the sweep (the same form as the begun one above, so a retry
// replays it) and the sweep deferred: SweepID "" on the statement, swept
// later under its own key by SweepCommission. A refusal that is not the
// sweep's refuses the settlement alone too, and is returned. A sweep whose
// key holds another body is deferred the same way (and counted).
func (s *Steps) PostSettlement(ctx context.Context, in PostInput) (Posted, error) {
	sp := in.Split
	if err := sp.Check(); err != nil {
		return Posted{}, Rejected(err)
	}
	cur, err := money.Lookup(sp.Currency)
	if err != nil {
		return Posted{}, Rejected(err)
	}
	settlement := domain.SettlementLegs(in.ProviderID, in.CycleID, sp)
	sweep := domain.SweepLegs(sp)
	joint := LedgerTx{
		Key:         domain.SettlementKey(in.CycleID, in.ProviderID, cur.Code),
		Description: fmt.Sprintf("settlement of %s for %s", in.ProviderID, in.CycleID),
		Metadata: map[string]string{
			"kind": "settlement", "cycle_id": in.CycleID, "provider_id": in.ProviderID,
			"commission_rate": sp.CommissionRate.String(), "jurisdiction": sp.Jurisdiction,
		},
		Currency: cur,
		Legs:     append(append([]domain.Leg{}, settlement...), sweep...),
	}
	id, err := s.Ledger.CreateTransaction(ctx, joint)
	if len(sweep) > 0 && IsRejected(err) { // a conflict is Rejected too
		return s.postSettlementThenSweep(ctx, in, joint, settlement)
	}
	if err != nil {
		return Posted{}, err
	}
	out := Posted{TransactionID: id}
	if len(sweep) > 0 {
		out.SweepID = out.TransactionID
	}
	return out, nil
}

// postSettlementThenSweep is the two-transaction settlement of earlier code,
// kept for a settlement it had begun and for one whose sweep bank:client
// cannot fund yet: the settlement posted (or replayed) under its key, then
// the sweep under its own, deferred (SweepID "") when the ledger refuses it
// or its key holds another body (a Conflict: counted in
// gpubill_settlement_commission_sweep_conflicts_total and logged here, and
// again by each hourly run that meets it). A Conflict once failed the
// provider's settlement, its net already posted to available, every retry.
func (s *Steps) postSettlementThenSweep(ctx context.Context, in PostInput, joint LedgerTx, settlement []domain.Leg) (Posted, error) {
	old := joint
	old.Legs = settlement
	id, err := s.Ledger.CreateTransaction(ctx, old)
	if err != nil {
		return Posted{}, err
	}
	u := domain.Unswept{CycleID: in.CycleID, ProviderID: in.ProviderID,
		Currency: joint.Currency.Code, Commission: in.Split.Commission}
	sw, err := s.postSweep(ctx, u)
	if IsConflict(err) {
		// The sweep key holds another body: the settlement is the
		// provider's and is posted, so it goes on; the sweep is left
		// unswept (SweepID ""), counted and logged as the hourly run
		// does, which meets it, counts it and alerts on it each run.
		s.sweepConflicted(u, err)
		return Posted{TransactionID: id}, nil
	}
	if IsRejected(err) {
		return Posted{TransactionID: id}, nil // deferred: SweepCommission sweeps it
	}
	if err != nil {
		return Posted{}, err
	}
	return Posted{TransactionID: id, SweepID: sw}, nil
}

// postSweep posts a settlement's commission sweep on its own (Dr
// bank:operating, Cr bank:client; idempotent on the sweep key). The ledger
// refuses it (Rejected) while bank:client cannot fund it.
func (s *Steps) postSweep(ctx context.Context, u domain.Unswept) (string, error) {
	cur, err := money.Lookup(u.Currency)
	if err != nil {
		return "", RejectedAs(RefusedUnknownCurrency, err)
	}
	return s.Ledger.CreateTransaction(ctx, LedgerTx{
		Key:         domain.SweepKey(u.CycleID, u.ProviderID, cur.Code),
		Description: fmt.Sprintf("commission sweep of %s for %s", u.ProviderID, u.CycleID),
		Metadata:    map[string]string{"kind": "commission_sweep", "cycle_id": u.CycleID, "provider_id": u.ProviderID},
		Currency:    cur,
		Legs:        domain.SweepLegs(domain.Split{Commission: u.Commission}),
	})
}

// finalizeSettlement writes the statement (with the charge lines behind the
// gross) and, in the same transaction, settlement.settled.{provider} for payout.
func (s *Steps) finalizeSettlement(ctx context.Context, in FinalizeInput) error {
	sp := in.Tax.Split
	var exclude []string
	for _, id := range []string{in.TransactionID, in.SweepID} {
		if id != "" && !slices.Contains(exclude, id) {
			exclude = append(exclude, id)
		}
	}
	lines, err := s.Ledger.StatementLines(ctx, domain.PendingAccount(in.ProviderID, in.CycleID), sp.Currency, exclude)
	if err != nil {
		return err
	}
	return s.Store.Finalize(ctx, domain.Settled{
		CycleID: in.CycleID, ProviderID: in.ProviderID, Tier: in.Tier, Split: sp,
		RuleSet: in.Tax.RuleSet, RuleVersion: in.Tax.RuleVersion, WithholdingID: in.Tax.WithholdingID,
		TransactionID: in.TransactionID, SweepID: in.SweepID, Lines: lines,
	}, s.Clock.Now())
}
