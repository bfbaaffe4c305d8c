package testkit

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
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
	if !strings.Contains(string(b), `"ratio":0.342,"ceiling":"ceiling_copy"`) {
		t.Fatalf("JSON line %s lacks the ratio and the ceiling", b)
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
	// A figure without a ceiling prints no ratio.
	b, err = json.Marshal(Figure{Bench: "report", Value: 3, Unit: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "ratio") || strings.Contains(string(b), "ceiling") {
		t.Fatalf("figure without ceiling: %s", b)
	}
}
