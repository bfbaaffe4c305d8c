package ports

import (
	"context"
	"errors"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// Activities are payout's Temporal activities (app.Act*): each runs one
// step of app.Payouts and reports a failure no retry can fix
// (app.ErrPermanent) as a non-retryable application error.
type Activities struct {
	App *app.Payouts
}

// Register registers the activities under their app.Act* names.
func (a *Activities) Register(r interface {
	RegisterActivityWithOptions(any, activity.RegisterOptions)
}) {
	r.RegisterActivityWithOptions(a.Prepare, activity.RegisterOptions{Name: app.ActPrepare})
	r.RegisterActivityWithOptions(a.Submit, activity.RegisterOptions{Name: app.ActSubmit})
	r.RegisterActivityWithOptions(a.Follow, activity.RegisterOptions{Name: app.ActFollow})
}

// activityErr makes a permanent failure non-retryable.
func activityErr(err error) error {
	if errors.Is(err, app.ErrPermanent) {
		return temporal.NewNonRetryableApplicationError(err.Error(), app.ErrTypeInvalid, err)
	}
	return err
}

// Prepare is app.Payouts.Prepare (the gate).
func (a *Activities) Prepare(ctx context.Context, id string) (string, error) {
	st, err := a.App.Prepare(ctx, id)
	return st, activityErr(err)
}

// Submit is app.Payouts.Submit (ledger, then the rail).
func (a *Activities) Submit(ctx context.Context, id string) (string, error) {
	st, err := a.App.Submit(ctx, id)
	return st, activityErr(err)
}

// Follow is app.Payouts.Follow (the rail's news).
func (a *Activities) Follow(ctx context.Context, id string) (string, error) {
	st, err := a.App.Follow(ctx, id)
	return st, activityErr(err)
}
