package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// voidReasonBytesMax bounds a void's reason: kept with the resolution and
// served with every read of its runs (as payout's reasons are).
const voidReasonBytesMax = 500

// VoidResolution voids a resolution by hand (finance resolved the wrong
// items), with a reason: the resolution is kept as it was, marked voided,
// and its items are open again in the currency's next run, which lists it.
// The same void again answers the same; another reason for a resolution
// voided already is apperr.ErrConflict.
func (r *Reconciliations) VoidResolution(ctx context.Context, runID, resolutionID, reason, voidedBy string) (*domain.ReconResolution, error) {
	var v apperr.Validator
	v.Check(runID != "", "reconciliation_id", "required")
	v.Check(resolutionID != "", "resolution_id", "required")
	v.Check(strings.TrimSpace(reason) != "" && len(reason) <= voidReasonBytesMax, "reason", "required, at most %d bytes", voidReasonBytesMax)
	if err := v.Err(); err != nil {
		return nil, err
	}
	res, err := r.Resolutions.VoidResolution(ctx, runID, resolutionID, func(res *domain.ReconResolution, latest string) (*domain.ReconVoid, error) {
		switch {
		case res.Void == nil:
			return &domain.ReconVoid{ReconciliationID: latest, Reason: reason, VoidedBy: voidedBy, VoidedAt: r.now()}, nil
		case res.Void.Reason == reason:
			return nil, nil
		}
		return nil, fmt.Errorf("voided already on %s by %s, for another reason: %w",
			res.Void.VoidedAt.Format("2006-01-02T15:04:05Z07:00"), res.Void.VoidedBy, apperr.ErrConflict)
	})
	if err != nil {
		return nil, fmt.Errorf("void resolution %s of %s: %w", resolutionID, runID, err)
	}
	return res, nil
}
