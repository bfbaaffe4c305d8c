package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Follow asks the rail about a submitted payout and moves it along.
func (a *Payouts) Follow(ctx context.Context, id string) (string, error) {
	p, err := a.Store.GetPayout(ctx, id)
	if err != nil {
		return "", notFoundPermanent(err)
	}
	if domain.CanceledInQueue(p) {
		// Cancel posted its return to available after its commit; posted
		// again (the same key) for a cancel whose post failed.
		if err := a.postCanceled(ctx, p); err != nil {
			return "", a.railDid(p, p.Status, err)
		}
		return p.Status, nil
	}
	if !domain.Submitted(p.Status) || p.Status == domain.StatusReturned {
		return p.Status, nil
	}
	rs, err := a.query(ctx, p, p.RailRef)
	if err != nil {
		return "", fmt.Errorf("rail %s, payout %s: %w", a.railOf(p), id, err)
	}
	return a.advance(ctx, p, rs)
}

// rank orders the statuses a submitted payout goes through.
var rank = map[string]int{domain.StatusCreated: 0, domain.StatusSubmitted: 1, domain.StatusInTransit: 2, domain.StatusPaid: 3, domain.StatusReturned: 4}

// pathTo lists the statuses a payout in status from enters to match the
// rail's state, in order (a poll may miss the intermediate ones; history
// keeps each).
func pathTo(from, railState string) []string {
	var want []string
	switch railState {
	case RailAccepted:
		want = []string{domain.StatusSubmitted}
	case RailInTransit:
		want = []string{domain.StatusSubmitted, domain.StatusInTransit}
	case RailPaid:
		want = []string{domain.StatusSubmitted, domain.StatusInTransit, domain.StatusPaid}
	case RailReturned:
		want = []string{domain.StatusSubmitted, domain.StatusInTransit, domain.StatusPaid, domain.StatusReturned}
	case RailFailed:
		if from == domain.StatusPaid { // paid, then failed: the bank bounced it
			return []string{domain.StatusReturned}
		}
		if from == domain.StatusFailed || from == domain.StatusReturned {
			return nil
		}
		if from == domain.StatusCreated {
			return []string{domain.StatusSubmitted, domain.StatusFailed}
		}
		return []string{domain.StatusFailed}
	}
	cur, ok := rank[from]
	if !ok {
		return nil
	}
	var out []string
	for _, s := range want {
		if rank[s] > cur {
			out = append(out, s)
		}
	}
	return out
}

