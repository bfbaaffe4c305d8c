package postgres

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestLinesJSONIsMarshal holds appendLines to json.Marshal's bytes: plain
// fields, and fields needing an escape (quotes, backslashes, control
// characters, HTML's three, non-ASCII, invalid UTF-8, U+2028), nil and
// empty line lists.
func TestLinesJSONIsMarshal(t *testing.T) {
	pieces := []string{"", "a", "bev-1", "RTX_4090", "2.83", "2026-12-02T17:58:00Z", "rc_01a23e58-99b0", `"`, `\`, "\n", "\x00", "\x1f", "\x7f",
		"<", ">", "&", "é", "租户", "\xff", "\xe2\x80\xa8", "night 22:00-06:00", "100-500 GPU-h", " "}
	r := rand.New(rand.NewPCG(3, 5))
	str := func() string {
		var b []byte
		for n := r.IntN(4); n > 0; n-- {
			b = append(b, pieces[r.IntN(len(pieces))]...)
		}
		return string(b)
	}
	check := func(ls []line) {
		t.Helper()
		want, err := json.Marshal(ls)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendLines([]byte("prefix"), ls)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("appendLines = %s\njson.Marshal = %s", got[len("prefix"):], want)
		}
	}
	check(nil)
	check([]line{})
	for i := 0; i < 20_000; i++ {
		ls := make([]line, r.IntN(4))
		for j := range ls {
			ls[j] = line{EventID: str(), Kind: str(), GPUModel: str(), GPUCount: int32(r.IntN(130) - 1), Band: str(), Tier: str(),
				RateCardID: str(), Start: str(), End: str(), GPUHours: str(), UnitPrice: str(), Multiplier: str(), Amount: str()}
		}
		check(ls)
	}
}
