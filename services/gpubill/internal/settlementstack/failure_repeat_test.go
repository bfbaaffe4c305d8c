package settlementstack_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/settlement"
)

// A provider whose settlement fails for good keeps its cycle closing
// (GpubillSettlementStalled pages on it), and the daily opener runs the
// cycle's settlement again every day: each rerun met the same refusal and
// logged it at ERROR again, once a day for as long as it lasted. On a real
// Temporal dev server, the daily opener's own workflow run twice: the
// first failure is logged at ERROR; a rerun meeting the same refusal at
// WARN, naming the cycle, the provider and the cause; a rerun meeting
// another cause at ERROR again.
func TestRerunMeetingTheSameFailureLogsItAtWarn(t *testing.T) {
	t.Parallel()
	tc := dialTemporal(t, testkit.NewTemporal(t))
	logs := &levelLog{}
	f := newFixtureLog(t, tc, slog.New(logs))
	f.s.TestHooks().SetPageTiming(0, 300*time.Millisecond)
	f.seed(t, cycle1.ID, 2)
	f.clock.Set(cycle1.End.Add(time.Hour))
	ctx := context.Background()
	key := settlement.SettlementKey(cycle1.ID, "p-00001", "CNY")
	refusal := "provider:p-00001:pending would go negative"
	f.ledger.Refuse(key, status.Error(codes.InvalidArgument, refusal))
	closeLeftClosing(t, f, tc)
	check := func(when string, wantErrors, wantWarns []string) {
		t.Helper()
		errs, warns := logs.failures("p-00001", slog.LevelError), logs.failures("p-00001", slog.LevelWarn)
		if !causes(errs, wantErrors) || !causes(warns, wantWarns) {
			t.Fatalf("%s: p-00001's failures logged at ERROR %q, at WARN %q; want ERROR naming %q, WARN naming %q (each with cycle %s)",
				when, errs, warns, wantErrors, wantWarns, cycle1.ID)
		}
	}
	check("after the close", []string{refusal}, nil)

	// opener runs the daily opener's workflow and waits until p-00001's
	// failure has been logged n times in all and the cycle's run ended.
	opener := func(day, n int) {
		t.Helper()
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("opener-day-%d", day), TaskQueue: "settlement-test"},
			settlement.CycleOpenerWorkflowName)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			t.Fatalf("opener of day %d: %v", day, err)
		}
		testkit.Eventually(t, 60*time.Second, func() bool {
			return len(logs.failures("p-00001", slog.LevelError))+len(logs.failures("p-00001", slog.LevelWarn)) == n
		}, fmt.Sprintf("p-00001's failure logged again after the opener of day %d", day))
		waitCycleRunEnded(t, tc, cycle1.ID, 60*time.Second)
		wantCycleStatus(t, f, cycle1.ID, cycleClosing)
	}
	opener(1, 2)
	check("after the opener's rerun meeting the same refusal", []string{refusal}, []string{refusal})

	other := "provider:p-00001:account closed"
	f.ledger.Refuse(key, status.Error(codes.InvalidArgument, other))
	opener(2, 3)
	check("after the opener's rerun meeting another refusal", []string{refusal, other}, []string{refusal})
}

// causes reports whether each record names its cause, in order, and cycle1.
func causes(recs, want []string) bool {
	if len(recs) != len(want) {
		return false
	}
	for i, r := range recs {
		if !strings.Contains(r, want[i]) || !strings.Contains(r, "cycle="+cycle1.ID) {
			return false
		}
	}
	return true
}

// levelLog keeps every record, with its level, as "msg key=value …".
type levelLog struct {
	mu   sync.Mutex
	recs []levelRecord
}

type levelRecord struct {
	level slog.Level
	text  string
	attrs map[string]string
}

func (l *levelLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *levelLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *levelLog) WithGroup(string) slog.Handler            { return l }
func (l *levelLog) Handle(_ context.Context, r slog.Record) error {
	rec := levelRecord{level: r.Level, attrs: map[string]string{}}
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%s", a.Key, a.Value)
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	rec.text = b.String()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, rec)
	return nil
}

// failures are the records of provider's settlement failing, at level.
func (l *levelLog) failures(provider string, level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if r.level == level && r.attrs["provider"] == provider && strings.HasPrefix(r.text, "provider settlement failed") {
			out = append(out, r.text)
		}
	}
	return out
}
