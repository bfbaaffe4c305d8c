package settlement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/temporal"

	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/adapters"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
)

// inlineRunner runs a provider's settlement in the calling activity: the
// provider workflow's one local activity, called directly, once. A
// non-retryable failure is the provider's own; anything else is transient
// (the page's attempt is retried, as with a real workflow's transient
// failure that outlives the page).
type inlineRunner struct{ acts *ports.Activities }

func (r inlineRunner) RunProvider(ctx context.Context, in app.ProviderInput) (app.ProviderResult, error) {
	res, err := r.acts.SettleProvider(ctx, in)
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.NonRetryable() {
		return res, fmt.Errorf("%w: %w", ports.ErrProviderFailed, err)
	}
	return res, err
}

// runnerFunc is a ports.ProviderRunner from a function.
type runnerFunc func(ctx context.Context, in app.ProviderInput) (app.ProviderResult, error)

func (f runnerFunc) RunProvider(ctx context.Context, in app.ProviderInput) (app.ProviderResult, error) {
	return f(ctx, in)
}

func holdReq(cycle, provider string) *settlementv1.HoldProviderRequest {
	return &settlementv1.HoldProviderRequest{CycleId: cycle, ProviderId: provider, Reason: "dispute"}
}

func holdRow(cycle, provider string, held bool) adapters.Hold {
	return adapters.Hold{CycleID: cycle, ProviderID: provider, Held: held, UpdatedAt: time.Now()}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
