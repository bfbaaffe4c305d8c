package ports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/money"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Activities are payout's Temporal activities (app.Act*): each is safe to
// retry (the database change checks the status it starts from; ledger
// postings carry one idempotency key per payout, attempt and step; the rail
// is queried by reference before any submission).
type Activities struct {
	Store    *adapters.Store
	Ledger   ledgerv1.LedgerServiceClient
	Rail     app.Rail
	Minimums domain.Minimums
	Clock    clock.Clock
	Log      *slog.Logger
}

// Register registers the activities under their app.Act* names.
func (a *Activities) Register(r interface {
	RegisterActivityWithOptions(any, activity.RegisterOptions)
}) {
	r.RegisterActivityWithOptions(a.Prepare, activity.RegisterOptions{Name: app.ActPrepare})
	r.RegisterActivityWithOptions(a.Submit, activity.RegisterOptions{Name: app.ActSubmit})
	r.RegisterActivityWithOptions(a.Follow, activity.RegisterOptions{Name: app.ActFollow})
}

func nonRetryable(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), app.ErrTypeInvalid, err)
}

// Prepare passes a payout through the gate: it returns action_required
// (wait: KYC, method, hold or minimum, the reason recorded), created (go:
// the payout is now marked for submission and can no longer be canceled),
// or the status it already has when it is past the gate.
func (a *Activities) Prepare(ctx context.Context, id string) (string, error) {
	// What available holds is read before the transaction (a ledger call
	// holds no payout lock); the ledger refuses the overdraft atomically at
	// submission all the same (Submit).
	pre, err := a.Store.GetPayout(ctx, id)
	if errors.Is(err, apperr.ErrNotFound) {
		return "", nonRetryable(err)
	}
	if err != nil {
		return "", err
	}
	var available decimal.Decimal
	if !pre.Submitting && (pre.Status == domain.StatusActionRequired || pre.Status == domain.StatusCreated) {
		if available, err = a.available(ctx, pre); err != nil {
			return "", err
		}
	}
	var out string
	err = a.Store.Tx(ctx, func(tx pgx.Tx) error {
		p, err := a.Store.Lock(ctx, tx, id)
		if err != nil {
			return err
		}
		out = p.Status
		if p.Submitting || (p.Status != domain.StatusActionRequired && p.Status != domain.StatusCreated) {
			return nil
		}
		st, reason, method, err := a.Store.Gate(ctx, tx, p, a.Minimums)
		if err != nil {
			return err
		}
		if st == domain.StatusCreated && available.LessThan(p.Net) {
			st, reason = domain.StatusActionRequired, domain.InsufficientAvailableReason(available, p.Net, p.Currency)
		}
		now := a.Clock.Now()
		out = st
		if st == domain.StatusActionRequired {
			if p.Status == domain.StatusCreated {
				return a.Store.Move(ctx, tx, &p, st, reason, now)
			}
			return a.Store.SetReason(ctx, tx, &p, reason, now)
		}
		p.Method, p.Submitting = method, true
		if p.Status == domain.StatusActionRequired {
			return a.Store.Move(ctx, tx, &p, domain.StatusCreated, "ready: kyc verified, payout method set", now)
		}
		return a.Store.SetSubmitting(ctx, tx, p.ID, method)
	})
	if errors.Is(err, apperr.ErrNotFound) {
		return "", nonRetryable(err)
	}
	return out, err
}

