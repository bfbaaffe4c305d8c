package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// checkRailRefunds refuses a rail_refund that takes more of its deposit
// than the deposit brought in, less what the rail_refunds naming it and
// its reversal already took: two people recording the same refund the
// rail made (two on-call people paged by GpubillTopUpRefundedAtTheRail,
// or one reposting a refused plain refund as a rail_refund) record it
// once, not from other renters' money in bank:client. Run after tx.Post,
// which holds the balance row of the wallet t debits: every rail_refund
// of a deposit debits that deposit's wallet in its currency
// (checkRailRefund), and a reversal of the deposit debits it too, so two
// at once are judged one after the other, and the read (a statement of
// its own, READ COMMITTED) sees what the other committed. The sum read
// includes t itself.
func checkRailRefunds(ctx context.Context, tx Tx, fresh []*domain.Transaction) error {
	for _, t := range fresh {
		if t.Kind != domain.TxManual || t.Metadata["kind"] != domain.KindRailRefund {
			continue
		}
		ref := t.Metadata["external_ref"]
		d, err := tx.DepositRefunds(ctx, ref)
		if errors.Is(err, apperr.ErrNotFound) {
			return invalid([]domain.Violation{{Field: "metadata.external_ref", Reason: fmt.Sprintf("no deposit has external_ref %q", ref)}})
		}
		if err != nil {
			return fmt.Errorf("rail refund of %s: %w", ref, err)
		}
		this := decimal.Zero
		for _, p := range t.Postings {
			if p.Direction == domain.Debit && p.Account.Address == d.Wallet && p.Currency == d.Currency {
				this = this.Add(p.Amount)
			}
		}
		if !d.Taken().GreaterThan(d.Amount) {
			continue
		}
		before := d
		before.RailRefunded = d.RailRefunded.Sub(this)
		af := domain.AmountFormat(d.Currency)
		return invalid([]domain.Violation{{Field: "metadata.external_ref", Reason: fmt.Sprintf(
			"deposit %s brought in %s %s, of which rail refunds or its reversal already took %s %s; %s %s remains, not the %s %s of this rail_refund: "+
				"the rail's refund of it is recorded once (list the wallet's transactions for rail_refunds naming %s)",
			ref, af(d.Amount), d.Currency, af(before.Taken()), d.Currency, af(before.Remaining()), d.Currency, af(this), d.Currency, ref)}})
	}
	return nil
}

// checkDepositReversal refuses to reverse a deposit a rail_refund names
// (a conflict): the rail_refund already took that money back from the
// wallet, and the reversal would take it a second time. Run with the
// reversal posted in tx (the wallet's balance row locked, as a
// rail_refund of the deposit locks it).
func checkDepositReversal(ctx context.Context, tx Tx, orig *domain.Transaction) error {
	if orig.Kind != domain.TxDeposit {
		return nil
	}
	ref := orig.Metadata["external_ref"]
	d, err := tx.DepositRefunds(ctx, ref)
	if errors.Is(err, apperr.ErrNotFound) {
		return nil // not a deposit by its key: nothing names it
	}
	if err != nil {
		return fmt.Errorf("reversal of deposit %s: %w", ref, err)
	}
	if d.RailRefunded.IsPositive() {
		af := domain.AmountFormat(d.Currency)
		return fmt.Errorf("deposit %s (%s) has %s %s of rail_refunds recorded against it: reversing it would take that money from %s again; "+
			"reverse those rail_refunds first, or record what the rail has not refunded by another entry: %w",
			ref, orig.ID, af(d.RailRefunded), d.Currency, d.Wallet, apperr.ErrConflict)
	}
	return nil
}
