package app

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Limits of a resolution by hand.
const (
	resolveItemsMax       = 100 // lines and movements of one resolution
	resolveReasonBytesMax = 1000
)

// ResolutionStore keeps resolutions (adapters/postgres).
type ResolutionStore interface {
	// Resolve stores the resolution build makes of run runID, under the
	// run lock of its currency, unless a resolution already names one of
	// the lines or transactions: that one is returned (resolved true) when
	// its request is request, else apperr.ErrConflict. The run must be
	// its currency's latest (apperr.ErrPrecondition).
	Resolve(ctx context.Context, runID string, lines []domain.LineRef, txIDs []string, request string,
		build func(run *domain.ReconRun) (*domain.ReconResolution, error)) (res *domain.ReconResolution, resolved bool, err error)
	// VoidResolution stores the void build makes of resolution resolutionID
	// of run runID (apperr.ErrNotFound if it has none of that id), under the
	// run lock of its currency; build is given the resolution as stored
	// (its Void set when voided already) and the currency's latest run, and
	// returns nil to store nothing. It returns the resolution with its void.
	VoidResolution(ctx context.Context, runID, resolutionID string,
		build func(res *domain.ReconResolution, latestRunID string) (*domain.ReconVoid, error)) (*domain.ReconResolution, error)
}

// ResolveItems resolves items of a run by hand (match, write_off or
// bank_held, with a reason): the next run no longer carries them. The same request again
// answers the same resolution.
func (r *Reconciliations) ResolveItems(ctx context.Context, runID, action, reason, resolvedBy string, lines []domain.LineRef, txIDs []string) (*domain.ReconResolution, error) {
	var v apperr.Validator
	v.Check(runID != "", "reconciliation_id", "required")
	v.Check(action == domain.ResolveMatch || action == domain.ResolveWriteOff || action == domain.ResolveBankHeld, "action", "want %s, %s or %s",
		domain.ResolveMatch, domain.ResolveWriteOff, domain.ResolveBankHeld)
	v.Check(strings.TrimSpace(reason) != "" && len(reason) <= resolveReasonBytesMax, "reason", "required, at most %d bytes", resolveReasonBytesMax)
	v.Check(len(lines)+len(txIDs) > 0 && len(lines)+len(txIDs) <= resolveItemsMax, "lines", "1..%d lines and transactions in all", resolveItemsMax)
	if err := v.Err(); err != nil {
		return nil, err
	}
	// Canonical: the same items in another order are the same request.
	sl, st := slices.Clone(lines), slices.Clone(txIDs)
	slices.SortFunc(sl, func(a, b domain.LineRef) int {
		if c := strings.Compare(a.StatementID, b.StatementID); c != 0 {
			return c
		}
		return a.LineNo - b.LineNo
	})
	slices.Sort(st)
	req, err := json.Marshal(struct {
		Run, Action, Reason string
		Lines               []domain.LineRef
		Transactions        []string
	}{runID, action, reason, sl, st})
	if err != nil {
		return nil, fmt.Errorf("resolution request: %w", err)
	}
	res, _, err := r.Resolutions.Resolve(ctx, runID, lines, txIDs, string(req), func(run *domain.ReconRun) (*domain.ReconResolution, error) {
		ls, ms, err := run.ResolveItems(action, lines, txIDs)
		if err != nil {
			return nil, apperr.Invalid("lines", "%s", err.Error())
		}
		return &domain.ReconResolution{ID: ids.New("res"), ReconciliationID: run.ID, Currency: run.Currency, Action: action, Reason: reason,
			ResolvedBy: resolvedBy, CreatedAt: r.now(), Lines: ls, Movements: ms}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("resolve items of %s: %w", runID, err)
	}
	return res, nil
}