// Submit moves the payout's amount from available to in_transit in the
// ledger, then hands it to the rail under its reference: the rail is
// queried first, and only a reference the rail has never seen is
// submitted, so a retry after an unknown result (timeout, outage, a
// worker killed mid-call) never pays twice.
func (a *Activities) Submit(ctx context.Context, id string) (string, error) {
	p, err := a.Store.GetPayout(ctx, id)
	if err != nil {
		return "", nonRetryable(err)
	}
	if p.Status != domain.StatusCreated {
		return p.Status, nil
	}
	if !p.Submitting {
		return "", nonRetryable(fmt.Errorf("payout %s: submit before the gate passed", id))
	}
	m, err := a.Store.GetMethod(ctx, p.ProviderID)
	if err != nil {
		return "", err
	}
	// Available must still cover the payout (Prepare checked it): the
	// ledger refuses atomically to overdraw a provider account but by a
	// reversal (a replay of this attempt's posting is answered, not
	// checked, so a retry after the posting goes on). Refused and not
	// covered, the payout goes back to wait at the gate, never reaching
	// the rail.
	if err := a.post(ctx, p, domain.StatusSubmitted); err != nil {
		if status.Code(err) != codes.InvalidArgument { // the ledger's refusal of an overdraft
			return "", err
		}
		available, aerr := a.available(ctx, p)
		if aerr != nil {
			return "", aerr
		}
		if available.LessThan(p.Net) {
			return a.uncovered(ctx, p, available)
		}
		return "", err
	}
	ref := domain.RailReference(p.ID, p.Attempt)
	rs, err := a.Rail.Query(ctx, ref)
	if errors.Is(err, app.ErrUnknownReference) {
		rs, err = a.Rail.Submit(ctx, app.Transfer{Reference: ref, ProviderID: p.ProviderID, Currency: p.Currency, Amount: p.Net, Method: m.Method})
	}
	if err != nil {
		// The outcome is unknown: the retry queries the same reference.
		return "", fmt.Errorf("rail %s, payout %s: %w", a.Rail.Name(), id, err)
	}
	p.RailRef, p.MethodSum = ref, m.Summary()
	return a.advance(ctx, p, rs)
}

// available is what provider:{id}:available holds in the payout's
// currency (zero before the account's first posting).
func (a *Activities) available(ctx context.Context, p adapters.Payout) (decimal.Decimal, error) {
	resp, err := a.Ledger.GetAccount(ctx, &ledgerv1.GetAccountRequest{Address: domain.AvailableAccount(p.ProviderID)})
	if status.Code(err) == codes.NotFound {
		return decimal.Zero, nil
	}
	if err != nil {
		return decimal.Zero, fmt.Errorf("ledger balance of %s, payout %s: %w", domain.AvailableAccount(p.ProviderID), p.ID, err)
	}
	for _, b := range resp.GetAccount().GetBalances() {
		if b.Currency == p.Currency {
			d, err := decimal.NewFromString(b.Amount)
			if err != nil {
				return decimal.Zero, fmt.Errorf("ledger balance %q of %s: %w", b.Amount, domain.AvailableAccount(p.ProviderID), err)
			}
			return d, nil
		}
	}
	return decimal.Zero, nil
}

