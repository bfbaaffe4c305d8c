package app

import (
	"context"
	"fmt"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Cancel cancels a payout not yet on its way to the rail (finance): one
// waiting or created, or one submitted whose bank transfer still waits in
// the bank-file queue (held, or for its cutoff). Nothing of the latter
// was sent to the bank: its transfer leaves the queue under the batch lock
// (a cut in progress and the cancel cannot both win) and, once that
// commits, the amount its submission moved to in_transit goes back to
// available. A payout canceled already is left as it is (a client's retry
// of a cancel that succeeded was a 400 saying it was "on its way to the
// rail"); one canceled in the queue has its amount posted back again under
// the same key, so a retry after a ledger outage answers once it is back.
func (a *Payouts) Cancel(ctx context.Context, id, why string) error {
	reason := "canceled by finance"
	if why != "" {
		reason += ": " + why
	}
	var p domain.Payout
	err := a.Store.Update(ctx, func(tx Tx) error {
		// Before the payout's lock, as a hold takes them.
		if err := tx.LockBankQueue(ctx); err != nil {
			return err
		}
		var err error
		if p, err = tx.Lock(ctx, id); err != nil {
			return err
		}
		switch {
		case p.Status == domain.StatusCanceled && p.AbsorbedInto != "":
			// Its money goes with the payout it joined: a 200 here read as
			// stopped while that one was paid.
			return fmt.Errorf("payout %s joined payout %s, which carries its money: cancel %s: %w",
				p.ID, p.AbsorbedInto, p.AbsorbedInto, apperr.ErrPrecondition)
		case p.Status == domain.StatusCanceled:
			return nil
		case p.Status == domain.StatusSubmitted:
			return a.withdraw(ctx, tx, &p, reason)
		case p.Submitting:
			return fmt.Errorf("payout %s is being submitted to its rail: only a payout not yet submitted can be canceled: %w", p.ID, apperr.ErrPrecondition)
		case p.Status != domain.StatusActionRequired && p.Status != domain.StatusCreated:
			return fmt.Errorf("payout %s is %s: only a payout not yet submitted can be canceled: %w", p.ID, p.Status, apperr.ErrPrecondition)
		}
		return tx.Move(ctx, &p, domain.StatusCanceled, reason, a.Clock.Now())
	})
	if err != nil || !domain.CanceledInQueue(p) {
		return err
	}
	// The cancel is stored: its return to available is posted with a
	// context the caller's leaving does not end. Posted with the caller's,
	// a client that disconnected right after the commit canceled the post,
	// the amount left in in_transit until the workflow's next rail poll.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelPostMax)
	defer cancel()
	if err := a.postCanceled(pctx, p); err != nil {
		return &CanceledUnpostedError{PayoutID: p.ID, Err: err}
	}
	return nil
}

// cancelPostMax bounds the post of a canceled payout's return to available
// once its caller may have left: past it, the ledger is taken as down and
// the payout's workflow posts it (CanceledUnpostedError).
const cancelPostMax = 30 * time.Second

// CanceledUnpostedError is Cancel's error once the cancel is saved: the
// payout is canceled in the bank-file queue, its return to available not
// posted (the ledger down). Its workflow posts it again: the caller wakes
// it, as after a cancel that posted, so it is posted as soon as the ledger
// answers rather than on the workflow's next rail poll.
type CanceledUnpostedError struct {
	PayoutID string
	Err      error
}

func (e *CanceledUnpostedError) Error() string {
	return fmt.Sprintf("payout %s canceled; its amount goes back to available once the ledger takes it (its workflow posts it again): %v",
		e.PayoutID, e.Err)
}

func (e *CanceledUnpostedError) Unwrap() error { return e.Err }

// postCanceled posts the return to available of p, canceled in the
// bank-file queue, under its key (payout-{id}-{attempt}-canceled: a return
// posted already is answered by the ledger, not posted twice), then
// records that the ledger took it. Until recorded, a restore or a recovery
// starts p's workflow again, whose Prepare posts it (a snapshot can hold
// the cancel without its return), and
// gpubill_payout_cancel_unposted_age_seconds counts it.
func (a *Payouts) postCanceled(ctx context.Context, p domain.Payout) error {
	if err := a.post(ctx, p, domain.StatusCanceled); err != nil {
		return err
	}
	if err := a.Store.CancelPosted(ctx, p.ID, p.Attempt, a.Clock.Now()); err != nil {
		return fmt.Errorf("payout %s: its return to available posted, not recorded as posted: %w", p.ID, err)
	}
	return nil
}

// withdraw cancels p, submitted, when its bank transfer still waits in the
// bank-file queue: the transfer leaves the queue; any other is on its way.
func (a *Payouts) withdraw(ctx context.Context, tx Tx, p *domain.Payout, reason string) error {
	now := a.Clock.Now()
	queued, err := tx.WithdrawQueued(ctx, *p, now)
	if err != nil {
		return err
	}
	if !queued {
		return fmt.Errorf("payout %s is submitted to its rail as %s: only a payout not yet submitted, or whose bank transfer still waits "+
			"in the bank-file queue, can be canceled: %w", p.ID, p.RailRef, apperr.ErrPrecondition)
	}
	p.Submitting = false
	return tx.Move(ctx, p, domain.StatusCanceled, fmt.Sprintf("%s; its bank transfer %s taken out of the bank-file queue before any bank file: "+
		"amount back in available", reason, p.RailRef), now)
}
