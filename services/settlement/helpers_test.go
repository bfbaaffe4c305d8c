package settlement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/gpubill/gpubill/pkg/testkit"
	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/adapters"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
)

// inlineRunner runs a provider's settlement in the calling activity: the
// provider workflow's one local activity, called directly, once, when it is
// started. A non-retryable failure is the provider's own (its outcome); a
// transient one fails the start (the page's attempt is retried).
type inlineRunner struct {
	acts     *ports.Activities
	mu       sync.Mutex
	outcomes map[string]outcome
}

type outcome struct {
	res app.ProviderResult
	err error
}

func newInlineRunner(acts *ports.Activities) *inlineRunner {
	return &inlineRunner{acts: acts, outcomes: map[string]outcome{}}
}

func (r *inlineRunner) StartProvider(ctx context.Context, in app.ProviderInput) error {
	res, err := r.acts.SettleProvider(ctx, in)
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.NonRetryable() {
		err = fmt.Errorf("%w: %w", ports.ErrProviderFailed, err)
	} else if err != nil {
		return err
	}
	r.record(in.ProviderID, res, err)
	return nil
}

func (r *inlineRunner) record(provider string, res app.ProviderResult, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes[provider] = outcome{res, err}
}

func (r *inlineRunner) ProviderOutcome(_ context.Context, in app.ProviderInput) (bool, app.ProviderResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.outcomes[in.ProviderID]
	return !ok, o.res, o.err
}

func holdReq(cycle, provider string) *settlementv1.HoldProviderRequest {
	return &settlementv1.HoldProviderRequest{CycleId: cycle, ProviderId: provider, Reason: "dispute"}
}

func holdRow(cycle, provider string, held bool) adapters.Hold {
	return adapters.Hold{CycleID: cycle, ProviderID: provider, Held: held, UpdatedAt: time.Now()}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// waitCycleSettled waits until the service's cycle is settled.
func waitCycleSettled(t testing.TB, s *Service, cycle string, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, within, func() bool {
		c, err := s.store.GetCycle(context.Background(), cycle)
		return err == nil && c.Status == domain.CycleSettled
	}, "cycle "+cycle+" settled")
}