// uncovered moves a created payout that available no longer covers back
// to action_required (insufficient_available), no longer marked for
// submission; its workflow waits at the gate again.
func (a *Activities) uncovered(ctx context.Context, p adapters.Payout, available decimal.Decimal) (string, error) {
	out := ""
	err := a.Store.Tx(ctx, func(tx pgx.Tx) error {
		cur, err := a.Store.Lock(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		out = cur.Status
		if cur.Status != domain.StatusCreated || cur.Attempt != p.Attempt {
			return nil
		}
		cur.Submitting = false
		out = domain.StatusActionRequired
		return a.Store.Move(ctx, tx, &cur, domain.StatusActionRequired, domain.InsufficientAvailableReason(available, cur.Net, cur.Currency), a.Clock.Now())
	})
	if err != nil {
		return "", err
	}
	a.Log.Warn("payout not covered by available: waits", "payout_id", p.ID, "provider_id", p.ProviderID,
		"available", available.String(), "net", p.Net.String(), "currency", p.Currency)
	return out, nil
}

// Follow asks the rail about a submitted payout and moves it along.
func (a *Activities) Follow(ctx context.Context, id string) (string, error) {
	p, err := a.Store.GetPayout(ctx, id)
	if err != nil {
		return "", nonRetryable(err)
	}
	if !domain.Submitted(p.Status) || p.Status == domain.StatusReturned {
		return p.Status, nil
	}
	rs, err := a.Rail.Query(ctx, p.RailRef)
	if err != nil {
		return "", fmt.Errorf("rail %s, payout %s: %w", a.Rail.Name(), id, err)
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
	case app.RailAccepted:
		want = []string{domain.StatusSubmitted}
	case app.RailInTransit:
		want = []string{domain.StatusSubmitted, domain.StatusInTransit}
	case app.RailPaid:
		want = []string{domain.StatusSubmitted, domain.StatusInTransit, domain.StatusPaid}
	case app.RailReturned:
		want = []string{domain.StatusSubmitted, domain.StatusInTransit, domain.StatusPaid, domain.StatusReturned}
	case app.RailFailed:
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
// and event in one database transaction.
func (a *Activities) advance(ctx context.Context, p adapters.Payout, rs app.RailStatus) (string, error) {
	for _, to := range pathTo(p.Status, rs.State) {
		if to != domain.StatusSubmitted { // submission was posted before the rail call
			if err := a.post(ctx, p, to); err != nil {
				return "", err
			}
		}
		now := a.Clock.Now()
		err := a.Store.Tx(ctx, func(tx pgx.Tx) error {
			cur, err := a.Store.Lock(ctx, tx, p.ID)
			if err != nil {
				return err
			}
			if cur.Status != p.Status || cur.Attempt != p.Attempt {
				return fmt.Errorf("payout %s moved to %s (attempt %d) meanwhile: %w", p.ID, cur.Status, cur.Attempt, apperr.ErrConflict)
			}
			cur.RailRef, cur.MethodSum = p.RailRef, p.MethodSum
			note := ""
			switch to {
			case domain.StatusSubmitted:
				if !rs.ExpectedArrival.IsZero() {
					d := rs.ExpectedArrival.UTC().Truncate(24 * time.Hour)
					cur.ExpectedArrival = &d
				}
				note = fmt.Sprintf("submitted to %s as %s via %s", a.Rail.Name(), cur.RailRef, cur.MethodSum)
			case domain.StatusInTransit:
				note = "in transit"
			case domain.StatusPaid:
				cur.PaidAt = &now
				note = "paid"
			case domain.StatusFailed, domain.StatusReturned:
				cur.FailureCode, cur.FailureMessage, cur.Submitting = rs.FailureCode, rs.Message, false
				note = fmt.Sprintf("%s: %s; amount back in available", rs.FailureCode, rs.Message)
			}
			if err := a.Store.Move(ctx, tx, &cur, to, note, now); err != nil {
				return err
			}
			p = cur
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return p.Status, nil
}

// post writes the ledger movement that enters status to (DESIGN §4).
func (a *Activities) post(ctx context.Context, p adapters.Payout, to string) error {
	mv, ok := domain.MovementFor(p.ProviderID, to)
	if !ok {
		return nil
	}
	cur, err := money.Lookup(p.Currency)
	if err != nil {
		return nonRetryable(fmt.Errorf("payout %s: %w", p.ID, err))
	}
	amt := cur.Format(p.Net)
	_, err = a.Ledger.CreateTransaction(ctx, &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: domain.LedgerKey(p.ID, p.Attempt, to),
		Description:    fmt.Sprintf("payout %s %s", p.ID, to),
		Metadata:       map[string]string{"kind": "payout", "payout_id": p.ID, "provider_id": p.ProviderID, "step": to},
		Postings: []*ledgerv1.Posting{
			{Account: mv.Debit, Direction: "debit", Amount: amt, Currency: cur.Code},
			{Account: mv.Credit, Direction: "credit", Amount: amt, Currency: cur.Code},
		},
	})
	if err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.AlreadyExists, codes.PermissionDenied, codes.FailedPrecondition:
			return nonRetryable(fmt.Errorf("ledger %s of payout %s: %w", to, p.ID, err))
		}
		return fmt.Errorf("ledger %s of payout %s: %w", to, p.ID, err)
	}
	return nil
}
