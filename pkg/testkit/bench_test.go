package testkit

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/gctune"
)

func TestFigureAgainst(t *testing.T) {
	c := Figure{Bench: "ceiling_copy", Value: 120_000, Unit: "rows/s"}
	got, err := Figure{Bench: "ledger_postings", Value: 41_000, Unit: "postings/s"}.Against(c)
	if err != nil {
		t.Fatal(err)
	}
	if got.Ratio != 0.342 || got.Ceiling != "ceiling_copy" {
		t.Fatalf("ratio %v to %q, want 0.342 to ceiling_copy", got.Ratio, got.Ceiling)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"ratio":0.342,"ceiling":"ceiling_copy","goal":"ratio ≥ 0.3","met":true`) {
		t.Fatalf("JSON line %s lacks the ratio, the ceiling or the goal met", b)
	}
	for _, bad := range []struct {
		f, c Figure
	}{
		{Figure{Bench: "x", Value: 1, Unit: "events/s"}, Figure{Bench: "c", Value: 0, Unit: "events/s"}},
		{Figure{Bench: "x", Value: 1, Unit: "events/s"}, Figure{Bench: "c", Value: math.NaN(), Unit: "events/s"}},
		{Figure{Bench: "x", Value: 1, Unit: "events/s"}, Figure{Bench: "c", Value: math.Inf(1), Unit: "events/s"}},
		{Figure{Bench: "x", Value: -1, Unit: "events/s"}, Figure{Bench: "c", Value: 5, Unit: "events/s"}},
		{Figure{Bench: "x_p99", Value: 40, Unit: "ms"}, Figure{Bench: "c", Value: 5, Unit: "rows/s"}},
	} {
		if r, err := bad.f.Against(bad.c); err == nil {
			t.Errorf("%v against %v: ratio %v, want an error", bad.f, bad.c, r.Ratio)
		}
	}
	// A figure without a ceiling prints no ratio, nor a goal when it has none.
	b, err = json.Marshal(Figure{Bench: "report", Value: 3, Unit: "s"}.judged())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "ratio") || strings.Contains(string(b), "ceiling") || strings.Contains(string(b), "goal") || strings.Contains(string(b), "met") {
		t.Fatalf("figure without ceiling: %s", b)
	}
}

// TestFigureGoals: each of issue 16's goals is printed with the figure it
// applies to, and whether the run met it; a pair without a goal prints
// none.
func TestFigureGoals(t *testing.T) {
	rate := func(bench string, v float64) Figure { return Figure{Bench: bench, Value: v, Unit: "events/s"} }
	against := func(f, c Figure) Figure {
		t.Helper()
		r, err := f.Against(c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	settlement100k := rate("settlement_100k", 212)
	for _, tc := range []struct {
		f    Figure
		goal string
		met  bool
	}{
		{against(rate("pipeline", 49_764), rate("ceiling_jetstream_events", 140_511)), "ratio ≥ 0.5", false},
		{against(rate("pipeline", 92_677), rate("ceiling_jetstream_events", 167_679)), "ratio ≥ 0.5", true},
		{against(rate("ledger_postings", 28_000), rate("ceiling_copy", 100_000)), "ratio ≥ 0.3", false},
		{against(rate("ledger_api", 3_516), rate("ceiling_autocommit", 6_029)), "ratio ≥ 0.5", true},
		{against(rate("settlement", 104), rate("ceiling_temporal", 207)), "ratio ≥ 0.5", true}, // 0.502
		{against(rate("settlement", 103), rate("ceiling_temporal", 207)), "ratio ≥ 0.5", false},
		{against(rate("pipeline_history", 53_198), rate("pipeline", 61_128)), "ratio ≥ 0.8", true},
		{against(settlement100k, rate("settlement", 226)), "ratio ≥ 0.9", true},
		{against(settlement100k, rate("settlement", 240)), "ratio ≥ 0.9", false},
		{against(settlement100k, rate("ceiling_temporal", 354)), "", false}, // its goal is against settlement
		{against(rate("settlement_1k", 300), rate("ceiling_temporal", 354)), "", false},
		{Figure{Bench: "ledger_api_p99", Value: 38.8, Unit: "ms"}.judged(), "≤ 50 ms", true},
		{Figure{Bench: "ledger_api_p99", Value: 56.1, Unit: "ms"}.judged(), "≤ 50 ms", false},
		{Figure{Bench: "ledger_api_grpc_p99", Value: 56.1, Unit: "ms"}.judged(), "", false},
	} {
		if tc.f.Goal != tc.goal || (tc.goal != "" && (tc.f.Met == nil || *tc.f.Met != tc.met)) || (tc.goal == "" && tc.f.Met != nil) {
			met := "absent"
			if tc.f.Met != nil {
				met = fmt.Sprint(*tc.f.Met)
			}
			t.Errorf("%s (ratio %v to %q, value %v): goal %q met %s; want %q met %v", tc.f.Bench, tc.f.Ratio, tc.f.Ceiling, tc.f.Value, tc.f.Goal, met, tc.goal, tc.met)
		}
		if tc.goal == "" {
			continue
		}
		b, err := json.Marshal(tc.f.judged())
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`"goal":%q,"met":%v`, tc.goal, tc.met); !strings.Contains(string(b), want) {
			t.Errorf("JSON line %s lacks %s", b, want)
		}
	}
}

// The pressure file's "some" line gives its total in microseconds; any
// other line, or a total that is not a number, is refused.
func TestPressureSome(t *testing.T) {
	got, ok := pressureSome("some avg10=3.38 avg60=15.41 avg300=16.68 total=580082146")
	if !ok || got != 580082146*time.Microsecond {
		t.Errorf("pressureSome = %v (ok %v), want 580.082146s", got, ok)
	}
	for _, bad := range []string{"", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0", "some avg10=1.00", "some total=x"} {
		if _, ok := pressureSome(bad); ok {
			t.Errorf("pressureSome(%q) read, want refused", bad)
		}
	}
}

// Where the kernel keeps CPU pressure, a machine note says for how much of
// its window some task waited for a core, a share between 0 and 100 %.
func TestMachineNoteSaysHowLongTasksWaited(t *testing.T) {
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		t.Skip("no /proc/pressure/cpu on this kernel")
	}
	m := StartMachine()
	time.Sleep(50 * time.Millisecond)
	note := m.Note(10, "row")
	var share float64
	i := strings.Index(note, ", a task waiting for one ")
	if i < 0 {
		t.Fatalf("note %q does not say how long tasks waited", note)
	}
	if _, err := fmt.Sscanf(note[i:], ", a task waiting for one %f %% of the time", &share); err != nil || share < 0 || share > 100 {
		t.Fatalf("note %q: waiting share %v (%v), want 0–100", note, share, err)
	}
}

// TestStatTicks: the machine's busy ticks are user, nice, system, irq and
// softirq; idle, iowait and steal count in the total only, and guest time
// (inside user and nice already) not at all.
func TestStatTicks(t *testing.T) {
	busy, total, ok := statTicks("cpu  10 1 5 100 3 1 1 2 7 4")
	if !ok || busy != 18 || total != 123 {
		t.Errorf("statTicks = %d busy of %d (ok %v), want 18 of 123", busy, total, ok)
	}
	for _, bad := range []string{"cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		if _, _, ok := statTicks(bad); ok {
			t.Errorf("statTicks(%q) read, want refused", bad)
		}
	}
	if _, _, ok := machineTicks(); !ok {
		t.Error("/proc/stat not read")
	}
}

// A benchmark that runs sets the collector as the binaries do (its
// services run in the test process); one that is skipped changes nothing.
func TestBenchSetsTheCollectorAsTheBinariesDo(t *testing.T) {
	percent := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set: the collector's target is whoever set it")
	}
	t.Setenv("GPUBILL_BENCH", "1")
	t.Setenv("BENCH_FILTER", "^figure$")
	t.Run("skipped", func(t *testing.T) { Bench(t, "other") })
	if p := debug.SetGCPercent(100); p != 100 {
		t.Fatalf("a skipped benchmark set GOGC %d", p)
	}
	t.Run("runs", func(t *testing.T) { Bench(t, "figure") })
	if p := debug.SetGCPercent(100); p != gctune.Percent {
		t.Fatalf("a benchmark ran at GOGC %d, want %d", p, gctune.Percent)
	}
}

// TestMedianOfRunsAndNamesEveryRun: the figure is the median run's, in
// order, every run's value named in its note; an even count is refused.
func TestMedianOfRunsAndNamesEveryRun(t *testing.T) {
	vals := []float64{301_000, 130_000, 212_000}
	calls := 0
	got := MedianOf(3, func() Figure {
		f := Figure{Bench: "ceiling_copy", Value: vals[calls], Unit: "rows/s", N: 100, Note: fmt.Sprintf("run %d", calls)}
		calls++
		return f
	})
	if calls != 3 || got.Value != 212_000 || got.Bench != "ceiling_copy" || got.N != 100 {
		t.Fatalf("%d runs, figure %+v; want 3 runs and the median, 212000", calls, got)
	}
	if want := "median of 3 runs (301000 / 130000 / 212000 rows/s, in the order run); the median run: run 2"; got.Note != want {
		t.Fatalf("note %q, want %q", got.Note, want)
	}
	vals = []float64{5, 1, 3, 9, 7}
	calls = 0
	if got := MedianOf(5, func() Figure { calls++; return Figure{Value: vals[calls-1]} }); got.Value != 5 {
		t.Fatalf("median of %v: %v, want 5", vals, got.Value)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MedianOf(2) ran: want a panic (no middle run)")
		}
	}()
	MedianOf(2, func() Figure { return Figure{} })
}