// advance enters each status on the way to the rail's state: the ledger
// movement first (idempotent), then the status change with its history
// and event in one database transaction. A rail holding the payout's
// reference at another amount is taken only when it failed the reference
// (it moved no money) or finance resolved the payout at that amount
// (ResolveRailAmountMismatch); otherwise the payout stops for finance
// (holdAmountMismatch).
func (a *Payouts) advance(ctx context.Context, p domain.Payout, rs RailStatus) (string, error) {
	path := pathTo(p.Status, rs.State)
	switch {
	case movesNoMoney(path):
	case railAmountMismatch(p, rs):
		resolved, err := a.resolvedAt(ctx, p, rs)
		if err != nil {
			return "", err
		}
		if !resolved {
			return a.holdAmountMismatch(ctx, p, rs)
		}
	case p.FailureCode == domain.FailRailAmountMismatch && len(path) > 0:
		// Flagged, and the rail now answers without an amount: taken only
		// once finance resolved the flag (enter clears it as resolved).
		f, err := a.Store.RailAmountFlag(ctx, p.ID, p.Attempt)
		if err != nil && !errors.Is(err, apperr.ErrNotFound) {
			return "", fmt.Errorf("payout %s: %w", p.ID, err)
		}
		if err != nil || !f.Resolved() {
			return p.Status, nil
		}
	}
	for _, to := range path {
		if to != domain.StatusSubmitted { // submission was posted before the rail call
			if err := a.post(ctx, p, to); err != nil {
				return "", a.railDid(p, to, err)
			}
		}
		now := a.Clock.Now()
		err := a.Store.Update(ctx, func(tx Tx) error {
			cur, err := lockUnmoved(ctx, tx, p)
			if err != nil {
				return err
			}
			cur.RailRef, cur.MethodSum = p.RailRef, p.MethodSum
			note := a.enter(&cur, to, rs, now)
			if err := tx.Move(ctx, &cur, to, note, now); err != nil {
				return err
			}
			p = cur
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	if p.Status == domain.StatusSubmitted && rs.Held != "" {
		return a.holdQueued(ctx, p, rs)
	}
	if p.Status == domain.StatusSubmitted || p.Status == domain.StatusInTransit {
		return a.takeArrival(ctx, p, rs)
	}
	return p.Status, nil
}

// holdQueued records on a submitted payout that finance's hold keeps its
// transfer out of what its rail sends (rs.Held: the bank-file queue), as
// a hold placed on a queued transfer does (Store.PutHold): held in its
// reason and history, no arrival date while held. A payout being
// submitted when the hold was placed (answered in flight) was left out by
// the cut without a word, dated by the cutoff after its queuing. The
// store reads the hold again under the bank queue's lock, taken before
// the payout's as a hold takes them: one released meanwhile is not noted.
func (a *Payouts) holdQueued(ctx context.Context, p domain.Payout, rs RailStatus) (string, error) {
	if (p.Reason == domain.HeldQueuedNote(rs.Held) || p.Reason == domain.KYCRejectedQueuedNote && rs.Held == domain.KYCRejectedHeld) &&
		p.ExpectedArrival == nil {
		return p.Status, nil
	}
	err := a.Store.Update(ctx, func(tx Tx) error {
		if err := tx.LockBankQueue(ctx); err != nil {
			return err
		}
		cur, err := lockUnmoved(ctx, tx, p)
		if err != nil {
			return err
		}
		if err := tx.HoldQueued(ctx, &cur, a.Clock.Now()); err != nil {
			return err
		}
		p = cur
		return nil
	})
	if err != nil {
		return "", err
	}
	return p.Status, nil
}

// takeArrival records the rail's arrival date on a payout submitted or in
// transit when the rail answers one other than the payout's, the change in
// its history: the bank-file rail's batch executes later than guessed at
// submission (a late cut, an oversize batch, a restore hold, a holiday
// added). Only entering submitted took one: the provider kept the guess.
func (a *Payouts) takeArrival(ctx context.Context, p domain.Payout, rs RailStatus) (string, error) {
	if probe := p; newArrival(&probe, rs) == "" {
		return p.Status, nil
	}
	now := a.Clock.Now()
	err := a.Store.Update(ctx, func(tx Tx) error {
		cur, err := lockUnmoved(ctx, tx, p)
		if err != nil {
			return err
		}
		if note := newArrival(&cur, rs); note != "" {
			if err := tx.SetArrival(ctx, &cur, a.railName(rs)+": "+note, now); err != nil {
				return err
			}
		}
		p = cur
		return nil
	})
	if err != nil {
		return "", err
	}
	return p.Status, nil
}

// newArrival sets p's expected arrival to the rail's date when rs carries
// one other than p's, and returns the note naming the change ("" when
// none).
func newArrival(p *domain.Payout, rs RailStatus) string {
	if rs.ExpectedArrival.IsZero() {
		return ""
	}
	d := rs.ExpectedArrival.UTC().Truncate(24 * time.Hour)
	was := "none"
	if p.ExpectedArrival != nil {
		if p.ExpectedArrival.Equal(d) {
			return ""
		}
		was = p.ExpectedArrival.Format(time.DateOnly)
	}
	p.ExpectedArrival = &d
	return fmt.Sprintf("expected arrival %s (was %s)", d.Format(time.DateOnly), was)
}

// resolvedAt reports whether finance resolved p's rail_amount_mismatch at
// the amount rs holds: its workflow, still watching the paid payout for a
// return, flagged it again on its next poll.
func (a *Payouts) resolvedAt(ctx context.Context, p domain.Payout, rs RailStatus) (bool, error) {
	f, err := a.Store.RailAmountFlag(ctx, p.ID, p.Attempt)
	if errors.Is(err, apperr.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("payout %s: %w", p.ID, err)
	}
	return f.Takes(rs.Amount, rs.Currency), nil
}

// movesNoMoney reports whether path ends in failed through nothing but
// submitted: the rail moved no money, whatever amount it held.
func movesNoMoney(path []string) bool {
	for _, s := range path {
		if s != domain.StatusSubmitted && s != domain.StatusFailed {
			return false
		}
	}
	return len(path) > 0 && path[len(path)-1] == domain.StatusFailed
}

// holdAmountMismatch records that the rail holds p's reference at another
// amount than p's net (rail_amount_mismatch, both amounts): a payout made
// again after a restore or a recovery at another net than the rail was
// sent. Recorded paid it read paid at an amount the rail never moved. It is
// neither paid nor in transit nor sent again: a created payout enters
// submitted (its net already moved to in_transit by postSubmission, so
// not available to be paid again), one past it keeps its status. Its
// workflow goes on following it; the rail failing the reference, or
// finance resolving it paid (ResolveRailAmountMismatch), moves it on.
// Counted (and logged at ERROR) once per payout.
func (a *Payouts) holdAmountMismatch(ctx context.Context, p domain.Payout, rs RailStatus) (string, error) {
	rail := a.railName(rs)
	msg := domain.RailAmountMismatchMessage(rail, p.RailRef, rs.Amount, rs.Currency, p.Net, p.Currency)
	first := false
	now := a.Clock.Now()
	err := a.Store.Update(ctx, func(tx Tx) error {
		cur, err := lockUnmoved(ctx, tx, p)
		if err != nil {
			return err
		}
		first = cur.FailureCode != domain.FailRailAmountMismatch
		if !first && cur.FailureMessage == msg {
			p = cur
			return nil
		}
		cur.RailRef, cur.MethodSum = p.RailRef, p.MethodSum
		cur.FailureCode, cur.FailureMessage = domain.FailRailAmountMismatch, msg
		// The rail's amount, for finance's resolution to be checked against.
		if err := tx.FlagRailAmount(ctx, domain.RailAmountFlag{PayoutID: cur.ID, Attempt: cur.Attempt, Rail: rail,
			RailAmount: rs.Amount, RailCurrency: rs.Currency, FlaggedAt: now}); err != nil {
			return err
		}
		if cur.Status == domain.StatusCreated {
			note := a.enter(&cur, domain.StatusSubmitted, rs, now) + "; " + domain.FailRailAmountMismatch + ": " + msg
			err = tx.Move(ctx, &cur, domain.StatusSubmitted, note, now)
		} else {
			err = tx.SetFailure(ctx, &cur, domain.FailRailAmountMismatch+": "+msg, now)
		}
		p = cur
		return err
	})
	if err != nil {
		return "", err
	}
	if first {
		railAmountMismatches.WithLabelValues(rail).Inc()
		a.Log.Error("the rail holds the payout's reference at another amount: not recorded paid or sent again, for finance to review",
			"payout_id", p.ID, "provider_id", p.ProviderID, "rail", rail, "reference", p.RailRef, "rail_state", rs.State,
			"rail_amount", rs.Amount.String(), "rail_currency", rs.Currency, "net", p.Net.String(), "currency", p.Currency, "status", p.Status)
	}
	return p.Status, nil
}

// railName is the rail that answered rs.
func (a *Payouts) railName(rs RailStatus) string {
	if rs.Rail != "" {
		return rs.Rail
	}
	return a.Rail.Name()
}

// enter sets what entering status to records on the payout (arrival date,
// the rail's newer one in transit, paid time, failure) and returns the
// history note.
func (a *Payouts) enter(p *domain.Payout, to string, rs RailStatus, now time.Time) string {
	switch to {
	case domain.StatusSubmitted:
		if !rs.ExpectedArrival.IsZero() {
			d := rs.ExpectedArrival.UTC().Truncate(24 * time.Hour)
			p.ExpectedArrival = &d
		}
		return fmt.Sprintf("submitted to %s as %s via %s", a.railName(rs), p.RailRef, p.MethodSum)
	case domain.StatusInTransit:
		if n := newArrival(p, rs); n != "" {
			return "in transit; " + n
		}
		return "in transit"
	case domain.StatusPaid:
		p.PaidAt = &now
		if p.FailureCode == domain.FailRailAmountMismatch { // taken only resolved (resolvedAt)
			p.FailureCode, p.FailureMessage = "", ""
			return "paid: the rail's amount taken as finance resolved its " + domain.FailRailAmountMismatch
		}
		return "paid"
	case domain.StatusFailed, domain.StatusReturned:
		p.FailureCode, p.FailureMessage, p.Submitting = rs.FailureCode, rs.Message, false
		return fmt.Sprintf("%s: %s; amount back in available", rs.FailureCode, rs.Message)
	}
	return ""
}

// railDid is the error of a ledger posting that records what the rail has
// done (paid, failed, returned), or a cancel in the bank-file queue: the
// outcome stands whatever the
// ledger answers, so a refusal (bank:client would go negative, a reversal
// of the submission, a key taken) is logged at ERROR and tried again with
// the activity's backoff until the ledger takes it, the payout showing the
// status it had. A permanent error ended the payout's workflow there: the
// money paid at the rail and still in in_transit, for good.
func (a *Payouts) railDid(p domain.Payout, to string, err error) error {
	if !errors.Is(err, ErrPermanent) {
		return err
	}
	ledgerRefusals.WithLabelValues(to).Inc()
	a.Log.Error("the ledger refused to record what the payout's rail did: tried again", "payout_id", p.ID,
		"provider_id", p.ProviderID, "status", p.Status, "to", to, "net", p.Net.String(), "currency", p.Currency, "err", err)
	return fmt.Errorf("payout %s: the rail's %s is not in the ledger yet: %s", p.ID, to, err.Error())
}

// lockUnmoved locks p's row and answers it as it is now, or a conflict when
// the payout moved (another status or attempt) since p was read.
func lockUnmoved(ctx context.Context, tx Tx, p domain.Payout) (domain.Payout, error) {
	cur, err := tx.Lock(ctx, p.ID)
	if err != nil {
		return cur, err
	}
	if cur.Status != p.Status || cur.Attempt != p.Attempt {
		return cur, fmt.Errorf("payout %s moved to %s (attempt %d) meanwhile: %w", p.ID, cur.Status, cur.Attempt, apperr.ErrConflict)
	}
	return cur, nil
}
