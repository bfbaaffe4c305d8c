package settlement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
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
		err = fmt.Errorf("%w: %w", app.ErrProviderFailed, err)
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

func holdRow(cycle, provider string, held bool) domain.Hold {
	return domain.Hold{CycleID: cycle, ProviderID: provider, Held: held, UpdatedAt: time.Now()}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// wantSplit is the split DESIGN §5 prescribes, computed here without
// pkg/split or pkg/money: commission = gross × the tier's rate, tax = 20 %
// of gross − commission (flat20, individual: the default rule), net the
// rest; each truncated to cents, then the cents left over go one each to
// the parts with the largest remainders (ties to the earlier part).
func wantSplit(t testing.TB, gross decimal.Decimal, tier string) (commission, tax, net decimal.Decimal) {
	t.Helper()
	rates := map[string]string{"standard": "0.25", "pro": "0.20", "partner": "0.15"}
	rate, ok := rates[tier]
	if !ok {
		t.Fatalf("no commission rate for tier %q", tier)
	}
	c := gross.Mul(decimal.RequireFromString(rate))
	tx := gross.Sub(c).Mul(decimal.RequireFromString("0.20"))
	exact := []decimal.Decimal{c, tx, gross.Sub(c).Sub(tx)}
	parts := make([]decimal.Decimal, 3)
	left := gross
	for i, e := range exact {
		parts[i] = e.Truncate(2)
		left = left.Sub(parts[i])
	}
	order := []int{0, 1, 2}
	sort.SliceStable(order, func(a, b int) bool {
		return exact[order[a]].Sub(parts[order[a]]).GreaterThan(exact[order[b]].Sub(parts[order[b]]))
	})
	cent := decimal.New(1, -2)
	for _, i := range order {
		if !left.IsPositive() {
			break
		}
		parts[i] = parts[i].Add(cent)
		left = left.Sub(cent)
	}
	if !left.IsZero() {
		t.Fatalf("split of %s left %s over", gross, left)
	}
	return parts[0], parts[1], parts[2]
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// testDeadlockTimeout replaces the SDK's 1 s deadlock detector in the
// time-skipping test environment: on a loaded 2-core machine a workflow
// goroutine can be descheduled for over a second without any deadlock
// (seen: TMPRL1101 in TestRemittanceWorkflowWaitsForPeriodEnd at load ~40).
const testDeadlockTimeout = time.Minute

// newTestEnv is suite.NewTestWorkflowEnvironment with testDeadlockTimeout.
func newTestEnv(suite *testsuite.WorkflowTestSuite) *testsuite.TestWorkflowEnvironment {
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: testDeadlockTimeout})
	return env
}
