package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Limits of the steps.
const (
	snapshotPageSize = 1000 // ledger balances per CycleBalances call
)

// Steps carries out what the workflows' activities ask for (ports.Activities
// registers them): the cycle's close, each provider's settlement, and the
// scheduled calls to the tax service and the ledger. A failure retrying
// cannot fix is Rejected; any other is retried.
type Steps struct {
	Store      Store
	Ledger     Ledger
	Tax        Tax
	Commission split.CommissionPolicy
	Calendar   cycles.Calendar
	Clock      clock.Clock
	Log        *slog.Logger // nil: slog.Default()
}

func (s *Steps) logger() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// EnsureCycle records the cycle (open) and returns its status.
func (s *Steps) EnsureCycle(ctx context.Context, cycleID string) (CycleInfo, error) {
	cy, err := s.Calendar.Parse(cycleID)
	if err != nil {
		return CycleInfo{}, Rejected(err)
	}
	st, err := s.Store.EnsureCycle(ctx, cy)
	if err != nil {
		return CycleInfo{}, err
	}
	return CycleInfo{CycleID: cycleID, Status: st}, nil
}

// BeginClose marks the cycle closing (queuing settlement.cycle.closed.{cycle})
// and closes it in the ledger (new charges go to the next open cycle).
func (s *Steps) BeginClose(ctx context.Context, in BeginCloseInput) error {
	if _, err := s.Store.BeginClose(ctx, in.CycleID, in.Reason, s.Clock.Now()); err != nil {
		return err
	}
	return s.Ledger.CloseCycle(ctx, in.CycleID)
}

// SnapshotCycle pages through the ledger's pending balances of the cycle
// (frozen: the ledger has closed the cycle) from the page token (""
// first) and records each provider's gross per currency, so the close
// pages through its own stable table. A gross of 0 is the ledger's listing
// of a pending account that only charges billed at 0.00 went to: it is
// settled as a statement of 0.00 that carries their GPU-hours (left out,
// they were on no statement). beat is called with the next
// page's token after each page is recorded (recording a page twice writes
// the same rows, so a retry may start from any token beat saw).
func (s *Steps) SnapshotCycle(ctx context.Context, cycleID, token string, beat func(token string)) (int, error) {
	_, done, err := s.Store.CycleStatus(ctx, cycleID)
	if err != nil || done {
		return 0, err
	}
	n := 0
	for {
		page, next, err := s.Ledger.CycleBalances(ctx, cycleID, snapshotPageSize, token)
		if err != nil {
			return n, err
		}
		rows := make([]domain.Balance, 0, len(page))
		for _, b := range page {
			if !b.Amount.IsNegative() { // a negative pending balance is the ledger's to explain
				rows = append(rows, b)
			}
		}
		if err := s.Store.SnapshotBalances(ctx, cycleID, rows, s.Commission.Rates); err != nil {
			return n, err
		}
		n += len(rows)
		token = next
		beat(token)
		if token == "" {
			break
		}
	}
	return n, s.Store.MarkSnapshotDone(ctx, cycleID)
}

// NextProviders returns the next batch of providers to settle.
func (s *Steps) NextProviders(ctx context.Context, in NextProvidersInput) ([]string, error) {
	return s.Store.NextProviders(ctx, in.CycleID, in.After, in.Limit)
}

// CompleteCycle marks the cycle settled once every provider of it is, and
// reports whether it is settled. One held, or whose settlement failed,
// keeps it closing: a release settles the held one (and completes the cycle
// if it was the last), a close request runs the cycle's settlement again.
func (s *Steps) CompleteCycle(ctx context.Context, cycleID string) (bool, error) {
	return s.Store.CompleteCycle(ctx, cycleID, s.Clock.Now())
}

// RemitTax asks the tax service to remit the month (idempotent per period)
// and returns its report.
func (s *Steps) RemitTax(ctx context.Context, period string) (RemittanceReport, error) {
	return s.Tax.RemitTax(ctx, period)
}

// IssueInvoices asks the ledger to issue a month's renter invoices
// (idempotent: what is issued stays as it is).
func (s *Steps) IssueInvoices(ctx context.Context, period string) (IssueResult, error) {
	return s.Ledger.IssueInvoices(ctx, period)
}

// RunReconciliation asks the ledger to reconcile every currency with an
// imported statement (each run is kept by the ledger, with key: a retry
// answers the runs the first try stored).
func (s *Steps) RunReconciliation(ctx context.Context, key string) ([]ReconciliationSummary, error) {
	return s.Ledger.RunReconciliation(ctx, key)
}

// step adds what failed to err (a Rejected err stays Rejected).
func step(what string, err error) error { return fmt.Errorf("%s: %w", what, err) }
