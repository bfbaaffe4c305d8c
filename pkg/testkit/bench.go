package testkit

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/pkg/gctune"
)

// Bench skips t unless benchmarks were asked for (GPUBILL_BENCH=1, set by
// `make bench`) and name matches BENCH_FILTER. Benchmarks are tests named
// TestBench* so they can use the same real Postgres/JetStream fixtures; they
// measure and report, they do not assert speed.
//
// A benchmark that also prints the ceiling its figure is a ratio to names
// both (Bench(t, "ledger_postings", "ceiling_copy")): it runs when either
// matches. A benchmark that runs sets the process's garbage collector as
// the gpubill binaries do (gctune.Apply): the services it measures, its
// load generator and its ceiling all run in this process.
func Bench(t *testing.T, name string, also ...string) {
	t.Helper()
	if os.Getenv("GPUBILL_BENCH") != "1" {
		t.Skip("benchmark: run with make bench")
	}
	if f := os.Getenv("BENCH_FILTER"); f != "" {
		re, err := regexp.Compile(f)
		if err != nil {
			t.Fatalf("BENCH_FILTER: %v", err)
		}
		if !slices.ContainsFunc(append([]string{name}, also...), re.MatchString) {
			t.Skipf("benchmark %s does not match BENCH_FILTER", name)
		}
	}
	gctune.Apply() // the collector as gpubill's binaries set it: the services run in this process
}

// CeilingRuns is how many times a headline figure's ceiling is measured,
// one run after another; the figure is a ratio to their median (MedianOf).
const CeilingRuns = 3

// MedianOf runs measure n times (n odd), one after another, and returns the
// run whose Value is the median, its note naming every run's value in the
// order they ran. A ceiling is a second or so of one resource, and a run
// that short swings with what the machine's disk and neighbours do in it:
// five runs in a row of ceiling_copy ran 130 421–217 489 rows/s in one
// process and 213 626–301 331 in another, while the ledger_postings passes
// before them moved within ±8 %.
func MedianOf(n int, measure func() Figure) Figure {
	if n < 1 || n%2 == 0 {
		panic(fmt.Sprintf("MedianOf(%d): an odd number of runs", n))
	}
	runs := make([]Figure, n)
	vals := make([]string, n)
	for i := range runs {
		runs[i] = measure()
		vals[i] = strconv.FormatFloat(math.Round(runs[i].Value*10)/10, 'f', -1, 64) // to a tenth
	}
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b Figure) int { return cmp.Compare(a.Value, b.Value) })
	m := sorted[n/2]
	m.Note = fmt.Sprintf("median of %d runs (%s %s, in the order run); the median run: %s", n, strings.Join(vals, " / "), m.Unit, m.Note)
	return m
}

// Figure is one line of `make bench` output.
type Figure struct {
	Bench string  `json:"bench"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	N     int     `json:"n"`
	Note  string  `json:"note,omitempty"`
	// Rate is the load a latency figure was measured under, when it
	// drives one (requests/s achieved), and Load the 1-minute load
	// average when it ended (the machine is shared).
	Rate float64 `json:"rate,omitempty"`
	Load float64 `json:"load,omitempty"`
	// Ratio is Value over the Value of the ceiling named Ceiling, measured
	// in the same process run on the same machine (Against): machines
	// differ by 2×, ratios to a ceiling measured beside the figure do not.
	Ratio   float64 `json:"ratio,omitempty"`
	Ceiling string  `json:"ceiling,omitempty"`
	// Goal is what issue 16 holds the figure to ("ratio ≥ 0.5",
	// "≤ 50 ms"), and Met whether this run reached it; both absent for a
	// figure without a goal (ratioGoals, maxGoals).
	Goal string `json:"goal,omitempty"`
	Met  *bool  `json:"met,omitempty"`
}

// Issue 16's goals. ratioGoals: the least ratio of a figure to the figure
// it is measured against ("figure/ceiling"); maxGoals: the most a figure
// may be, in its own unit.
var (
	ratioGoals = map[string]float64{
		"pipeline/ceiling_jetstream_events": 0.5,
		"ledger_postings/ceiling_copy":      0.3,
		"ledger_api/ceiling_autocommit":     0.5,
		"settlement/ceiling_temporal":       0.5,
		"pipeline_history/pipeline":         0.8,
		"settlement_100k/settlement":        0.9,
	}
	maxGoals = map[string]float64{"ledger_api_p99": 50}
)

// judged is f with its goal and whether it met it, when it has one.
func (f Figure) judged() Figure {
	if f.Goal != "" {
		return f
	}
	met := false
	if g, ok := ratioGoals[f.Bench+"/"+f.Ceiling]; ok {
		f.Goal, met = fmt.Sprintf("ratio ≥ %g", g), f.Ratio >= g
	} else if g, ok := maxGoals[f.Bench]; ok && f.Ceiling == "" {
		f.Goal, met = fmt.Sprintf("≤ %g %s", g, f.Unit), f.Value <= g
	} else {
		return f
	}
	f.Met = &met
	return f
}

// Against returns f with Ratio = f.Value / c.Value (3 decimals),
// Ceiling = c.Bench, and the ratio's goal and whether it was met (Goal,
// Met) when the pair has one. Both must be rates (a unit ending in "/s"), the
// ceiling a positive finite one and the figure non-negative: a ratio to a
// ceiling that was not measured is an error, not a 0 or +Inf.
func (f Figure) Against(c Figure) (Figure, error) {
	switch {
	case !strings.HasSuffix(f.Unit, "/s") || !strings.HasSuffix(c.Unit, "/s"):
		return f, fmt.Errorf("ratio of %s (%s) to %s (%s): both must be rates", f.Bench, f.Unit, c.Bench, c.Unit)
	case !(c.Value > 0) || math.IsInf(c.Value, 0):
		return f, fmt.Errorf("ratio of %s to %s: ceiling %v is not a positive rate", f.Bench, c.Bench, c.Value)
	case !(f.Value >= 0) || math.IsInf(f.Value, 0):
		return f, fmt.Errorf("ratio of %s to %s: figure %v is not a rate", f.Bench, c.Bench, f.Value)
	}
	f.Ratio = math.Round(f.Value/c.Value*1000) / 1000
	f.Ceiling = c.Bench
	f.Goal, f.Met = "", nil
	return f.judged(), nil
}

// ReportAgainst reports c (the ceiling's own line) and then f with its
// ratio to c.
func ReportAgainst(t *testing.T, f, c Figure) {
	t.Helper()
	r, err := f.Against(c)
	if err != nil {
		t.Fatal(err)
	}
	Report(t, c)
	Report(t, r)
}

// Report prints a figure as one JSON line on stdout (make bench greps
// them), with its goal and whether it met it when it has one.
func Report(t *testing.T, f Figure) {
	t.Helper()
	b, err := json.Marshal(f.judged())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(os.Stdout, string(b)); err != nil {
		t.Fatalf("figure %s not reported: %v", f.Bench, err)
	}
}

// LoadAvg is the 1-minute load average (what else ran on the cores), 0
// when unknown.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return v
}
