package settlement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

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
	if got := logs.records(); len(got) != 1 || got[0].level != slog.LevelError || !strings.Contains(got[0].text, "provider=p-00002") ||
		!strings.Contains(got[0].text, refusal) {
		t.Fatalf("logs %+v; want one at ERROR naming p-00002 and the ledger's refusal %q", got, refusal)
	}
}

// TestRerunMeetingItsFailureLogsAtWarn: a provider whose settlement fails
// for good keeps its cycle closing (GpubillSettlementStalled pages on it),
// and the daily opener runs the cycle again every day: each rerun met the
// same refusal and logged it at ERROR again, for as long as it lasted. A
// failure whose cause is the one the provider's previous run failed with
// is logged at WARN, with the cycle and the cause; any other at ERROR: a
// first failure, a new cause, an earlier run that did not fail, or the
// earlier runs unknown (Temporal not answering the list).
func TestRerunMeetingItsFailureLogsAtWarn(t *testing.T) {
	t.Parallel()
	refusal := errors.New("settle p-00002: post ledger transaction settle-cyc-20260101-p-00002:CNY: " +
		"rpc error: code = InvalidArgument desc = provider:p-00002:pending would go negative")
	other := errors.New("settle p-00002: post ledger transaction settle-cyc-20260101-p-00002:CNY: " +
		"rpc error: code = InvalidArgument desc = provider:p-00002:account closed")
	tests := []struct {
		give      string
		earlier   []error // the provider's earlier runs, oldest first: their failures (nil: completed)
		listErr   error
		wantLevel slog.Level
	}{
		{give: "a first failure", wantLevel: slog.LevelError},
		{give: "a rerun meeting its previous run's refusal", earlier: []error{refusal}, wantLevel: slog.LevelWarn},
		{give: "a rerun meeting it again, two days on", earlier: []error{refusal, refusal}, wantLevel: slog.LevelWarn},
		{give: "a rerun meeting another refusal", earlier: []error{other}, wantLevel: slog.LevelError},
		{give: "a rerun meeting the refusal of a run before the last", earlier: []error{refusal, other}, wantLevel: slog.LevelError},
		{give: "a failure after a run that completed (held)", earlier: []error{nil}, wantLevel: slog.LevelError},
		{give: "earlier runs unknown", earlier: []error{refusal}, listErr: errors.New("unavailable"), wantLevel: slog.LevelError},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			t.Parallel()
			tc := newEnvClient()
			tc.listErr = tt.listErr
			id := domain.ProviderWorkflowID(cycle1.ID, "p-00002")
			for i, failure := range tt.earlier {
				run := fmt.Sprintf("run-%d", i+1)
				if failure == nil {
					tc.end(id, run, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED)
				} else {
					tc.fail(id, run, failure)
				}
			}
			tc.fail(id, "run-now", refusal)
			logs := &recordLog{}
			page := &app.PageSettler{States: noStates{}, Runner: ports.WorkflowRunner{Temporal: tc, TaskQueue: "settlement-test"},
				Timing: app.PageTiming{Poll: time.Millisecond, Ask: time.Millisecond}, Clock: clock.System{}, Log: slog.New(logs)}
			res, err := page.Settle(context.Background(), app.SettleProvidersInput{CycleID: cycle1.ID, Providers: []string{"p-00002"}, Window: 1},
				func(app.SettleProvidersResult) {})
			if err != nil || res != (app.SettleProvidersResult{Failed: 1}) {
				t.Fatalf("page: %+v, %v; want one provider failed", res, err)
			}
			got := logs.records()
			if len(got) != 1 || got[0].level != tt.wantLevel || !strings.HasPrefix(got[0].text, "provider settlement failed") ||
				!strings.Contains(got[0].text, "cycle="+cycle1.ID) || !strings.Contains(got[0].text, "provider=p-00002") ||
				!strings.Contains(got[0].text, "pending would go negative") {
				t.Fatalf("logs %+v; want one record at %s naming the cycle, p-00002 and the ledger's refusal", got, tt.wantLevel)
			}
		})
	}
}

// noStates is a settlement table with every provider pending.
type noStates struct{}

func (noStates) ProviderStates(context.Context, string, []string) (map[string]string, error) {
	return map[string]string{}, nil
}

// recordLog keeps the WARN and ERROR records, each as "msg key=value …".
type recordLog struct {
	mu   sync.Mutex
	recs []logRecord
}

type logRecord struct {
	level slog.Level
	text  string
}

func (l *recordLog) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelWarn }
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
	l.recs = append(l.recs, logRecord{r.Level, b.String()})
	return nil
}

func (l *recordLog) records() []logRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logRecord(nil), l.recs...)
}
