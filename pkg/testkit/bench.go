package testkit

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Bench skips t unless benchmarks were asked for (GPUBILL_BENCH=1, set by
// `make bench`) and name matches BENCH_FILTER. Benchmarks are tests named
// TestBench* so they can use the same real Postgres/JetStream fixtures; they
// measure and report, they do not assert speed.
func Bench(t *testing.T, name string) {
	t.Helper()
	if os.Getenv("GPUBILL_BENCH") != "1" {
		t.Skip("benchmark: run with make bench")
	}
	if f := os.Getenv("BENCH_FILTER"); f != "" {
		re, err := regexp.Compile(f)
		if err != nil {
			t.Fatalf("BENCH_FILTER: %v", err)
		}
		if !re.MatchString(name) {
			t.Skipf("benchmark %s does not match BENCH_FILTER", name)
		}
	}
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
}

// Report prints a figure as one JSON line on stdout (make bench greps them).
func Report(t *testing.T, f Figure) {
	t.Helper()
	b, err := json.Marshal(f)
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
