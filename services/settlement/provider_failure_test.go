package settlement

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
	"github.com/gpubill/gpubill/services/settlement/internal/ports"
)

// A provider whose settlement workflow failed is logged at ERROR with its
// id and the failure's cause (here the ledger's refusal): the log said only
// that settle-{cycle}-{provider} "ended FAILED", and the cause was in its
// workflow's history alone.
func TestFailedProviderLoggedWithItsCause(t *testing.T) {
	t.Parallel()
	tc := newEnvClient()
	id := domain.ProviderWorkflowID(cycle1.ID, "p-00002")
	refusal := "rpc error: code = InvalidArgument desc = provider:p-00002:pending would go negative"
	tc.fail(id, "run-1", fmt.Errorf("workflow execution error (type: %s, workflowID: %s, runID: run-1): settle p-00002: "+
		"post ledger transaction %s: %s", app.ProviderWorkflowName, id, domain.SettlementKey(cycle1.ID, "p-00002", "CNY"), refusal))
	logs := &recordLog{}
	page := &app.PageSettler{States: noStates{}, Runner: ports.WorkflowRunner{Temporal: tc, TaskQueue: "settlement-test"},
		Timing: app.PageTiming{Poll: time.Millisecond, Ask: time.Millisecond}, Clock: clock.System{}, Log: slog.New(logs)}
	res, err := page.Settle(context.Background(), app.SettleProvidersInput{CycleID: cycle1.ID, Providers: []string{"p-00002"}, Window: 1},
		func(app.SettleProvidersResult) {})
	if err != nil || res != (app.SettleProvidersResult{Failed: 1}) {
		t.Fatalf("page: %+v, %v; want one provider failed", res, err)
	}
	if got := logs.errors(); len(got) != 1 || !strings.Contains(got[0], "provider=p-00002") || !strings.Contains(got[0], refusal) {
		t.Fatalf("ERROR logs %q; want one naming p-00002 and the ledger's refusal %q", got, refusal)
	}
}

// noStates is a settlement table with every provider pending.
type noStates struct{}

func (noStates) ProviderStates(context.Context, string, []string) (map[string]string, error) {
	return map[string]string{}, nil
}

// recordLog keeps the ERROR records, each as "msg key=value …".
type recordLog struct {
	mu   sync.Mutex
	recs []string
}

func (l *recordLog) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelError }
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler             { return l }
func (l *recordLog) WithGroup(string) slog.Handler                  { return l }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%s", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, b.String())
	return nil
}

func (l *recordLog) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.recs...)
}
