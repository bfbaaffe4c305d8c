package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// LedgerEntries reads ledger transactions (the ledger's GetTransaction).
type LedgerEntries interface {
	// Entry returns the transaction id names (apperr.ErrNotFound when the
	// ledger holds none).
	Entry(ctx context.Context, id string) (domain.LedgerEntry, error)
}

// OutsideSettlement is finance recording a failed or returned payout as
// paid by hand: the ledger transaction it posted, why, and who.
type OutsideSettlement struct {
	PayoutID      string
	TransactionID string
	Reason        string
	By            string
}

// SettleOutside moves a failed or returned payout to settled_outside, final:
// finance paid its net by hand (a departed provider whose account no rail
// reaches) and names the ledger transaction that did it. The entry is read
// from the ledger and must move the payout's net out of its provider's
// available and out of bank:client (domain.CheckSettledOutside); under the
// payout's lock, it is claimed for this payout alone (a unique key: a
// transaction closing two payouts would leave one unpaid and read paid)
// and the move is kept in the payout's history. The workflow of a failed
// or returned payout has ended; once settled outside the payout can no
// longer be retried, so a retry never pays it again from a newer cycle's
// money. The same settlement again answers as it is; another transaction
// is a conflict.
func (a *Payouts) SettleOutside(ctx context.Context, s OutsideSettlement) (domain.Payout, error) {
	s.Reason, s.TransactionID = strings.TrimSpace(s.Reason), strings.TrimSpace(s.TransactionID)
	switch {
	case s.TransactionID == "":
		return domain.Payout{}, apperr.Invalid("transaction_id", "required: the ledger transaction that paid the net by hand")
	case s.Reason == "":
		return domain.Payout{}, apperr.Invalid("reason", "required: how the net was paid (the bank, its reference)")
	case a.Entries == nil:
		return domain.Payout{}, fmt.Errorf("settle payout %s outside: no ledger reader configured", s.PayoutID)
	}
	if _, err := a.Store.GetPayout(ctx, s.PayoutID); err != nil {
		return domain.Payout{}, err // an unknown payout is a 404 whatever it names
	}
	e, err := a.Entries.Entry(ctx, s.TransactionID)
	if errors.Is(err, apperr.ErrNotFound) {
		return domain.Payout{}, apperr.Invalid("transaction_id", "the ledger holds no transaction %s", s.TransactionID)
	}
	if err != nil {
		return domain.Payout{}, fmt.Errorf("settle payout %s outside: read transaction %s: %w", s.PayoutID, s.TransactionID, err)
	}
	err = a.Store.Update(ctx, func(tx Tx) error {
		p, err := tx.Lock(ctx, s.PayoutID)
		if err != nil {
			return err
		}
		if p.Status == domain.StatusSettledOutside {
			by, err := tx.SettledOutsideBy(ctx, p.ID)
			if err != nil || by == s.TransactionID {
				return err // settled by the same call already: answered as it is
			}
			return fmt.Errorf("payout %s was settled outside by transaction %s: %w", p.ID, by, apperr.ErrConflict)
		}
		if p.Status != domain.StatusFailed && p.Status != domain.StatusReturned {
			return fmt.Errorf("payout %s is %s: only a failed or returned payout can be settled outside: %w", p.ID, p.Status, apperr.ErrPrecondition)
		}
		if why := domain.CheckSettledOutside(p, e); why != "" {
			return fmt.Errorf("%s: %w", why, apperr.ErrConflict)
		}
		note := fmt.Sprintf("settled outside gpubill by finance: net paid by ledger transaction %s: %s", e.ID, s.Reason)
		now := a.Clock.Now()
		if err := tx.ClaimSettledOutside(ctx, p.ID, e.ID, s.Reason, s.By, now); err != nil {
			return err
		}
		return tx.Move(ctx, &p, domain.StatusSettledOutside, note, now)
	})
	if err != nil {
		return domain.Payout{}, fmt.Errorf("settle payout %s outside: %w", s.PayoutID, err)
	}
	return a.Store.GetPayout(ctx, s.PayoutID)
}
